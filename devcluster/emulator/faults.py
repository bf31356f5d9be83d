"""Injected faults, one optional Fault per endpoint, set with `PUT /control/faults/{endpoint}`.

A PUT replaces the endpoint's fault as a whole (DELETE clears it). Frozen endpoints serve the values of
the moment the freeze began; re-PUTting a fault that is still frozen keeps that moment, so the
data's age keeps growing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devcluster.emulator.errors import RequestError

EXPOSITION_ENDPOINTS = ("dcgm", "node-exporter", "opencost")
ENDPOINTS = (*EXPOSITION_ENDPOINTS, "cmdb", "metrics-api")

_SERVED = frozenset({"status", "delay", "malformed", "nan", "inf", "missing_nodes", "frozen"})
# metrics.k8s.io quantities have no NaN or Inf to serve.
APPLICABLE: dict[str, frozenset[str]] = {
    "dcgm": _SERVED,
    "node-exporter": _SERVED,
    "opencost": _SERVED,
    "cmdb": _SERVED | {"bad_auth"},
    "metrics-api": _SERVED - {"nan", "inf"},
}
MAX_DELAY_S = 600.0


@dataclass(frozen=True)
class Fault:
    status: int | None = None
    delay: float = 0.0
    malformed: bool = False
    nan: bool = False
    inf: bool = False
    missing_nodes: frozenset[str] = frozenset()
    frozen: bool = False
    bad_auth: bool = False

    def is_missing(self, name: str) -> bool:
        return bool(self.missing_nodes) and ("*" in self.missing_nodes or name in self.missing_nodes)

    def value_override(self) -> float | None:
        """What every value of the endpoint becomes under nan/inf, or None."""
        if self.nan:
            return math.nan
        if self.inf:
            return math.inf
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.status is not None:
            out["status"] = self.status
        if self.delay:
            out["delay"] = self.delay
        for flag in ("malformed", "nan", "inf", "frozen", "bad_auth"):
            if getattr(self, flag):
                out[flag] = True
        if self.missing_nodes:
            out["missing_nodes"] = sorted(self.missing_nodes)
        return out


def check_endpoint(endpoint: str) -> str:
    if endpoint not in APPLICABLE:
        raise RequestError(f"unknown fault endpoint {endpoint!r}; known: {list(ENDPOINTS)}")
    return endpoint


def parse_fault(endpoint: str, body: Any) -> Fault:
    check_endpoint(endpoint)
    if not isinstance(body, Mapping):
        raise RequestError("a fault must be a JSON object")
    unknown = sorted(set(body) - APPLICABLE["cmdb"])
    if unknown:
        raise RequestError(f"unknown fault field(s) {unknown}; known: {sorted(APPLICABLE['cmdb'])}")
    inapplicable = sorted(set(body) - APPLICABLE[endpoint])
    if inapplicable:
        raise RequestError(f"fault field(s) {inapplicable} do not apply to {endpoint}; "
                           f"it supports {sorted(APPLICABLE[endpoint])}")
    status = body.get("status")
    valid_status = isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599
    if status is not None and not valid_status:
        raise RequestError(f"status must be an HTTP error code 400..599, got {status!r}")
    delay = body.get("delay", 0.0) or 0.0
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY_S:
        raise RequestError(f"delay must be seconds in 0..{MAX_DELAY_S:.0f}, got {delay!r}")
    flags = {name: _flag(body, name) for name in ("malformed", "nan", "inf", "frozen", "bad_auth")}
    if flags["nan"] and flags["inf"]:
        raise RequestError("nan and inf are exclusive")
    missing = body.get("missing_nodes") or []
    if not isinstance(missing, list) or not all(isinstance(n, str) for n in missing):
        raise RequestError('missing_nodes must be a list of node names (or ["*"])')
    return Fault(status=status, delay=float(delay), missing_nodes=frozenset(missing), **flags)


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {value!r}")
    return value


def garble_text(body: str) -> str:
    """Cuts the exposition mid-line and adds lines no Prometheus parser accepts."""
    cut = body[: max(1, len(body) // 2)]
    return cut + '{broken="\n# TYPE\nmetric{label=unquoted} not-a-number\n'


def garble_json(body: str) -> str:
    """A truncated document: unbalanced brackets can never parse."""
    return body[: max(1, len(body) // 2)]
