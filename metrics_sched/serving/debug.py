"""The /debug endpoints, registered on the scheduler's HTTP server only when `enableProfiling` is true.

GET /debug/pprof/profile?seconds=N[&hz=H][&format=collapsed|speedscope]  a CPU profile of every thread
GET /debug/pprof/heap?start=1[&frames=F] | ?stop=1 | [?top=N&key=lineno|traceback|filename&diff=0|1]
GET /debug/threads                                                     every thread's stack, by name
"""

from __future__ import annotations

import json

from metrics_sched.profiling.formats import collapsed, speedscope
from metrics_sched.profiling.heap import MAX_FRAMES, HeapTracer
from metrics_sched.profiling.sampler import MAX_HZ, ProfilerBusy, SamplingProfiler
from metrics_sched.profiling.threads import thread_dump
from metrics_sched.serving.http_server import RESPONSE_TIMEOUT
from metrics_sched.serving.route import BadRequest, Query, Response, Route, check_params, int_param, param, text

# The server gives a handler and its client RESPONSE_TIMEOUT in total: the profile must end well before.
MAX_SECONDS = int(RESPONSE_TIMEOUT) - 5
DEFAULT_SECONDS = 10
DEFAULT_HZ = 100
FORMATS = ("collapsed", "speedscope")
HEAP_KEYS = ("lineno", "traceback", "filename")


def _flag(query: Query, key: str) -> bool:
    value = param(query, key)
    if value is None:
        return False
    if value not in ("0", "1", "true", "false"):
        raise BadRequest(f"{key}: must be 1/true or 0/false, got {value!r}")
    return value in ("1", "true")


class DebugEndpoints:
    def __init__(self) -> None:
        self.profiler = SamplingProfiler()
        self.heap_tracer = HeapTracer()

    def profile(self, query: Query) -> Response:
        check_params(query, ("seconds", "hz", "format"))
        seconds = int_param(query, "seconds", minimum=1, maximum=MAX_SECONDS) or DEFAULT_SECONDS
        hz = int_param(query, "hz", minimum=1, maximum=MAX_HZ) or DEFAULT_HZ
        fmt = param(query, "format") or "collapsed"
        if fmt not in FORMATS:
            raise BadRequest(f"format: must be one of {', '.join(FORMATS)}, got {fmt!r}")
        try:
            profile = self.profiler.profile(seconds, hz)
        except ProfilerBusy as exc:
            return text(429, f"{exc}; retry when it ends\n")
        if fmt == "speedscope":
            return 200, "application/json", json.dumps(speedscope(profile)).encode()
        return text(200, collapsed(profile))

    def heap(self, query: Query) -> Response:
        check_params(query, ("start", "stop", "frames", "top", "key", "diff"))
        if _flag(query, "stop"):
            return text(200, self.heap_tracer.stop())
        if _flag(query, "start"):
            frames = int_param(query, "frames", minimum=1, maximum=MAX_FRAMES) or 1
            return text(200, self.heap_tracer.start(frames))
        n = int_param(query, "top", minimum=1, maximum=1000) or 25
        key = param(query, "key") or "lineno"
        if key not in HEAP_KEYS:
            raise BadRequest(f"key: must be one of {', '.join(HEAP_KEYS)}, got {key!r}")
        diff = _flag(query, "diff") if "diff" in query else True
        report = self.heap_tracer.top(n, key=key, diff=diff)
        if report is None:
            return text(409, "not tracing allocations: GET /debug/pprof/heap?start=1 first\n")
        return text(200, report)

    def threads(self, query: Query) -> Response:
        check_params(query, ())
        return text(200, thread_dump())


def debug_routes(endpoints: DebugEndpoints) -> dict[str, Route]:
    return {"/debug/pprof/profile": endpoints.profile, "/debug/pprof/heap": endpoints.heap,
            "/debug/threads": endpoints.threads}


__all__ = ["DEFAULT_HZ", "DEFAULT_SECONDS", "MAX_SECONDS", "DebugEndpoints", "debug_routes"]
