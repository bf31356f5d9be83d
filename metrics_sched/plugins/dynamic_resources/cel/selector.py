"""Compiling a selector expression and matching it against devices, with upstream's checks and error texts
(cel/compile.go CompileCELExpression and DeviceMatches).

Unknown domains: upstream's `device.attributes` and `device.capacity` answer an empty map for a domain the
device lacks, so `device.attributes["other.example.com"].x` fails with "no such key: x" and
`has(device.attributes["other.example.com"].x)` is false. cel-expr-python converts the activation eagerly (no
lazy map to hook), so the device gets an empty map for each domain the expression looks up by a literal key,
found in the checked AST (a node typed as `device.attributes` / `device.capacity`, indexed or selected with a
constant). Only `"d" in device.attributes` and `size(device.attributes)` can tell the difference, and only for
a domain the same expression also looks up by that literal.

A lookup with a computed key (`device.attributes[device.driver]`) cannot be resolved before evaluating: when
such an expression fails with "no such key: K" for a K the device lacks as a domain, it is evaluated again with
K defaulted, as often as new keys come up (bounded). An error is only absorbed by `||`/`&&` when the other side
decides the result, so the retried result is upstream's; the one difference left is an optional lookup with a
computed key (`device.attributes[?k]` is none here for an unknown domain, upstream an empty map).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from metrics_sched.plugins.dynamic_resources.cel import ast
from metrics_sched.plugins.dynamic_resources.cel.device import CelDevice
from metrics_sched.plugins.dynamic_resources.cel.environment import Environment, environment
from metrics_sched.plugins.dynamic_resources.cel.errors import CelCompileError, CelRuntimeError
from metrics_sched.plugins.dynamic_resources.cel.runtime import cel

__all__ = ["MAX_EXPRESSION_LENGTH", "CompiledSelector", "compile_selector"]

T = cel.Type

# resource/v1 CELSelectorExpressionMaxLength: the API server refuses longer expressions (in bytes).
MAX_EXPRESSION_LENGTH = 10 * 1024

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]$")
_MISSING_KEY = re.compile(r'^Key not found in map : "?(.*?)"?$')
_NO_OVERLOAD = re.compile(r"^No matching overloads found : (.*)$")
_UNDECLARED = re.compile(r"undeclared reference to '([A-Za-z_][\w.]*)'")
_LIST_INDEX = re.compile(r"found no matching overload for '(?:last)?[iI]ndexOf' applied to '\(list")

# Evaluations of one expression against one device with computed-key lookups: one per unknown domain found.
_MAX_RETRIES = 8
_NO_SUCH_KEY = "no such key: "

# Upstream's cost limit (1,000,000 per evaluation) has no counterpart in cel-expr-python; its fixed budget of
# 10,000 comprehension iterations per evaluation stops runaway selectors instead, with upstream's text.
_BUDGET = "Iteration budget exceeded"
_COST_LIMIT = "operation cancelled: actual cost limit exceeded"

# The C++ runtime's wording of errors cel-go words differently.
_RUNTIME_TEXTS = {
    "divide by zero": "division by zero",
    "modulus by zero": "modulus by zero",
    "integer overflow": "integer overflow",
}

# Macros of upstream's environment that cel-expr-python cannot be extended with: (receiver-style name, number of
# arguments) -> the cel-go library that has them.
_MACROS = {
    ("sortBy", 2): "ext.Lists",
    ("all", 3): "ext.TwoVarComprehensions",
    ("exists", 3): "ext.TwoVarComprehensions",
    ("existsOne", 3): "ext.TwoVarComprehensions",
    ("exists_one", 3): "ext.TwoVarComprehensions",
    ("transformList", 3): "ext.TwoVarComprehensions",
    ("transformList", 4): "ext.TwoVarComprehensions",
    ("transformMap", 3): "ext.TwoVarComprehensions",
    ("transformMap", 4): "ext.TwoVarComprehensions",
    ("transformMapEntry", 3): "ext.TwoVarComprehensions",
    ("transformMapEntry", 4): "ext.TwoVarComprehensions",
    ("existsOne", 2): "cel-go's standard macros (use exists_one)",
}
# Functions of upstream's environment left out here (not device-related): named in the compile error.
_MISSING_LIBRARIES = {
    **dict.fromkeys(("find", "findAll"), "Kubernetes' Regex library"),
    **dict.fromkeys(("url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath",
                     "getQuery"), "Kubernetes' URLs library"),
    **dict.fromkeys(("ip", "isIP", "ip.isCanonical", "family", "isUnspecified", "isLoopback",
                     "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast"), "Kubernetes' IP library"),
    **dict.fromkeys(("cidr", "isCIDR", "containsIP", "containsCIDR", "masked", "prefixLength"),
                    "Kubernetes' CIDR library"),
    **dict.fromkeys(("format.named", "validate"), "Kubernetes' Format library"),
    **dict.fromkeys(("authorizer", "serviceAccount", "path", "group", "resource", "check", "allowed",
                     "reason", "errored", "error"), "Kubernetes' Authz library"),
}


def _strip_status(text: str) -> str:
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", text.strip()))


def runtime_message(text: str) -> str:
    """Upstream's text for an error of the C++ runtime (or of one of our functions)."""
    detail = _strip_status(text)
    if _BUDGET in detail:
        return _COST_LIMIT
    if (missing := _MISSING_KEY.match(detail)) is not None:
        return _NO_SUCH_KEY + missing.group(1)
    if (overload := _NO_OVERLOAD.match(detail)) is not None:
        return "no such overload: " + overload.group(1).replace("int64", "int").replace("uint64", "uint")
    return _RUNTIME_TEXTS.get(detail, detail)


