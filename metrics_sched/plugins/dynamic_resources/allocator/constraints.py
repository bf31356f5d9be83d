"""Claim constraints: matchAttribute and distinctAttribute (upstream's incubating allocator and constraint.go).

Both quirks of upstream's distinctAttribute are kept on purpose (they decide feasibility, docs/design/dra.md
§3.4): it stores one value per request name, so within one request only the latest device is compared, and
`remove` drops the request's value although other devices of that request stay chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.state import DeviceID

__all__ = ["Constraint", "DistinctAttribute", "MatchAttribute", "lookup_attribute"]

_VALUE_KINDS = ("string", "int", "bool", "version")  # the order upstream's switch tests the fields in


def lookup_attribute(attributes: Mapping[str, Mapping[str, Any]], device_id: DeviceID,
                     name: str) -> Mapping[str, Any] | None:
    """lookupAttribute: the fully qualified name, else the bare id when the domain is the device's driver."""
    attribute = attributes.get(name)
    if attribute is not None:
        return attribute
    domain, sep, ident = name.partition("/")
    if not sep or domain != device_id[0]:
        return None
    return attributes.get(ident)


def _kind(attribute: Mapping[str, Any]) -> str | None:
    for kind in _VALUE_KINDS:
        if attribute.get(kind) is not None:
            return kind
    return None


class Constraint:
    """One claim constraint, tracking the devices picked for the requests it applies to."""

    def __init__(self, requests: Collection[str], attribute: str) -> None:
        self.requests = frozenset(requests)
        self.attribute = attribute

    def applies(self, request: str, sub_request: str) -> bool:
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return bool(sub_request) and f"{request}/{sub_request}" in self.requests

    def add(self, request: str, sub_request: str, attributes: Mapping[str, Mapping[str, Any]],
            device_id: DeviceID) -> bool:
        raise NotImplementedError

    def remove(self, request: str, sub_request: str) -> None:
        raise NotImplementedError


class MatchAttribute(Constraint):
    def __init__(self, requests: Collection[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.value: Mapping[str, Any] | None = None
        self.count = 0

    def add(self, request: str, sub_request: str, attributes: Mapping[str, Mapping[str, Any]],
            device_id: DeviceID) -> bool:
        if not self.applies(request, sub_request):
            return True
        attribute = lookup_attribute(attributes, device_id, self.attribute)
        if attribute is None:
            return False
        if self.count == 0:
            self.value = attribute
            self.count = 1
            return True
        kind = _kind(attribute)
        if kind is None or self.value is None:
            return False
        # Versions compare as strings: semver 2.0.0 requires the minimal form.
        first = self.value.get(kind)
        if first is None or attribute[kind] != first:
            return False
        self.count += 1
        return True

    def remove(self, request: str, sub_request: str) -> None:
        if self.applies(request, sub_request):
            self.count -= 1


class DistinctAttribute(Constraint):
    def __init__(self, requests: Collection[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.values: dict[str, Mapping[str, Any]] = {}  # one per request name (upstream's map, quirk included)
        self.count = 0

    def add(self, request: str, sub_request: str, attributes: Mapping[str, Mapping[str, Any]],
            device_id: DeviceID) -> bool:
        if not self.applies(request, sub_request):
            return True
        attribute = lookup_attribute(attributes, device_id, self.attribute)
        if attribute is None:
            return False
        if self.count == 0:
            self.values[request] = attribute
            self.count = 1
            return True
        kind = _kind(attribute)
        value = attribute[kind] if kind is not None else None
        for stored in self.values.values():
            if kind is None:
                return False  # unknown value type: upstream's switch default, reached only with stored values
            other = stored.get(kind)
            if other is not None and other == value:
                return False
        self.values[request] = attribute
        self.count += 1
        return True

    def remove(self, request: str, sub_request: str) -> None:
        if self.applies(request, sub_request):
            self.values.pop(request, None)
            self.count -= 1
