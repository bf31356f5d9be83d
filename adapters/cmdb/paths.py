"""Dotted paths into JSON documents: "custom_fields.hourly_cost", "data.0", "" for the document itself.

A segment that is an integer indexes a list (negative counts from the end); on a mapping it is an
ordinary key. Keys that contain dots cannot be addressed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

ItemsMode = Literal["list", "dictValues"]


class ShapeError(ValueError):
    """The document does not have the shape the configuration describes."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def split_path(path: str) -> tuple[str, ...]:
    path = path.strip()
    return tuple(path.split(".")) if path else ()


def _index(segment: str) -> int | None:
    try:
        return int(segment)
    except ValueError:
        return None


def lookup(doc: object, path: tuple[str, ...]) -> object:
    """The value at `path`, or MISSING."""
    current = doc
    for segment in path:
        # What JSON decodes to first: the common case without an ABC check.
        if type(current) is dict or isinstance(current, Mapping):
            if segment not in current:
                return MISSING
            current = current[segment]
        elif isinstance(current, list):
            index = _index(segment)
            if index is None or not -len(current) <= index < len(current):
                return MISSING
            current = current[index]
        else:
            return MISSING
    return current


def extract_items(doc: object, path: tuple[str, ...], mode: ItemsMode) -> list[object]:
    """The items of one page. Indexing into an EMPTY list yields no items rather than an error: OpenCost
    answers `data: []` for a window with nothing in it."""
    current = doc
    for depth, segment in enumerate(path):
        if isinstance(current, list) and not current and _index(segment) is not None:
            return []
        current = lookup(current, (segment,))
        if current is MISSING:
            raise ShapeError(f"itemsPath {'.'.join(path)!r}: nothing at {'.'.join(path[: depth + 1])!r}")
    if mode == "dictValues":
        if not isinstance(current, Mapping):
            raise ShapeError(f"itemsPath {'.'.join(path)!r}: expected an object of items, got "
                             f"{type(current).__name__}")
        return list(current.values())
    if not isinstance(current, list):
        raise ShapeError(f"itemsPath {'.'.join(path)!r}: expected a list of items, got {type(current).__name__}")
    return current
