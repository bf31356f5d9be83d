"""A Profile as collapsed stacks (Brendan Gregg's, read by flamegraph.pl, speedscope, inferno) or speedscope JSON."""

from __future__ import annotations

from typing import Any

from metrics_sched.profiling.sampler import Frame, Profile

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def collapsed(profile: Profile) -> str:
    """One line per distinct stack: `thread;root frame;...;leaf frame count`, most samples first."""
    lines = []
    for (thread, stack), count in sorted(profile.samples.items(), key=lambda kv: (-kv[1], kv[0][0])):
        frames = ";".join([thread.replace(";", ":").replace("\n", " "), *(f.label for f in stack)])
        lines.append(f"{frames} {count}\n")
    return "".join(lines)


def speedscope(profile: Profile, name: str = "metrics-sched") -> dict[str, Any]:
    """speedscope's file format: one "sampled" profile per thread, weights in seconds, frames shared."""
    index: dict[Frame, int] = {}
    frames: list[dict[str, Any]] = []
    per_thread: dict[str, tuple[list[list[int]], list[float]]] = {}
    for (thread, stack), count in profile.samples.items():
        ids = []
        for frame in stack:
            if frame not in index:
                index[frame] = len(frames)
                frames.append({"name": frame.name, "file": frame.file, "line": frame.line})
            ids.append(index[frame])
        samples, weights = per_thread.setdefault(thread, ([], []))
        samples.append(ids)
        weights.append(count * profile.interval)
    profiles = [{"type": "sampled", "name": thread, "unit": "seconds", "startValue": 0.0,
                 "endValue": sum(weights), "samples": samples, "weights": weights}
                for thread, (samples, weights) in sorted(per_thread.items())]
    return {"$schema": SPEEDSCOPE_SCHEMA, "name": name, "exporter": "metrics-sched", "activeProfileIndex": 0,
            "shared": {"frames": frames}, "profiles": profiles}


__all__ = ["collapsed", "speedscope"]
