"""What the scheduler reads: the three exporters, the NetBox CMDB and OpenCost's assets API.

Every faultable route goes through `responses.injected` first: the delay, then the status override.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from devcluster.emulator import cmdb
from devcluster.emulator.exposition import CONTENT_TYPE
from devcluster.emulator.faults import Fault
from devcluster.emulator.responses import injected, json_response
from devcluster.emulator.routing import Request, Response, Route, route

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator


def _exposition(endpoint: str) -> Route:
    def handler(emulator: Emulator, request: Request) -> Response:
        _, early = injected(emulator, endpoint, as_json=False)
        if early is not None:
            return early
        return Response(200, emulator.exposition(endpoint), CONTENT_TYPE)

    return route("GET", f"/{endpoint}/metrics", endpoint, handler)


def healthz(emulator: Emulator, request: Request) -> Response:
    return Response.text("ok")


def _cmdb_auth(emulator: Emulator, request: Request, fault: Fault) -> Response | None:
    if fault.bad_auth or not cmdb.authorized(request.header("Authorization"), emulator.cmdb_token):
        return Response.json({"detail": "Invalid token"}, 401)
    return None


def devices(emulator: Emulator, request: Request) -> Response:
    fault, early = injected(emulator, "cmdb", as_json=True)
    early = early or _cmdb_auth(emulator, request, fault)
    if early is not None:
        return early
    limit, offset = cmdb.paging(request.query)
    names = request.query.get("name", [])
    return json_response(emulator.cmdb_page(names, limit, offset, request.base_url), fault)


def netbox_status(emulator: Emulator, request: Request) -> Response:
    fault, early = injected(emulator, "cmdb", as_json=True)
    early = early or _cmdb_auth(emulator, request, fault)
    if early is not None:
        return early
    return json_response({"netbox-version": cmdb.NETBOX_VERSION}, fault)


def opencost_assets(emulator: Emulator, request: Request) -> Response:
    fault, early = injected(emulator, "opencost", as_json=True)
    if early is not None:
        return early
    window = request.query.get("window", ["1h"])[-1]
    return json_response(emulator.assets(window), fault)


ROUTES = [
    route("GET", "/healthz", "healthz", healthz),
    _exposition("dcgm"),
    _exposition("node-exporter"),
    _exposition("opencost"),
    route("GET", "/opencost/model/assets", "opencost-assets", opencost_assets),
    route("GET", "/api/dcim/devices/?", "cmdb", devices),
    route("GET", "/api/status/?", "cmdb-status", netbox_status),
]
