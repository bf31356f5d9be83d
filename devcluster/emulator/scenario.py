"""The registry of fake nodes: registrations, seeded profiles, overrides and cpu counters.

Not thread-safe by itself: the server's Emulator serialises access. Usable on its own to compute what
a seeded emulator serves, e.g. `s = Scenario(7); s.register(s.parse_registration({...}), t=0)`, then
`s.values(name, t)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devcluster.emulator.cpu_counters import CpuCounters, CpuSample
from devcluster.emulator.errors import RequestError
from devcluster.emulator.fleet import Fleet, FleetValues, compute
from devcluster.emulator.overrides import RAMP_FIELDS, GpuPatch, OverrideValue, ParsedOverride, parse_overrides
from devcluster.emulator.profiles import NodeProfile, NodeRegistration, build_profile
from devcluster.emulator.values import NodeValues, NodeView

ParsedOverrides = Mapping[str, ParsedOverride | None]


@dataclass
class NodeRecord:
    id: int  # NetBox-style device id: registration order, stable while the node stays registered
    registration: NodeRegistration
    profile: NodeProfile
    cpu: CpuCounters
    overrides: dict[str, OverrideValue] = field(default_factory=dict)


def natural_key(name: str) -> tuple[Any, ...]:
    """node-9 sorts before node-10, like NetBox's naturalised device names."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


class Scenario:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._nodes: dict[str, NodeRecord] = {}
        self._fleet: Fleet | None = None
        self._version = 0  # bumped by membership and override changes
        self._snapshot: tuple[tuple[int, int], FleetValues] | None = None
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def _changed(self, membership: bool) -> None:
        self._version += 1
        if membership:
            self._fleet = None

    def fleet(self) -> Fleet:
        if self._fleet is None:
            names = sorted(self._nodes, key=natural_key)
            self._fleet = Fleet([(self._nodes[n].registration, self._nodes[n].profile) for n in names])
        return self._fleet

    def names(self) -> list[str]:
        return self.fleet().names

    # -- membership --------------------------------------------------------------------------------
    def parse_registration(self, raw: Mapping[str, Any]) -> NodeRegistration:
        if not isinstance(raw, Mapping):
            raise RequestError("each node must be a JSON object")
        name = raw.get("name")
        existing = self._nodes.get(name) if isinstance(name, str) else None
        # Unique per registration so default `instance` labels never collide (callers normally pass IPs).
        seq = self._next_id
        default_ip = f"10.{250 + (seq >> 16) % 6}.{(seq >> 8) & 255}.{seq & 255}"
        if existing is not None:
            default_ip = existing.registration.ip
        return NodeRegistration.from_json(raw, default_ip)

    def register(self, reg: NodeRegistration, t: float) -> bool:
        """Idempotent; a changed registration rebuilds the node (new profile, overrides cleared)."""
        existing = self._nodes.get(reg.name)
        if existing is not None and existing.registration == reg:
            return False
        profile = build_profile(self.seed, reg)
        if existing is not None and existing.registration.cpu == reg.cpu:
            cpu = existing.cpu  # keep counters monotonic across a re-registration
        else:
            cpu = CpuCounters(reg.cpu, profile.uptime_s, profile.cpu_util_base, t)
        record_id = existing.id if existing else self._next_id
        if existing is None:
            self._next_id += 1
        self._nodes[reg.name] = NodeRecord(record_id, reg, profile, cpu)
        self._changed(membership=True)
        return True

    def remove(self, name: str) -> bool:
        removed = self._nodes.pop(name, None) is not None
        self._changed(membership=removed)
        return removed

    def record(self, name: str) -> NodeRecord:
        try:
            return self._nodes[name]
        except KeyError:
            raise RequestError(f"unknown node {name!r}", status=404) from None

    # -- values ------------------------------------------------------------------------------------
    def snapshot(self, t: float) -> FleetValues:
        """Every node's values at second floor(t), computed once per second and change."""
        key = (self._version, int(t // 1))
        if self._snapshot is None or self._snapshot[0] != key:
            overrides = {name: rec.overrides for name, rec in self._nodes.items() if rec.overrides}
            self._snapshot = (key, compute(self.fleet(), overrides, t))
        return self._snapshot[1]

    def values(self, name: str, t: float) -> NodeValues:
        self.record(name)
        return self.snapshot(t).node_values(self.fleet().index[name])

    def view(self, snapshot: FleetValues, i: int) -> NodeView:
        reg = snapshot.fleet.registrations[i]
        return NodeView(self._nodes[reg.name].id, reg, snapshot.fleet.profiles[i], snapshot.node_values(i))

    def overrides(self) -> dict[str, dict[str, OverrideValue]]:
        """A copy, e.g. to freeze what an endpoint shows."""
        return {name: dict(rec.overrides) for name, rec in self._nodes.items() if rec.overrides}

    def cpu_samples(self, snapshot: FleetValues, nodes: Sequence[int]) -> list[CpuSample]:
        """Advances the given nodes' counters to the snapshot's time at its cpu_util, and reads them."""
        utils = snapshot.node["cpu_util"]
        samples = []
        for i in nodes:
            counters = self._nodes[snapshot.fleet.names[i]].cpu
            counters.advance(snapshot.t, float(utils[i]))
            samples.append(counters.sample())
        return samples

    # -- overrides ---------------------------------------------------------------------------------
    def parse_overrides(self, name: str, body: Mapping[str, Any]) -> dict[str, ParsedOverride | None]:
        return parse_overrides(name, self.record(name).registration.gpus, body)

    def apply_overrides(self, changes: Mapping[str, ParsedOverrides], t: float) -> None:
        """Applies {node: {field: value or None}} as one change."""
        # Settle the counters at the old utilisation first, so they reflect cpu_util over time.
        snapshot = self.snapshot(t)
        self.cpu_samples(snapshot, [snapshot.fleet.index[name] for name in changes])
        for name, fields in changes.items():
            record = self.record(name)
            overrides = record.overrides
            for key, value in fields.items():
                stored = value.merged(overrides.get(key), record.registration.gpus) if isinstance(
                    value, GpuPatch) else value
                if key in RAMP_FIELDS and isinstance(stored, float):
                    stored = (stored, float(t))  # the rate and when it started
                if stored is None:
                    overrides.pop(key, None)
                else:
                    overrides[key] = stored
        self._changed(membership=False)

    def clear_overrides(self, name: str, t: float) -> None:
        self.apply_overrides({name: dict.fromkeys(self.record(name).overrides)}, t)

    def describe(self, name: str, t: float) -> dict[str, Any]:
        """The node as the control API shows it: registration, static profile and the values served now."""
        record = self.record(name)
        profile = record.profile
        return {
            **record.registration.to_json(),
            "id": record.id,
            "gpu_model": profile.gpu_model.name if profile.gpu_model else None,
            "gpu_uuids": [gpu.uuid for gpu in profile.gpus],
            "provider_id": profile.provider_id,
            **self.values(name, t).to_json(),
            "overrides": sorted(record.overrides),
        }
