"""The protobuf messages behind the CEL environment's own types, in a private descriptor pool.

cel-expr-python accepts no Python objects as CEL values, but it does accept protobuf messages of a pool it is
given: Kubernetes' opaque `kubernetes.Quantity` and `kubernetes.Semver` are such messages, and so is the
`device` variable (`kubernetes.DRADevice`, whose scalar fields the checker then knows: `device.drivr` is a
compile error, as upstream). Each message holds only a canonical form of its value, so that CEL's message
equality is upstream's value equality (`quantity("200M") == quantity("0.2G")`, `semver("1.0.0+a") ==
semver("1.0.0")`).
"""

from __future__ import annotations

from typing import Any

from metrics_sched.plugins.dynamic_resources.cel.runtime import (
    descriptor_pb2,
    descriptor_pool,
    message,
    message_factory,
)

__all__ = ["DEVICE_TYPE", "POOL", "QUANTITY_TYPE", "SEMVER_TYPE", "UNREACHABLE_TYPE", "DeviceMessage",
           "QuantityMessage", "SemverMessage"]

DEVICE_TYPE = "kubernetes.DRADevice"
QUANTITY_TYPE = "kubernetes.Quantity"
SEMVER_TYPE = "kubernetes.Semver"
UNREACHABLE_TYPE = "kubernetes.Unreachable"

_F = descriptor_pb2.FieldDescriptorProto


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    proto = descriptor_pb2.FileDescriptorProto(
        name="metrics_sched/dynamic_resources/cel.proto", package="kubernetes", syntax="proto3")

    def add(name: str, fields: list[tuple[str, int]]) -> None:
        msg = proto.message_type.add(name=name)
        for number, (field, kind) in enumerate(fields, start=1):
            msg.field.add(name=field, number=number, type=kind, label=_F.LABEL_OPTIONAL)

    # The exact value as str(Fraction): "85899345920", "1/2", "-3/1000000000".
    add("Quantity", [("value", _F.TYPE_STRING)])
    # Pre-release identifiers joined by "."; build metadata has no precedence, hence is not kept.
    add("Semver", [("major", _F.TYPE_UINT64), ("minor", _F.TYPE_UINT64), ("patch", _F.TYPE_UINT64),
                   ("pre", _F.TYPE_STRING)])
    # attributes and capacity are variables of their own (see environment.py): map-of-map values cannot be
    # message fields.
    add("DRADevice", [("driver", _F.TYPE_STRING), ("allowMultipleAllocations", _F.TYPE_BOOL)])
    # No expression can produce one: library.py declares the overloads that carry implementations with it.
    add("Unreachable", [])
    pool.Add(proto)
    return pool


POOL = _build_pool()


def _message_class(name: str) -> Any:
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(name))


# The generated classes have no static stubs: typed as the Message base, constructed with keyword fields.
QuantityMessage: type[message.Message] = _message_class(QUANTITY_TYPE)
SemverMessage: type[message.Message] = _message_class(SEMVER_TYPE)
DeviceMessage: type[message.Message] = _message_class(DEVICE_TYPE)
