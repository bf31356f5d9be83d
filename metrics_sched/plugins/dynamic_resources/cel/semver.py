"""Semantic versions as CEL selectors see them: blang/semver/v4's Parse (strict) and the Kubernetes semver
library's normalizeAndParse (`semver(s, true)`), with their error texts, and blang's precedence."""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["SemverError", "Version", "compare", "parse_semver"]

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_MAX_UINT64 = 2**64 - 1


class SemverError(ValueError):
    """A version upstream's parser rejects; the message is upstream's."""


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int
    # Pre-release identifiers: numeric ones as int (they sort numerically and before alphanumeric ones).
    pre: tuple[int | str, ...] = ()

    def pre_text(self) -> str:
        return ".".join(str(p) for p in self.pre)


def _only(text: str, allowed: frozenset[str]) -> bool:
    return all(c in allowed for c in text)


def _uint(text: str) -> int:
    """strconv.ParseUint(text, 10, 64) after the caller's character checks."""
    if not text:
        raise SemverError('strconv.ParseUint: parsing "": invalid syntax')
    value = int(text)
    if value > _MAX_UINT64:
        raise SemverError(f'strconv.ParseUint: parsing "{text}": value out of range')
    return value


def _number(text: str, what: str) -> int:
    if not _only(text, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in {what} number {_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {_quote(text)}")
    return _uint(text)


def _quote(text: str) -> str:
    """Go's %q for the texts that reach it (printable ASCII in practice)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _strict(text: str) -> Version:
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: list[str] = []
    pre_parts: list[str] = []
    if "+" in rest:
        rest, _, build_text = rest.partition("+")
        build = build_text.split(".")
    if "-" in rest:
        rest, _, pre_text = rest.partition("-")
        pre_parts = pre_text.split(".")
    patch = _number(rest, "patch")
    pre: list[int | str] = []
    for item in pre_parts:
        if not item:
            raise SemverError("Prerelease is empty")
        if _only(item, _NUMBERS):
            if len(item) > 1 and item[0] == "0":
                raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {_quote(item)}")
            pre.append(_uint(item))
        elif _only(item, _ALPHANUM):
            pre.append(item)
        else:
            raise SemverError(f"Invalid character(s) found in prerelease {_quote(item)}")
    for item in build:
        if not item:
            raise SemverError("Build meta data is empty")
        if not _only(item, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in build meta data {_quote(item)}")
    return Version(major, minor, patch, tuple(pre))


def _normalized(text: str) -> Version:
    """The semver library's normalizeAndParse: "v" prefix, leading zeros and missing minor/patch tolerated."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if any(c in "+-" for c in parts[-1]):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return _strict(".".join(parts))


@functools.lru_cache(maxsize=4096)
def parse_semver(text: str, normalize: bool = False) -> Version:
    return _normalized(text) if normalize else _strict(text)


def compare(a: Version, b: Version) -> int:
    """blang's Version.Compare: -1, 0 or 1 (build metadata has no precedence)."""
    left, right = (a.major, a.minor, a.patch), (b.major, b.minor, b.patch)
    if left != right:
        return 1 if left > right else -1
    if not a.pre or not b.pre:
        return (not a.pre) - (not b.pre)
    for x, y in zip(a.pre, b.pre, strict=False):
        if x == y:
            continue
        if isinstance(x, int) != isinstance(y, int):
            return -1 if isinstance(x, int) else 1
        return 1 if x > y else -1  # type: ignore[operator]  # same kind: both int or both str
    return (len(a.pre) > len(b.pre)) - (len(a.pre) < len(b.pre))
