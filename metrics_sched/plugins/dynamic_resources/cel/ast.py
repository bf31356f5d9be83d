"""Reading a compiled expression's checked AST (cel.expr.CheckedExpr, as `Expression.serialize()` returns it).

Two uses: which domains of `device.attributes` / `device.capacity` an expression indexes with a literal (they
get an empty map when the device lacks them, see selector.py), and which unsupported macro a failed expression
used (to name it in the compile error).

Only the fields needed are declared, with cel-spec's field numbers (cel/expr/syntax.proto, checked.proto), in a
pool of their own; everything else parses as unknown fields. `type_map` values are kept as raw bytes: the
checker's Type of an expression node is compared byte-for-byte with the type of `device.attributes` or
`device.capacity`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from metrics_sched.plugins.dynamic_resources.cel.runtime import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

__all__ = ["DomainRefs", "Node", "checked_root", "domain_refs", "parsed_root", "root_type", "walk"]

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED


def _build() -> tuple[Any, Any]:
    pool = descriptor_pool.DescriptorPool()
    proto = descriptor_pb2.FileDescriptorProto(name="metrics_sched/cel_ast.proto", package="msast", syntax="proto3")

    def msg(parent: Any, name: str, fields: list[tuple[str, int, int, int, str]]) -> Any:
        m = parent.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
        return m

    msg(proto.message_type, "Constant", [("string_value", 6, _F.TYPE_STRING, _OPT, "")])
    expr = msg(proto.message_type, "Expr", [
        ("id", 2, _F.TYPE_INT64, _OPT, ""),
        ("const_expr", 3, _F.TYPE_MESSAGE, _OPT, ".msast.Constant"),
        ("ident_expr", 4, _F.TYPE_MESSAGE, _OPT, ".msast.Expr.Ident"),
        ("select_expr", 5, _F.TYPE_MESSAGE, _OPT, ".msast.Expr.Select"),
        ("call_expr", 6, _F.TYPE_MESSAGE, _OPT, ".msast.Expr.Call"),
        ("list_expr", 7, _F.TYPE_MESSAGE, _OPT, ".msast.Expr.CreateList"),
        ("struct_expr", 8, _F.TYPE_MESSAGE, _OPT, ".msast.Expr.CreateStruct"),
        ("comprehension_expr", 9, _F.TYPE_MESSAGE, _OPT, ".msast.Expr.Comprehension"),
    ])
    expr.oneof_decl.add(name="expr_kind")
    for f in expr.field[1:]:
        f.oneof_index = 0
    msg(expr.nested_type, "Ident", [("name", 1, _F.TYPE_STRING, _OPT, "")])
    msg(expr.nested_type, "Select", [
        ("operand", 1, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("field", 2, _F.TYPE_STRING, _OPT, ""),
        ("test_only", 3, _F.TYPE_BOOL, _OPT, ""),
    ])
    msg(expr.nested_type, "Call", [
        ("target", 1, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("function", 2, _F.TYPE_STRING, _OPT, ""),
        ("args", 3, _F.TYPE_MESSAGE, _REP, ".msast.Expr"),
    ])
    msg(expr.nested_type, "CreateList", [("elements", 1, _F.TYPE_MESSAGE, _REP, ".msast.Expr")])
    struct = msg(expr.nested_type, "CreateStruct", [
        ("entries", 2, _F.TYPE_MESSAGE, _REP, ".msast.Expr.CreateStruct.Entry"),
    ])
    msg(struct.nested_type, "Entry", [
        ("map_key", 3, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("value", 4, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
    ])
    msg(expr.nested_type, "Comprehension", [
        ("iter_range", 2, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("accu_init", 4, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("loop_condition", 5, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("loop_step", 6, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
        ("result", 7, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
    ])
    entry = msg(proto.message_type, "CheckedExpr", [
        ("type_map", 3, _F.TYPE_MESSAGE, _REP, ".msast.CheckedExpr.TypeMapEntry"),
        ("expr", 4, _F.TYPE_MESSAGE, _OPT, ".msast.Expr"),
    ])
    type_entry = msg(entry.nested_type, "TypeMapEntry", [
        ("key", 1, _F.TYPE_INT64, _OPT, ""),
        ("value", 2, _F.TYPE_BYTES, _OPT, ""),
    ])
    type_entry.options.map_entry = True
    msg(proto.message_type, "ParsedExpr", [("expr", 2, _F.TYPE_MESSAGE, _OPT, ".msast.Expr")])
    pool.Add(proto)
    checked = message_factory.GetMessageClass(pool.FindMessageTypeByName("msast.CheckedExpr"))
    parsed = message_factory.GetMessageClass(pool.FindMessageTypeByName("msast.ParsedExpr"))
    return checked, parsed


_CHECKED, _PARSED = _build()

Node = Any  # an msast.Expr message (generated class, no static stubs)


def _unpack(serialized: bytes, cls: Any) -> Any:
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    out = cls()
    out.ParseFromString(wrapper.value)
    return out


def checked_root(serialized: bytes) -> tuple[Node, dict[int, bytes]]:
    """The root expression and the type of each node id (raw cel.expr.Type bytes) of a checked expression."""
    checked = _unpack(serialized, _CHECKED)
    return checked.expr, dict(checked.type_map)


def parsed_root(serialized: bytes) -> Node:
    """The root of a parsed-only expression (Env.compile(..., disable_check=True))."""
    return _unpack(serialized, _PARSED).expr


def root_type(serialized: bytes) -> bytes:
    """The checker's type of the whole expression, as raw cel.expr.Type bytes."""
    root, types = checked_root(serialized)
    return types.get(root.id, b"")


