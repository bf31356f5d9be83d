"""pprof-style profiling of the running scheduler: a sampling CPU profiler, a heap tracer, thread dumps.

Served as /debug/pprof/profile, /debug/pprof/heap and /debug/threads (metrics_sched/serving/debug.py) only with
`enableProfiling: true` (off by default; see docs/observability.md, "Profiling").
"""

from metrics_sched.profiling.sampler import Frame, Profile, ProfilerBusy, SamplingProfiler

__all__ = ["Frame", "Profile", "ProfilerBusy", "SamplingProfiler"]
