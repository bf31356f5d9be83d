"""The two failures of a DRA CEL selector. Their messages are upstream's texts after "CEL compile error: " and
"CEL runtime error: ", so the allocator can build upstream's full error ("claim ns/c: selector #0: CEL runtime
error: no such key: x") and Filter can fail the pod with it (upstream: an Error status, not "no device fits")."""

from __future__ import annotations

__all__ = ["CelCompileError", "CelError", "CelRuntimeError"]


class CelError(Exception):
    """Base of both: `str(error)` is the upstream message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelCompileError(CelError):
    """The expression cannot be compiled (syntax, types, a non-bool result type, an unsupported function)."""


class CelRuntimeError(CelError):
    """Evaluating the expression against one device failed (a missing attribute, a bad attribute value, a
    non-bool result, the evaluation budget)."""
