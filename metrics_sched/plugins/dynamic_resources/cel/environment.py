"""The one CEL environment of DRA selectors (upstream cel/compile.go newCompiler over the StoredExpressions base
environment of 1.36, with DRAConsumableCapacity on and DRAListTypeAttributes off, their defaults).

Variables: `device` is a `kubernetes.DRADevice` message (driver, allowMultipleAllocations), and
`device.attributes` (map(string, map(string, dyn))) and `device.capacity` (map(string, map(string,
kubernetes.Quantity))) are variables of their own: the checker resolves a qualified name to the longest declared
one, so `device.attributes["d"].x` reads the map variable, while `device.drivr` is still a compile error.

Libraries: standard CEL, ext.Strings v2, ext.Bindings (`cel.bind`), optional types, and library.py's quantity,
semver, k8s Lists v0, ext.Sets and ext.Lists functions. What upstream has and this one lacks is listed in
docs/design/dra-cel.md; the selector module turns those compile errors into ones that name the function.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

from metrics_sched.plugins.dynamic_resources.cel import ast
from metrics_sched.plugins.dynamic_resources.cel.device import ATTRIBUTES_VAR, CAPACITY_VAR, DEVICE_VAR
from metrics_sched.plugins.dynamic_resources.cel.library import FUNCTIONS, QT
from metrics_sched.plugins.dynamic_resources.cel.runtime import cel, ext_bindings, ext_optional, ext_strings
from metrics_sched.plugins.dynamic_resources.cel.types import DEVICE_TYPE, POOL

__all__ = ["Environment", "environment"]

T = cel.Type


@dataclass(frozen=True)
class Environment:
    env: cel.Env
    # The checker's type of `device.attributes` / `device.capacity` (raw cel.expr.Type bytes): an expression
    # node of one of these types is a lookup of a domain (ast.domain_refs).
    attributes_type: bytes
    capacity_type: bytes


_LOCK = threading.Lock()


def environment() -> Environment:
    """Built once per process, on first use (building it takes milliseconds). One instance only: a device's
    activations are kept per process, and an activation belongs to the environment that built it."""
    with _LOCK:
        return _build()


@functools.cache
def _build() -> Environment:
    env = cel.NewEnv(
        POOL,
        variables={
            DEVICE_VAR: T(DEVICE_TYPE),
            ATTRIBUTES_VAR: T.Map(T.STRING, T.Map(T.STRING, T.DYN)),
            CAPACITY_VAR: T.Map(T.STRING, T.Map(T.STRING, QT)),
        },
        functions=FUNCTIONS,
        extensions=[ext_strings.ExtStrings(2), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
    )
    return Environment(
        env=env,
        attributes_type=ast.root_type(env.compile(ATTRIBUTES_VAR).serialize()),
        capacity_type=ast.root_type(env.compile(CAPACITY_VAR).serialize()),
    )
