"""The core's decisions/s of two source trees measured alternately in one run: this checkout against the code that
produced the committed figure (bench.regression's same-run check).

Why alternately: on the shared 2-core dev VM the same code's decisions/s moved by 1.8x within one afternoon (core
quick at 5,000 nodes: 992 at 12:56, 543 at 14:33 on 2026-12-03), and by +-20 % from one few-second run to the
next, so a figure measured today against one committed on another day says more about the host than about the
code. Here each tree's scheduler lives in a process of its own (the core bench's cluster, profile and pods, from
that tree's bench code and metrics_sched: as they were when its figure was measured), and the two take turns
timing blocks of decisions (250: a third of a second), each idle while the other measures; a pair of blocks
shares the host's speed of that second, and the median of the pairs' ratios is what the change did. (Tried
first and dropped: a fixed reference workload timed next to the core to normalise the absolute figure, whose
rate moved by 9-16 thousand iterations/s from one process to the next in quiet runs, the normalised figure
spreading as widely as the raw one; and whole runs of each tree in turn, 3 pairs of which read 0.80x for
code that 6 more pairs then read at 1.08x.)

A block is timed as the core bench times decisions: each Scheduler.schedule_one call, the binder drained after
the block, untimed; each child keeps to one CPU when the scheduler's cpuAffinity default (this checkout's) is one,
as the core bench then does.

    python bench/core_ab.py --src TREE [--nodes 5000] [--pods 3100] [--warmup 100] [--one-cpu]
    (a child: reads block sizes)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
# What a child needs of a tree: the core, the adapters it may import, and the bench harness.
TREE_PARTS = ("metrics_sched", "adapters", "bench")
CHILD_TIMEOUT = 600.0


@dataclass(frozen=True)
class Pairs:
    """Decisions/s of this tree and of the baseline tree, in the order measured (pair i: current[i], baseline[i])."""

    current: list[float]
    baseline: list[float]

    def ratios(self) -> list[float]:
        return [c / b for c, b in zip(self.current, self.baseline, strict=True) if b > 0]

    def ratio(self) -> float:
        """The median of the pairs' ratios (each pair measured back to back: the host's drift between pairs cancels)."""
        return statistics.median(self.ratios())

    def as_dict(self) -> dict[str, Any]:
        return {"current": self.current, "baseline": self.baseline, "ratios": [round(r, 3) for r in self.ratios()],
                "ratio": round(self.ratio(), 3)}


def export_tree(commit: str, into: Path, root: Path = ROOT) -> Path:
    """The commit's TREE_PARTS written under `into` (git archive: no worktree to clean up)."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit, *TREE_PARTS], cwd=root,
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


class Child:
    """A process holding one tree's scheduler (the core bench's cluster at `nodes` nodes, warmed up), which times
    blocks of decisions when told to: the two trees' processes take turns, each idle while the other measures."""

    def __init__(self, src: Path, nodes: int, pods: int, warmup: int) -> None:
        from metrics_sched.config.model import DEFAULT_CPU_AFFINITY  # this checkout's (the parent runs it)

        self.src = src
        # Its stderr goes to a file, read only when it fails: a pipe nobody reads would stop a chatty child.
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the child: close()
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--src", str(src), "--nodes", str(nodes), "--pods", str(pods),
             "--warmup", str(warmup), *(["--one-cpu"] if DEFAULT_CPU_AFFINITY == "one" else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
            text=True, cwd=src)
        ready = self._reply()
        if Path(ready["metrics_sched"]).parent != src.resolve():
            self.close()
            raise RuntimeError(f"the child of {src} runs {ready['metrics_sched']}")

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(CHILD_TIMEOUT)
            self.errors.seek(0)
            output = self.errors.read().strip()[-2000:]
            self.errors.close()
            raise RuntimeError(f"the core bench of {self.src} failed (exit {self.process.returncode}): {output}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def rate(self, decisions: int) -> float:
        """Decisions/s over the next `decisions` (their summed schedule_one time, the binder drained after)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{decisions}\n")
        self.process.stdin.flush()
        reply = self._reply()
        return float(reply["decisions"]) / float(reply["seconds"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # the child's loop ends at end of input
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.errors.close()


def alternate(commit: str, blocks: int = 24, block: int = 250, nodes: int = 5_000, warmup: int = 100,
              say: Callable[[str], None] = lambda _: None, root: Path = ROOT,
              child: Callable[[Path, int, int, int], Child] = Child) -> Pairs:
    """`blocks` blocks of `block` decisions of this checkout and of `commit`'s tree, taking turns (which goes first
    swaps from one pair of blocks to the next): per pair, two rates measured within a second of each other."""
    with tempfile.TemporaryDirectory(prefix="core-ab-") as tmp:
        baseline = export_tree(commit, Path(tmp), root)
        pods = warmup + blocks * block
        children: dict[str, Child] = {}
        try:
            for name, src in (("current", root), ("baseline", baseline)):
                children[name] = child(src, nodes, pods, warmup)
            rates: dict[str, list[float]] = {"current": [], "baseline": []}
            for i in range(blocks):
                for name in (("current", "baseline") if i % 2 == 0 else ("baseline", "current")):
                    rates[name].append(children[name].rate(block))
                say(f"block {i + 1}/{blocks}: this checkout {rates['current'][-1]:.1f}, {commit[:10]} "
                    f"{rates['baseline'][-1]:.1f} decisions/s")
        finally:
            for each in children.values():
                each.close()
        return Pairs(rates["current"], rates["baseline"])


def serve(src: Path, nodes: int, pods: int, warmup: int, one_cpu: bool = False) -> None:
    """The child: the tree's scheduler, warmed up, then one block of decisions per line read ("<count>"); with
    `one_cpu` on one of the allowed CPUs, as cpuAffinity: one keeps the scheduler (the older tree may not have
    keep_to_one_cpu, and this tree's must not be imported: the same choice, by pid, made here)."""
    if one_cpu:
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {allowed[os.getpid() % len(allowed)]})
    sys.path.insert(0, str(src))  # before anything imports metrics_sched or bench: the tree's own code
    import metrics_sched
    from bench import core_bench

    harness = core_bench.cluster(nodes)
    scheduler = harness.scheduler
    for i in range(pods):
        scheduler.handlers.on_pod_event("ADDED", core_bench.make_pod(i))
    core_bench.synced()
    try:
        for _ in range(warmup):
            scheduler.schedule_one(timeout=0)
        core_bench.drain(harness)
        print(json.dumps({"metrics_sched": str(Path(metrics_sched.__file__).resolve().parent)}), flush=True)
        clock = time.perf_counter
        for line in sys.stdin:
            seconds = 0.0
            count = int(line)
            for _ in range(count):  # timed as the core bench times a decision: each schedule_one call
                started = clock()
                scheduler.schedule_one(timeout=0)
                seconds += clock() - started
            core_bench.drain(harness)
            print(json.dumps({"decisions": count, "seconds": seconds}), flush=True)
    finally:
        harness.stop()
        core_bench.released()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--src", type=Path, required=True, help="the tree whose code is measured")
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=3_100, help="pods queued (the warm-up's included)")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--one-cpu", action="store_true", help="keep to one CPU (cpuAffinity: one)")
    args = parser.parse_args(argv)
    serve(args.src.resolve(), args.nodes, args.pods, args.warmup, args.one_cpu)


if __name__ == "__main__":
    main()
