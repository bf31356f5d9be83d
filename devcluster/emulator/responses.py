"""What every faultable data route does first (`injected`: the delay, then the status override) and how it
writes JSON (`json_response`: garbled under the malformed fault)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import orjson

from devcluster.emulator.faults import Fault, garble_json
from devcluster.emulator.routing import JSON_TYPE, Response

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator

__all__ = ["injected", "json_response"]


def injected(emulator: Emulator, endpoint: str, as_json: bool) -> tuple[Fault, Response | None]:
    """The endpoint's fault, and the response it forces (a status override), if any. The delay is a sleep in
    this request's own thread, so other requests carry on."""
    fault = emulator.fault(endpoint)
    if fault.delay:
        time.sleep(fault.delay)
    if fault.status is None:
        return fault, None
    message = f"injected fault: HTTP {fault.status} from {endpoint}"
    if as_json:
        return fault, Response.json({"detail": message}, fault.status)
    return fault, Response.text(message + "\n", fault.status)


def json_response(payload: object, fault: Fault) -> Response:
    if fault.malformed or fault.value_override() is not None:
        # json.dumps writes NaN/Infinity as bare tokens, as a buggy producer would (orjson writes null).
        text = json.dumps(payload)
        return Response(200, (garble_json(text) if fault.malformed else text).encode(), JSON_TYPE)
    # Otherwise orjson: at 5,000 nodes a CMDB refresh is 5 pages of 1,000 devices and the metrics API a list of
    # 5,000 items, and this process shares the 2 cores with what the benchmarks measure (values are finite here:
    # overrides refuse non-finite ones, which belong to the nan/inf faults above).
    return Response(200, orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), JSON_TYPE)
