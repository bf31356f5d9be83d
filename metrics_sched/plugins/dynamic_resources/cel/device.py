"""CelDevice: one ResourceSlice device as the `device` variable of a selector (upstream cel.Device and the maps
DeviceMatches builds from it), converted once per device and slice version and kept.

The activation (the converted variables the C++ runtime reads) is built lazily and kept per set of defaulted
domains: building it costs more than evaluating a typical selector. cel-expr-python binds an activation to the
thread that built it (a message handed from it to a Python function in another thread fails with "No PyCelArena
found for google::protobuf::Arena"), so each kept activation remembers its thread, and another thread builds
its own in its place.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import Any

from metrics_sched.plugins.dynamic_resources.cel import quantity as q
from metrics_sched.plugins.dynamic_resources.cel import semver as sv
from metrics_sched.plugins.dynamic_resources.cel.library import quantity_message, semver_message
from metrics_sched.plugins.dynamic_resources.cel.runtime import cel, message
from metrics_sched.plugins.dynamic_resources.cel.types import DeviceMessage

__all__ = ["ATTRIBUTES_VAR", "CAPACITY_VAR", "DEVICE_VAR", "CelDevice", "qualified_name"]

DEVICE_VAR = "device"
# Declared as variables of their own: the checker resolves `device.attributes` to the longest declared name, and
# map-of-map values cannot be fields of the `device` message (see environment.py).
ATTRIBUTES_VAR = "device.attributes"
CAPACITY_VAR = "device.capacity"

# int, bool, str or a kubernetes.Semver message (protobuf messages are untyped here).
AttributeValue = Any

# Bounds the activations kept per device: one per distinct set of defaulted domains (selectors naming domains
# the device lacks); a cluster has few such sets.
_MAX_ACTIVATIONS = 16
_PLAIN: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


def qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """Upstream parseQualifiedName: "domain/id", or the driver as domain for a bare id."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (default_domain, name)


def _attribute_value(attr: Mapping[str, Any]) -> AttributeValue:
    """getAttributeValue with DRAListTypeAttributes off (1.36's default): the first of int, bool, string and
    version that is set; anything else (list-typed attributes included) is unsupported."""
    if attr.get("int") is not None:
        return int(attr["int"])
    if attr.get("bool") is not None:
        return bool(attr["bool"])
    if attr.get("string") is not None:
        return str(attr["string"])
    if attr.get("version") is not None:
        try:
            return semver_message(sv.parse_semver(str(attr["version"])))
        except sv.SemverError as err:
            raise ValueError(f"parse semantic version: {err}") from None
    raise ValueError("unsupported attribute value")


class CelDevice:
    """The `device` variable for one device. Immutable after construction; safe to share between threads."""

    __slots__ = ("_activations", "_lock", "allow_multiple_allocations", "attributes", "capacity", "driver",
                 "error")

    def __init__(self, driver: str, attributes: Mapping[str, Mapping[str, AttributeValue]],
                 capacity: Mapping[str, Mapping[str, message.Message]], allow_multiple_allocations: bool = False,
                 error: str | None = None) -> None:
        self.driver = driver
        self.attributes = attributes
        self.capacity = capacity
        self.allow_multiple_allocations = allow_multiple_allocations
        # Upstream fails DeviceMatches for every selector when one attribute cannot be converted: the
        # conversion error is kept and raised by each evaluation (a CEL runtime error).
        self.error = error
        self._activations: dict[tuple[frozenset[str], frozenset[str]], tuple[threading.Thread, cel.Activation]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_api(cls, driver: str, device: Mapping[str, Any]) -> CelDevice:
        """From a resource.k8s.io/v1 Device JSON object of a slice of `driver`."""
        attributes: dict[str, dict[str, AttributeValue]] = {}
        capacity: dict[str, dict[str, message.Message]] = {}
        error: str | None = None
        for name, attr in (device.get("attributes") or {}).items():
            try:
                value = _attribute_value(attr or {})
            except ValueError as err:
                error = error or f"attribute {name}: {err}"
                continue
            domain, ident = qualified_name(name, driver)
            attributes.setdefault(domain, {})[ident] = value
        for name, cap in (device.get("capacity") or {}).items():
            try:
                value_q = q.parse_quantity(str((cap or {}).get("value", "")))
            except q.QuantityError as err:
                error = error or f"capacity {name}: {err}"
                continue
            domain, ident = qualified_name(name, driver)
            capacity.setdefault(domain, {})[ident] = quantity_message(value_q)
        return cls(driver, attributes, capacity, bool(device.get("allowMultipleAllocations") or False), error)

    def activation(self, env: cel.Env, attribute_domains: Collection[str] = (),
                   capacity_domains: Collection[str] = ()) -> cel.Activation:
        """The variables for one evaluation, with an empty map for each listed domain the device lacks
        (upstream's newStringInterfaceMapWithDefault, see selector.py for which domains get listed)."""
        # Most selectors name only domains the device has: no sets built on that path.
        key = _PLAIN if not attribute_domains and not capacity_domains else (
            frozenset(d for d in attribute_domains if d not in self.attributes),
            frozenset(d for d in capacity_domains if d not in self.capacity))
        thread = threading.current_thread()
        found = self._activations.get(key)
        if found is not None and found[0] is thread:
            return found[1]
        attributes: Mapping[str, Mapping[str, AttributeValue]] = self.attributes
        capacity: Mapping[str, Mapping[str, message.Message]] = self.capacity
        if key[0]:
            attributes = {**attributes, **{domain: {} for domain in key[0]}}
        if key[1]:
            capacity = {**capacity, **{domain: {} for domain in key[1]}}
        built = env.Activation({
            DEVICE_VAR: DeviceMessage(driver=self.driver, allowMultipleAllocations=self.allow_multiple_allocations),
            ATTRIBUTES_VAR: attributes,
            CAPACITY_VAR: capacity,
        })
        with self._lock:
            if key not in self._activations and len(self._activations) >= _MAX_ACTIVATIONS:
                self._activations.pop(next(iter(self._activations)))
            self._activations[key] = (thread, built)
        return built

    def __repr__(self) -> str:
        return (f"CelDevice(driver={self.driver!r}, attributes={self.attributes!r}, capacity={self.capacity!r}, "
                f"allow_multiple_allocations={self.allow_multiple_allocations!r}, error={self.error!r})")
