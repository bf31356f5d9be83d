"""pprof-style profiling of the running scheduler: /debug/pprof/profile, /debug/pprof/heap, /debug/threads.

Served only with `enableProfiling: true` (off by default; see README "Profiling").
"""

from metrics_sched.profiling.routes import DebugEndpoints, debug_routes
from metrics_sched.profiling.sampler import Frame, Profile, ProfilerBusy, SamplingProfiler

__all__ = ["DebugEndpoints", "Frame", "Profile", "ProfilerBusy", "SamplingProfiler", "debug_routes"]
