"""CycleState: what plugins share during one pod's cycle, under typed keys (kube-scheduler's StateKey).

A plugin declares a module-level `KEY = StateKey[MyData]("MyPlugin/data")` and reads back exactly the
type it wrote: no string-keyed dict, no casts at the reader. PostFilter's what-if runs work on
`clone()`: values that implement `clone()` are copied, the others are shared (they must be immutable).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

__all__ = ["BINDING_ANNOTATIONS", "EXPLANATIONS", "CycleState", "StateData", "StateKey", "annotate_binding", "explain"]

T = TypeVar("T")


@runtime_checkable
class StateData(Protocol):
    """State a plugin mutates during the cycle: clone() gives PostFilter's what-if runs their own copy."""

    def clone(self) -> StateData: ...


class StateKey(Generic[T]):
    """A typed key into CycleState; identity, not the name, is what matches (the name is for messages)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


class CycleState:
    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[StateKey[Any], Any] = {}

    def write(self, key: StateKey[T], value: T) -> None:
        self._data[key] = value

    def read(self, key: StateKey[T]) -> T:
        """The value written under `key`; KeyError naming the key when no plugin wrote it this cycle."""
        try:
            value: T = self._data[key]
        except KeyError:
            raise KeyError(f"{key.name} was not written in this cycle") from None
        return value

    @overload
    def get(self, key: StateKey[T]) -> T | None: ...

    @overload
    def get(self, key: StateKey[T], default: T) -> T: ...

    def get(self, key: StateKey[T], default: T | None = None) -> T | None:
        value: T | None = self._data.get(key, default)
        return value

    def delete(self, key: StateKey[Any]) -> None:
        self._data.pop(key, None)

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key in self._data

    def clone(self) -> CycleState:
        copy = CycleState()
        copy._data = {k: (v.clone() if _is_state_data(v) else v) for k, v in self._data.items()}
        return copy


# Whether a type implements StateData, by type: an isinstance() against a runtime-checkable Protocol inspects the
# class each time, and batched cycles clone a cycle state per pod.
_STATE_DATA: dict[type, bool] = {}


def _is_state_data(value: object) -> bool:
    kind = type(value)
    known = _STATE_DATA.get(kind)
    if known is None:
        known = _STATE_DATA[kind] = isinstance(value, StateData)
    return known


# Annotations the Binding carries onto the pod (the audit writes its decision summary here): no extra write.
BINDING_ANNOTATIONS = StateKey[Mapping[str, str]]("Binding/annotations")


def annotate_binding(cycle: CycleState, annotations: Mapping[str, str]) -> None:
    """Adds annotations for the Binding to carry, keeping those others added (as a new mapping: values in
    the cycle state are shared with PostFilter's clones)."""
    current: Mapping[str, str] = cycle.get(BINDING_ANNOTATIONS) or {}
    cycle.write(BINDING_ANNOTATIONS, {**current, **annotations})


# Lines a plugin adds to the decision record for `explain`, in its own words (e.g. "pvc data-0: PV pv-7 is in
# zone-b"): the FailedScheduling message keeps kube-scheduler's wording, the record says which object decided.
EXPLANATIONS = StateKey[tuple[str, ...]]("explain/notes")


def explain(cycle: CycleState, *notes: str) -> None:
    """Adds notes to the decision record (once each, in order)."""
    current = cycle.get(EXPLANATIONS) or ()
    cycle.write(EXPLANATIONS, current + tuple(n for n in notes if n not in current))
