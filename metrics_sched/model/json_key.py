"""A JSON mapping from the API (a pod's spec, labels, annotations) as a dictionary key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["JsonKey"]


class JsonKey:
    """A mapping compared by value (JSON objects: dicts and lists compare with ==); hashed by its keys only, which is
    cheap and enough for the few keys held at once (a batcher's templates, the pod shapes kept). The mapping is
    never changed while it is a key (objects from the API are not changed in place)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: Mapping[str, Any]) -> None:
        self.value = value
        self._hash = hash(tuple(value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonKey) and self.value == other.value

    def __hash__(self) -> int:
        return self._hash
