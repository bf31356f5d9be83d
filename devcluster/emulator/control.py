"""EmulatorControl: the typed client tests and the dev cluster use to drive the emulator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx


class EmulatorError(RuntimeError):
    """The emulator answered 4xx/5xx; `message` is its explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"emulator HTTP {status}: {message}")
        self.status = status
        self.message = message


class EmulatorControl:
    def __init__(self, base_url: str, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> EmulatorControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        resp = self.client.request(method, path, json=body)
        if resp.status_code >= 400:
            try:
                payload = resp.json()
                message = payload.get("error") or payload.get("detail") or resp.text
            except (ValueError, AttributeError):
                message = resp.text
            raise EmulatorError(resp.status_code, f"{method} {path}: {message}")
        return resp.json() if resp.content else None

    # -- nodes -------------------------------------------------------------------------------------
    def register_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Idempotent; keys: name, ip, gpus, cpu, memory_bytes, zone, instance_type, region."""
        result: dict[str, Any] = self._call("POST", "/control/nodes", {"nodes": [dict(n) for n in nodes]})
        return result

    def remove_node(self, name: str) -> None:
        self._call("DELETE", f"/control/nodes/{quote(name, safe='')}")

    def nodes(self) -> list[str]:
        names: list[str] = self._call("GET", "/control/nodes")["nodes"]
        return names

    def values(self, name: str) -> dict[str, Any]:
        """Registration, profile and the values served right now (before faults)."""
        result: dict[str, Any] = self._call("GET", f"/control/nodes/{quote(name, safe='')}")
        return result

    def set_values(self, name: str, **fields: Any) -> dict[str, Any]:
        """Exact overrides, e.g. gpu_temp=91 (all GPUs), gpu_temp=[60, 91, ...] (each GPU) or gpu_temp={"3": 91}
        (GPU 3 only); None clears a field."""
        result: dict[str, Any] = self._call("PATCH", f"/control/nodes/{quote(name, safe='')}/values", fields)
        return result

    def set_gpu_values(self, name: str, gpu: int, **fields: Any) -> dict[str, Any]:
        """Exact overrides of one GPU's per-GPU fields, e.g. set_gpu_values("node-1", 3, gpu_temp=91): the node's
        other GPUs keep their values (drifting, or their own overrides); None lets that GPU drift again."""
        return self.set_values(name, **{field: {str(gpu): value} for field, value in fields.items()})

    def set_many(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        self._call("PATCH", "/control/nodes/values", {"nodes": {k: dict(v) for k, v in values.items()}})

    def clear_values(self, name: str, *fields: str) -> dict[str, Any]:
        """Clears the named overrides, or all of the node's overrides when none are named."""
        if fields:
            return self.set_values(name, **dict.fromkeys(fields))
        result: dict[str, Any] = self._call("DELETE", f"/control/nodes/{quote(name, safe='')}/values")
        return result

    # -- faults ------------------------------------------------------------------------------------
    def set_fault(self, endpoint: str, **fault: Any) -> dict[str, Any]:
        """endpoint: dcgm, node-exporter, opencost, cmdb or metrics-api; replaces that endpoint's fault."""
        result: dict[str, Any] = self._call("PUT", f"/control/faults/{endpoint}", fault)
        return result

    def clear_faults(self, endpoint: str | None = None) -> None:
        self._call("DELETE", f"/control/faults/{endpoint}" if endpoint else "/control/faults")

    def faults(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/control/faults")
        return result

    # -- Custom Metrics APIs ---------------------------------------------------------------------------
    def set_custom_metric(self, metric: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """Per node: a number, a quantity string served verbatim, {value, timestamp}, or None to clear."""
        result: dict[str, Any] = self._call("PUT", f"/control/custom-metrics/nodes/{quote(metric, safe='')}",
                                            {"nodes": dict(values)})
        return result

    def set_external_metric(self, namespace: str, metric: str,
                            items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The series served for external.metrics.k8s.io: [{value, labels?, timestamp?}]; [] clears."""
        path = f"/control/custom-metrics/external/{quote(namespace, safe='')}/{quote(metric, safe='')}"
        result: dict[str, Any] = self._call("PUT", path, {"items": [dict(i) for i in items]})
        return result

    # -- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Node count, faults and per-route request counters."""
        result: dict[str, Any] = self._call("GET", "/control/state")
        return result

    def reset_counters(self) -> None:
        self._call("POST", "/control/counters/reset")

    def healthy(self) -> bool:
        try:
            return self.client.get("/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False