def walk(node: Node) -> Iterator[Node]:
    """Every node, parents before children."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        kind = current.WhichOneof("expr_kind")
        if kind == "select_expr":
            stack.append(current.select_expr.operand)
        elif kind == "call_expr":
            call = current.call_expr
            if call.HasField("target"):
                stack.append(call.target)
            stack.extend(call.args)
        elif kind == "list_expr":
            stack.extend(current.list_expr.elements)
        elif kind == "struct_expr":
            for item in current.struct_expr.entries:
                if item.HasField("map_key"):
                    stack.append(item.map_key)
                stack.append(item.value)
        elif kind == "comprehension_expr":
            comp = current.comprehension_expr
            stack.extend((comp.iter_range, comp.accu_init, comp.loop_condition, comp.loop_step, comp.result))


def _string_const(node: Node) -> str | None:
    """A string literal's value (other constants leave string_value empty; "" is no domain either)."""
    if node.WhichOneof("expr_kind") == "const_expr":
        return str(node.const_expr.string_value) or None
    return None


@dataclass
class DomainRefs:
    """The domains an expression looks up in `device.attributes` / `device.capacity` with literal keys, and
    whether some lookup uses a computed key (`device.attributes[device.driver]`)."""

    attributes: set[str] = field(default_factory=set)
    capacity: set[str] = field(default_factory=set)
    dynamic_attributes: bool = False
    dynamic_capacity: bool = False


# The calls that look a key up in a map: m[k], m[?k], m.?k (m.k and has(m.k) are select nodes).
_LOOKUP_CALLS = ("_[_]", "_[?_]", "_?._")


def domain_refs(serialized: bytes, attributes_type: bytes, capacity_type: bytes) -> DomainRefs:
    root, types = checked_root(serialized)
    refs = DomainRefs()

    def note(operand: Node, key: str | None) -> None:
        typ = types.get(operand.id)
        if typ == attributes_type:
            if key is None:
                refs.dynamic_attributes = True
            else:
                refs.attributes.add(key)
        elif typ == capacity_type:
            if key is None:
                refs.dynamic_capacity = True
            else:
                refs.capacity.add(key)

    for node in walk(root):
        kind = node.WhichOneof("expr_kind")
        if kind == "select_expr":
            note(node.select_expr.operand, node.select_expr.field)
        elif kind == "call_expr":
            call = node.call_expr
            if call.function in _LOOKUP_CALLS and len(call.args) == 2:
                note(call.args[0], _string_const(call.args[1]))
    return refs
