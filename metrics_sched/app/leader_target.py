"""Which scheduler replica `explain` and `sources` ask: given the Service, the pod holding the leader-election
Lease (only the leader has scheduled anything, and a standby's /decisions is empty or stale).

The Lease's holderIdentity is `<hostname>_<random>` (kube-scheduler's form, and ours by default; a pod's hostname
is its name) or, with `run --identity`, any name: an endpoint whose Pod is named like that is the leader. Its
address and the Service's port come from the Service's EndpointSlices. The connection goes to the pod's address
but the TLS check is for the Service's DNS name (`NAME.NAMESPACE.svc`), the name a serving certificate is issued
for. Needs, in the Service's namespace: get services and leases, list endpointslices (deploy/clusterrole-reader.yaml).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metrics_sched.app.errors import UserError
from metrics_sched.ports import ApiError

if TYPE_CHECKING:
    from adapters.kubernetes import KubeClient

SERVICE_HOST = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
                          r"\.svc(\.cluster\.local)?\.?$")
PREFERRED_PORT = "https"


@dataclass(frozen=True)
class LeaderTarget:
    url: str  # https://POD_IP:PORT
    server_name: str  # the name the serving certificate is checked against (and SNI)
    pod: str
    holder: str
    port: int = 0  # the pod's port (PORT of the url): the API server's pod proxy names it


def service_of_host(host: str) -> tuple[str, str] | None:
    """(namespace, name) when `host` is a Service's cluster DNS name, else None."""
    match = SERVICE_HOST.match(host)
    return (match["namespace"], match["name"]) if match else None


def holds(holder: str, pod: str) -> bool:
    return holder == pod or holder.startswith(f"{pod}_")


def _get(client: KubeClient, path: str, what: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    try:
        return client.request("GET", path, params=params)
    except ApiError as exc:
        if exc.status == 404:
            raise UserError(f"{what} not found") from None
        if exc.status == 403:
            raise UserError(f"not allowed to read {what} (403): {exc.message}") from None
        raise UserError(f"cannot read {what}: {exc}") from None


def _service_port(service: dict[str, Any], what: str) -> str | None:
    """The Service port's name (EndpointSlice ports carry it): `https`, else the only one."""
    ports = (service.get("spec") or {}).get("ports") or []
    named = [p for p in ports if p.get("name") == PREFERRED_PORT]
    if named:
        return PREFERRED_PORT
    if len(ports) == 1:
        return str(ports[0].get("name") or "")
    raise UserError(f"{what} has {len(ports)} ports and none is named {PREFERRED_PORT!r}")


def find_leader(client: KubeClient, namespace: str, name: str, lease_namespace: str, lease_name: str,
                ) -> LeaderTarget:
    service_what = f"Service {namespace}/{name}"
    port_name = _service_port(_get(client, f"/api/v1/namespaces/{namespace}/services/{name}", service_what),
                              service_what)
    lease_what = f"Lease {lease_namespace}/{lease_name}"
    lease = _get(client, f"/apis/coordination.k8s.io/v1/namespaces/{lease_namespace}/leases/{lease_name}",
                 lease_what)
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    if not holder:
        raise UserError(f"{lease_what} has no holder: no replica leads now (is the scheduler running?)")
    slices = _get(client, f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                  f"the EndpointSlices of {service_what}",
                  params={"labelSelector": f"kubernetes.io/service-name={name}"})
    seen: list[str] = []
    for endpoint_slice in slices.get("items") or []:
        ports = [p for p in endpoint_slice.get("ports") or [] if (p.get("name") or "") == port_name]
        for endpoint in endpoint_slice.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind") != "Pod" or not endpoint.get("addresses"):
                continue
            seen.append(str(ref.get("name")))
            if holds(holder, str(ref.get("name"))) and ports and ports[0].get("port"):
                address = str(endpoint["addresses"][0])
                host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
                return LeaderTarget(url=f"https://{host}:{ports[0]['port']}", server_name=f"{name}.{namespace}.svc",
                                    pod=str(ref["name"]), holder=holder, port=int(ports[0]["port"]))
    pods = ", ".join(sorted(seen)) or "none"
    raise UserError(f"the leader {holder!r} ({lease_what}) is not an endpoint of {service_what} "
                    f"(pods: {pods}; is it ready, and is the Lease the Service's scheduler's? see --lease)")


__all__ = ["PREFERRED_PORT", "LeaderTarget", "find_leader", "holds", "service_of_host"]
