"""The test-only control API under /control: nodes, value overrides, faults, state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devcluster.emulator.routing import Request, Response, route

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator


def list_nodes(emulator: Emulator, request: Request) -> Response:
    return Response.json({"nodes": emulator.names()})


def register_nodes(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.register(request.json()))


def get_node(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.describe(request.params["name"]))


def delete_node(emulator: Emulator, request: Request) -> Response:
    emulator.remove(request.params["name"])
    return Response.json({"deleted": request.params["name"]})


def patch_values(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.set_values(request.params["name"], request.json()))


def clear_values(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.clear_values(request.params["name"]))


def patch_many(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.set_many(request.json()))


def get_faults(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.faults())


def put_fault(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.set_fault(request.params["endpoint"], request.json()))


def delete_fault(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.clear_fault(request.params["endpoint"]))


def delete_faults(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.clear_fault(None))


def get_state(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.state())


def reset_counters(emulator: Emulator, request: Request) -> Response:
    emulator.reset_counters()
    return Response.json(emulator.state())


ROUTES = [
    route("GET", "/control/nodes", "control", list_nodes),
    route("POST", "/control/nodes", "control", register_nodes),
    route("PATCH", "/control/nodes/values", "control", patch_many),
    route("GET", "/control/nodes/{name}", "control", get_node),
    route("DELETE", "/control/nodes/{name}", "control", delete_node),
    route("PATCH", "/control/nodes/{name}/values", "control", patch_values),
    route("DELETE", "/control/nodes/{name}/values", "control", clear_values),
    route("GET", "/control/faults", "control", get_faults),
    route("DELETE", "/control/faults", "control", delete_faults),
    route("PUT", "/control/faults/{endpoint}", "control", put_fault),
    route("DELETE", "/control/faults/{endpoint}", "control", delete_fault),
    route("GET", "/control/state", "control", get_state),
    route("POST", "/control/counters/reset", "control", reset_counters),
]
