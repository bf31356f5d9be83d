"""The emulator's shared state behind one lock: the scenario, faults, request counters, render caches.

Route handlers (one thread per connection) call into this. Expositions render outside the state lock,
under a per-endpoint lock, so concurrent scrapes render once and share the body.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devcluster.emulator import assets, cmdb
from devcluster.emulator.cpu_counters import CpuSample
from devcluster.emulator.custom_metrics import CustomMetricsStore
from devcluster.emulator.errors import RequestError
from devcluster.emulator.exposition import (
    DcgmRenderer,
    EndpointView,
    NodeExporterRenderer,
    OpenCostRenderer,
    Renderer,
    RenderOptions,
    Sample,
)
from devcluster.emulator.faults import Fault, check_endpoint, garble_text, parse_fault
from devcluster.emulator.fleet import Fleet, FleetValues, compute
from devcluster.emulator.metrics_api import NodeUsage
from devcluster.emulator.overrides import OverrideValue
from devcluster.emulator.scenario import Scenario

# Long enough that a burst of scrapes shares one render, short enough that drift and counters move.
EXPOSITION_TTL_S = 0.5
NO_FAULT = Fault()


@dataclass
class Frozen:
    """An endpoint frozen at time `t`: it keeps serving the overrides and counters of that moment."""

    t: float
    overrides: dict[str, dict[str, OverrideValue]]
    cpu: dict[str, CpuSample] = field(default_factory=dict)
    cache: tuple[Fleet, FleetValues] | None = None

    def values(self, fleet: Fleet) -> FleetValues:
        # Recomputed only when membership changed; nodes registered later show their values at `t`.
        if self.cache is None or self.cache[0] is not fleet:
            self.cache = (fleet, compute(fleet, self.overrides, self.t))
        return self.cache[1]


class Emulator:
    def __init__(self, seed: int, *, options: RenderOptions | None = None, cmdb_token: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.options = options or RenderOptions()
        self.cmdb_token = cmdb_token
        self.clock = clock
        self.lock = threading.RLock()
        self.scenario = Scenario(seed)
        self.custom_metrics = CustomMetricsStore(clock)
        self._faults: dict[str, Fault] = {}
        self._frozen: dict[str, Frozen] = {}
        self._requests: Counter[str] = Counter()
        self._generation = 0  # bumped by every change, so cached bodies never outlive what they show
        self._bodies: dict[str, tuple[tuple[int, int], bytes]] = {}
        self._renderers: dict[str, Renderer] = {
            "dcgm": DcgmRenderer(self.options),
            "node-exporter": NodeExporterRenderer(self.options),
            "opencost": OpenCostRenderer(self.options),
        }
        self._render_locks = {endpoint: threading.Lock() for endpoint in self._renderers}

    def _changed(self) -> None:
        self._generation += 1

    # -- nodes -------------------------------------------------------------------------------------
    def register(self, body: Any) -> dict[str, Any]:
        nodes = body.get("nodes") if isinstance(body, Mapping) else None
        if not isinstance(nodes, list):
            raise RequestError('expected {"nodes": [{"name": ..., ...}, ...]}')
        with self.lock:
            regs = [self.scenario.parse_registration(raw) for raw in nodes]  # all valid, or nothing changes
            now = self.clock()
            changed = sum(self.scenario.register(reg, now) for reg in regs)
            self.scenario.fleet()  # build the arrays now: the caller waits for this, not the next scrape
            self._changed()
            return {"registered": len(regs), "changed": changed, "nodes": len(self.scenario)}

    def remove(self, name: str) -> None:
        with self.lock:
            if not self.scenario.remove(name):
                raise RequestError(f"unknown node {name!r}", status=404)
            self._changed()

    def names(self) -> list[str]:
        with self.lock:
            return list(self.scenario.names())

    def describe(self, name: str) -> dict[str, Any]:
        with self.lock:
            return self.scenario.describe(name, self.clock())

    def set_values(self, name: str, body: Any) -> dict[str, Any]:
        with self.lock:
            parsed = self.scenario.parse_overrides(name, body)
            now = self.clock()
            self.scenario.apply_overrides({name: parsed}, now)
            self._changed()
            return self.scenario.describe(name, now)

    def set_many(self, body: Any) -> dict[str, Any]:
        nodes = body.get("nodes") if isinstance(body, Mapping) else None
        if not isinstance(nodes, Mapping):
            raise RequestError('expected {"nodes": {"<name>": {"<field>": value, ...}, ...}}')
        with self.lock:
            parsed = {name: self.scenario.parse_overrides(name, fields) for name, fields in nodes.items()}
            self.scenario.apply_overrides(parsed, self.clock())
            self._changed()
            return {"updated": sorted(parsed)}

    def clear_values(self, name: str) -> dict[str, Any]:
        with self.lock:
            now = self.clock()
            self.scenario.clear_overrides(name, now)
            self._changed()
            return self.scenario.describe(name, now)

    # -- faults ------------------------------------------------------------------------------------
    def fault(self, endpoint: str) -> Fault:
        with self.lock:
            return self._faults.get(endpoint, NO_FAULT)

    def set_fault(self, endpoint: str, body: Any) -> dict[str, Any]:
        fault = parse_fault(endpoint, body)
        with self.lock:
            self._faults[endpoint] = fault
            if not fault.frozen:
                self._frozen.pop(endpoint, None)
            elif endpoint not in self._frozen:  # re-PUTting a frozen fault keeps the original moment
                now = self.clock()
                frozen = self._frozen[endpoint] = Frozen(now, self.scenario.overrides())
                if endpoint == "node-exporter":
                    snapshot = self.scenario.snapshot(now)
                    nodes = list(range(len(snapshot.fleet)))
                    samples = self.scenario.cpu_samples(snapshot, nodes)
                    frozen.cpu = dict(zip(snapshot.fleet.names, samples, strict=True))
            self._changed()
            return self.faults()

    def clear_fault(self, endpoint: str | None) -> dict[str, Any]:
        with self.lock:
            for name in [check_endpoint(endpoint)] if endpoint else list(self._faults):
                self._faults.pop(name, None)
                self._frozen.pop(name, None)
            self._changed()
            return self.faults()

    def faults(self) -> dict[str, Any]:
        with self.lock:
            out = {}
            for endpoint, fault in sorted(self._faults.items()):
                out[endpoint] = fault.to_json()
                if endpoint in self._frozen:
                    out[endpoint]["frozen_at"] = self._frozen[endpoint].t
            return out

    # -- bookkeeping -------------------------------------------------------------------------------
    def count(self, route: str) -> None:
        with self.lock:
            self._requests[route] += 1

    def reset_counters(self) -> None:
        with self.lock:
            self._requests.clear()

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "seed": self.scenario.seed,
                "nodes": len(self.scenario),
                "faults": self.faults(),
                "requests": dict(sorted(self._requests.items())),
            }

    # -- what endpoints serve ----------------------------------------------------------------------
    def view(self, endpoint: str, names: list[str] | None = None) -> tuple[EndpointView, Fault, float]:
        """What `endpoint` serves now (missing_nodes applied), its fault, and the time it describes.

        `names` filters (duplicates and unknown names ignored); nodes always come in fleet order.
        """
        with self.lock:
            fault = self._faults.get(endpoint, NO_FAULT)
            fleet = self.scenario.fleet()
            frozen = self._frozen.get(endpoint)
            if frozen is not None:
                snapshot, t = frozen.values(fleet), frozen.t
            else:
                t = self.clock()
                snapshot = self.scenario.snapshot(t)
            if names is None and not fault.missing_nodes:
                nodes = list(range(len(fleet)))
            else:
                wanted = None if names is None else set(names)
                nodes = [i for i, n in enumerate(fleet.names)
                         if (wanted is None or n in wanted) and not fault.is_missing(n)]
            cpu = None
            if endpoint == "node-exporter":
                if frozen is None:
                    cpu = self.scenario.cpu_samples(snapshot, nodes)
                else:
                    for i in nodes:  # nodes registered after the freeze: their counters as first seen
                        if fleet.names[i] not in frozen.cpu:
                            frozen.cpu[fleet.names[i]] = self.scenario.cpu_samples(snapshot, [i])[0]
                    cpu = [frozen.cpu[fleet.names[i]] for i in nodes]
            return EndpointView(snapshot, nodes, cpu), fault, t

    def exposition(self, endpoint: str) -> bytes:
        with self._render_locks[endpoint]:
            with self.lock:
                key = (self._generation, int(self.clock() // EXPOSITION_TTL_S))
            cached = self._bodies.get(endpoint)
            if cached is not None and cached[0] == key:
                return cached[1]
            view, fault, t = self.view(endpoint)
            # A frozen endpoint stamps its samples with the freeze time, so timestamp() shows their age.
            stamp = int(t * 1000) if fault.frozen else None
            sample = Sample(fixed=fault.value_override(), timestamp_ms=stamp)
            body = self._renderers[endpoint].render(view, sample)
            if fault.malformed:
                body = garble_text(body.decode()).encode()
            self._bodies[endpoint] = (key, body)
            return body

    def cmdb_page(self, names: list[str], limit: int, offset: int, base_url: str) -> dict[str, Any]:
        with self.lock:
            view, fault, _ = self.view("cmdb", names or None)
            page_nodes = view.nodes[offset:offset + limit]
            fixed = fault.value_override()
            results = [cmdb.device(self.scenario.view(view.values, i), fixed) for i in page_nodes]
            count = len(view.nodes)
            next_url, previous = cmdb.page_links(base_url, names, count, limit, offset)
            return cmdb.page(results, count=count, next_url=next_url, previous=previous)

    def assets(self, window: str) -> dict[str, Any]:
        minutes = assets.window_minutes(window)
        with self.lock:
            view, fault, t = self.view("opencost")
            nodes = [self.scenario.view(view.values, i) for i in view.nodes]
        return assets.assets(nodes, minutes, t, fault.value_override())

    def metrics_usages(self, names: list[str] | None = None) -> list[NodeUsage]:
        """What metrics.k8s.io serves now: every node's (or those of `names`), missing_nodes left out."""
        view, _, t = self.view("metrics-api", names)
        fleet, node = view.values.fleet, view.values.node
        return [
            NodeUsage(
                name=fleet.names[i],
                timestamp=float(int(t)),
                cpu_nanocores=round(max(0.0, float(node["cpu_util"][i])) * fleet.registrations[i].cpu * 1e9),
                memory_ki=int(max(0.0, float(node["memory_used_bytes"][i]))) // 1024,
            )
            for i in view.nodes
        ]