def _type_name(typ: cel.Type) -> str:
    """cel-go's spelling of a type in "must evaluate to bool ..." ("int", "list(string)", "null_type")."""
    text = typ.name()
    for cpp, go in (("NULL", "null_type"), ("DURATION", "google.protobuf.Duration"),
                    ("TIMESTAMP", "google.protobuf.Timestamp")):
        text = re.sub(rf"\b{cpp}\b", go, text)
    text = re.sub(r"\b[A-Z]+\b", lambda m: m.group(0).lower(), text)
    return text.replace("<", "(").replace(">", ")")


def _unsupported(env: cel.Env, expression: str, message: str) -> str | None:
    """Names the upstream macro or library function a failed expression uses that this environment lacks."""
    try:
        root = ast.parsed_root(env.compile(expression, disable_check=True).serialize())
    except RuntimeError:
        return None  # a syntax error: the parser's message says it all
    for node in ast.walk(root):
        if node.WhichOneof("expr_kind") != "call_expr" or not node.call_expr.HasField("target"):
            continue
        call = node.call_expr
        library = _MACROS.get((call.function, len(call.args)))
        if library is not None:
            return (f"{call.function}() with {len(call.args)} arguments is a macro of {library}, "
                    "which metrics-sched's CEL runtime (cel-expr-python) does not support")
    if _LIST_INDEX.search(message):
        return ("list.indexOf()/lastIndexOf() of Kubernetes' Lists library are not provided by metrics-sched's CEL "
                "runtime (the strings extension owns those names)")
    for name in _UNDECLARED.findall(message):
        if name in _MISSING_LIBRARIES:
            return f"{name}() belongs to {_MISSING_LIBRARIES[name]}, which metrics-sched's CEL runtime does not provide"
    return None


@dataclass(frozen=True, eq=False)
class CompiledSelector:
    """One compiled expression. `matches` is thread-safe."""

    expression: str
    _program: cel.Expression
    _env: Environment
    _attribute_domains: frozenset[str]
    _capacity_domains: frozenset[str]
    # Some lookup of a domain uses a computed key (see the module docstring).
    _computed_attribute_keys: bool
    _computed_capacity_keys: bool

    def matches(self, device: CelDevice) -> bool:
        """Whether `device` satisfies the expression; CelRuntimeError(upstream text) when evaluation fails."""
        if device.error is not None:
            raise CelRuntimeError(device.error)
        attributes, capacity = self._attribute_domains, self._capacity_domains
        for _ in range(_MAX_RETRIES):
            try:
                return self._evaluate(device, attributes, capacity)
            except CelRuntimeError as err:
                if not err.message.startswith(_NO_SUCH_KEY):
                    raise
                key = err.message.removeprefix(_NO_SUCH_KEY)
                retry_attributes = (self._computed_attribute_keys and key not in device.attributes
                                    and key not in attributes)
                retry_capacity = self._computed_capacity_keys and key not in device.capacity and key not in capacity
                if not (retry_attributes or retry_capacity):
                    raise
                if retry_attributes:
                    attributes = attributes | {key}
                if retry_capacity:
                    capacity = capacity | {key}
        return self._evaluate(device, attributes, capacity)

    def _evaluate(self, device: CelDevice, attributes: frozenset[str], capacity: frozenset[str]) -> bool:
        activation = device.activation(self._env.env, attributes, capacity)
        try:
            result = self._program.eval(activation)
        except RuntimeError as err:  # the iteration budget raises; other failures are error values
            raise CelRuntimeError(runtime_message(str(err))) from None
        try:
            value = result.value()
        except TypeError:  # an optional result: no Python value
            value = None
        if isinstance(value, bool):
            return value
        if result.type() == T.ERROR:
            raise CelRuntimeError(runtime_message(str(value)))
        name = _type_name(result.type())
        raise CelRuntimeError(f"CEL result of type {name} could not be converted to bool: "
                              f"type conversion error from '{name}' to 'bool'")


def compile_selector(expression: str) -> CompiledSelector:
    """Compiles `expression` or raises CelCompileError with upstream's text (after "CEL compile error: ")."""
    if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(f"Too long: may not be more than {MAX_EXPRESSION_LENGTH} bytes")
    env = environment()
    try:
        program = env.env.compile(expression)
    except RuntimeError as err:
        detail = _strip_status(str(err))
        hint = _unsupported(env.env, expression, detail)
        # What this runtime lacks comes first: the checker's own errors about it ("undeclared reference to
        # 'x'" for a macro's variable) would mislead.
        raise CelCompileError("compilation failed: " + (f"{hint}\n{detail}" if hint else detail)) from None
    output = program.return_type()
    if output != T.BOOL and output != T.DYN:
        raise CelCompileError(f"must evaluate to bool or the unknown type, not {_type_name(output)}")
    refs = ast.domain_refs(program.serialize(), env.attributes_type, env.capacity_type)
    return CompiledSelector(expression, program, env, frozenset(refs.attributes), frozenset(refs.capacity),
                            refs.dynamic_attributes, refs.dynamic_capacity)
