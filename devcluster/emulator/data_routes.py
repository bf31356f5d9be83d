"""What the scheduler reads: the three exporters, the NetBox CMDB and OpenCost's assets API.

Every faultable route goes through `_injected` first: the delay (a sleep in this request's own thread,
so other requests carry on), then the status override.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from devcluster.emulator import cmdb
from devcluster.emulator.exposition import CONTENT_TYPE
from devcluster.emulator.faults import Fault, garble_json
from devcluster.emulator.routing import JSON_TYPE, Request, Response, Route, route

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator


def _injected(emulator: Emulator, endpoint: str, as_json: bool) -> tuple[Fault, Response | None]:
    fault = emulator.fault(endpoint)
    if fault.delay:
        time.sleep(fault.delay)
    if fault.status is None:
        return fault, None
    message = f"injected fault: HTTP {fault.status} from {endpoint}"
    if as_json:
        return fault, Response.json({"detail": message}, fault.status)
    return fault, Response.text(message + "\n", fault.status)


def _json(payload: object, fault: Fault) -> Response:
    # json.dumps writes NaN/Infinity as bare tokens, as a buggy producer would.
    text = json.dumps(payload)
    return Response(200, (garble_json(text) if fault.malformed else text).encode(), JSON_TYPE)


def _exposition(endpoint: str) -> Route:
    def handler(emulator: Emulator, request: Request) -> Response:
        _, early = _injected(emulator, endpoint, as_json=False)
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
    fault, early = _injected(emulator, "cmdb", as_json=True)
    early = early or _cmdb_auth(emulator, request, fault)
    if early is not None:
        return early
    limit, offset = cmdb.paging(request.query)
    names = request.query.get("name", [])
    return _json(emulator.cmdb_page(names, limit, offset, request.base_url), fault)


def netbox_status(emulator: Emulator, request: Request) -> Response:
    fault, early = _injected(emulator, "cmdb", as_json=True)
    early = early or _cmdb_auth(emulator, request, fault)
    if early is not None:
        return early
    return _json({"netbox-version": cmdb.NETBOX_VERSION}, fault)


def opencost_assets(emulator: Emulator, request: Request) -> Response:
    fault, early = _injected(emulator, "opencost", as_json=True)
    if early is not None:
        return early
    window = request.query.get("window", ["1h"])[-1]
    return _json(emulator.assets(window), fault)


ROUTES = [
    route("GET", "/healthz", "healthz", healthz),
    _exposition("dcgm"),
    _exposition("node-exporter"),
    _exposition("opencost"),
    route("GET", "/opencost/model/assets", "opencost-assets", opencost_assets),
    route("GET", "/api/dcim/devices/?", "cmdb", devices),
    route("GET", "/api/status/?", "cmdb-status", netbox_status),
]
