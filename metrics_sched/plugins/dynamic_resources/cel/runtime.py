"""The third-party runtime this package stands on, imported in one place.

cel-expr-python ships .pyi stubs but no py.typed marker, and protobuf has no stubs in the dev environment: mypy
treats both as untyped (Any) here, and the rest of the package imports them from this module.
"""

from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings  # type: ignore[import-untyped]
from google.protobuf import (  # type: ignore[import-untyped]
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    message,
    message_factory,
)

__all__ = ["any_pb2", "cel", "descriptor_pb2", "descriptor_pool", "ext_bindings", "ext_optional", "ext_strings",
           "message", "message_factory"]
