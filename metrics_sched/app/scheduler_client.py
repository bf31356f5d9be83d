"""The client of a running scheduler's endpoints for `explain`, `sources`, `decisions` and `replay` (app/cli/): where
the requests go and with which credentials.

Over HTTPS (the default) it sends the kubeconfig's bearer token (the scheduler reviews it with the API server) and
verifies the serving certificate with --ca-file, else the kubeconfig cluster's CA. A plain http:// URL (a scheduler
run with `server.insecure` on loopback) gets no credentials. Given the Service (--service, or --url
https://NAME.NAMESPACE.svc:PORT) it asks the replica holding the leader Lease, never a standby
(app/leader_target.py), and by default through the API server's pod proxy
(/api/v1/namespaces/NS/pods/https:POD:PORT/proxy/...): from a laptop, with the kubeconfig's credentials of any kind
for the API server, no port-forward, and no connection to the pod's port (its NetworkPolicy stays closed to all
but Prometheus and the API server). The API server consumes the Authorization header; the scheduler's token goes in
X-Metrics-Sched-Authorization (serving/gate.py says why that is safe). --direct connects to the pod's address
instead (from inside the cluster).
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx

from metrics_sched.app.errors import UserError
from metrics_sched.app.leader_target import LeaderTarget, find_leader, service_of_host
from metrics_sched.serving.gate import PROXIED_AUTHORIZATION_HEADER

if TYPE_CHECKING:
    from collections.abc import Generator

    from adapters.kubernetes import KubeConfig

DEFAULT_URL = os.environ.get("METRICS_SCHED_URL", "https://127.0.0.1:10259")
DEFAULT_LEASE_NAME = "metrics-sched"  # leaderElection.resourceName as shipped (deploy/configmap.yaml)


@dataclass
class Endpoint:
    """Where the requests go and how: the client carries TLS verification and the bearer token."""

    url: str
    client: httpx.Client
    server_name: str | None = None  # checked in the certificate instead of the URL's host (a pod's address)


def _namespaced(value: str, flag: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise UserError(f"{flag}: give NAMESPACE/NAME, got {value!r}")
    return namespace, name


class ThroughTheApiServer(httpx.Auth):
    """The API server's own authentication of the user (`api_auth`, the kubeconfig's: a token, or nothing when the
    TLS client certificate is the credential) plus the scheduler's bearer token in X-Metrics-Sched-Authorization,
    the header that survives the API server's proxy."""

    def __init__(self, api_auth: httpx.Auth | None, token: str) -> None:
        self._api_auth = api_auth
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[PROXIED_AUTHORIZATION_HEADER] = f"Bearer {self._token}"
        if self._api_auth is None:
            yield request
        else:
            yield from self._api_auth.auth_flow(request)

    def __repr__(self) -> str:  # never the token
        return f"ThroughTheApiServer({self._api_auth!r})"


def proxy_url(server: str, namespace: str, target: LeaderTarget) -> str:
    """The API server's proxy to the leader pod's HTTPS port (`pods/proxy`, get: the find-leader Role)."""
    return f"{server.rstrip('/')}/api/v1/namespaces/{namespace}/pods/https:{target.pod}:{target.port}/proxy"


def connect(args: argparse.Namespace) -> Endpoint:
    """The endpoint the flags name: the URL as given, or the leader behind the Service (through the API server
    unless --direct). `default_service` (the kubectl plugin's) applies when neither flag nor $METRICS_SCHED_URL
    names a scheduler."""
    default_service = getattr(args, "default_service", None)
    if not args.url and not args.service and default_service and "METRICS_SCHED_URL" not in os.environ:
        args.service = default_service
    url = args.url or DEFAULT_URL
    service = _namespaced(args.service, "--service") if args.service else None
    if service is None and args.url:
        service = service_of_host(urlsplit(args.url).hostname or "")
    if urlsplit(url).scheme == "http" and service is None:
        # A scheduler serving plain HTTP (server.insecure, loopback): no credentials to send over it.
        return Endpoint(url, httpx.Client(timeout=5, trust_env=False))
    if urlsplit(url).scheme not in ("http", "https"):
        raise UserError(f"--url: must be an http:// or https:// URL, got {url!r}")
    return _authenticated(args, url, service)


def _authenticated(args: argparse.Namespace, url: str, service: tuple[str, str] | None) -> Endpoint:
    from adapters.kubernetes import KubeClient, KubeConfigError, TokenError, load
    from adapters.kubernetes.tokens import BearerAuth

    try:
        kube = load(args.kubeconfig)
        if kube.token is None:
            raise UserError(f"{kube.origin}: the user has no bearer token to send (the scheduler authenticates "
                            "tokens only, by TokenReview): use a token user, e.g. from `kubectl create token`")
        verify = ssl.create_default_context(cafile=str(args.ca_file)) if args.ca_file else kube.ssl_context()
        server_name = None
        if service is not None:
            namespace, name = service
            lease = _namespaced(args.lease, "--lease") if args.lease else (namespace, DEFAULT_LEASE_NAME)
            with KubeClient(kube, max_connections=2, max_watch_connections=1, request_timeout=10) as client:
                target = find_leader(client, namespace, name, *lease)
            if not getattr(args, "direct", False):
                return _through_the_api_server(kube, namespace, target)
            print(f"asking the leader {target.pod} at {target.url}", file=sys.stderr)
            url, server_name = target.url, target.server_name
    except (KubeConfigError, TokenError) as exc:  # their messages never contain a credential
        raise UserError(str(exc)) from None
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"--ca-file {args.ca_file}: cannot load it: {exc}") from None
    http = httpx.Client(verify=verify, auth=BearerAuth(kube.token), timeout=5, trust_env=False)
    return Endpoint(url, http, server_name)


def _through_the_api_server(kube: KubeConfig, namespace: str, target: LeaderTarget) -> Endpoint:
    """The leader through the API server's pod proxy, with the kubeconfig's credentials for the API server and its
    token for the scheduler (the API server checked pods/proxy; the scheduler checks the path's permission)."""
    from adapters.kubernetes import KubeConfigError

    assert kube.token is not None  # checked by the caller
    token = kube.token.token()
    if not token:
        raise UserError(f"{kube.origin}: the credential is a client certificate, no bearer token to send (the "
                        "scheduler authenticates tokens only, by TokenReview): use a token user")
    try:
        options = kube.http_options()
    except KubeConfigError as exc:
        raise UserError(str(exc)) from None
    options.pop("base_url", None)
    options["auth"] = ThroughTheApiServer(options.get("auth"), token)
    url = proxy_url(kube.server, namespace, target)
    print(f"asking the leader {target.pod} through the API server ({kube.server})", file=sys.stderr)
    # The proxy adds the API server's own connect and the pod's answer: more than a direct connection's 5 s.
    return Endpoint(url, httpx.Client(**options, timeout=15))


__all__ = ["DEFAULT_LEASE_NAME", "DEFAULT_URL", "Endpoint", "ThroughTheApiServer", "connect", "proxy_url"]
