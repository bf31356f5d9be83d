"""A flame graph of the scheduling core at 5,000 nodes, sampled by the scheduler's own profiler.

Runs the core bench's decision loop (bench/core_bench.py: Scheduler.schedule_one with every built-in
plugin, telemetry for every node, a no-op writer) in this process while metrics_sched.profiling samples
every thread at `--hz`, then draws the samples of the loop's thread (or of every thread, `--all-threads`)
as an SVG flame graph: root at the bottom, a frame's width its share of the samples, hover for the
function, its file and its count. The renderer is here (no flamegraph.pl), and also draws a profile
fetched from a running scheduler:

    python -m bench.flame [--nodes 5000] [--decisions 2000] [--out bench/results/flame-5000.svg]
    curl 'http://SCHEDULER:10259/debug/pprof/profile?seconds=30' > profile.txt
    python -m bench.flame --collapsed profile.txt --out profile.svg
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from metrics_sched.profiling.formats import collapsed
from metrics_sched.profiling.sampler import Profile, sample

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "flame-5000.svg"
WIDTH = 1200.0
ROW = 17.0
PAD_TOP = 42.0
MIN_WIDTH = 0.4  # px: narrower frames are left out (their samples still count in their parents' width)
CHAR_WIDTH = 6.4  # px per character at font-size 11, to fit labels


@dataclass
class Node:
    name: str
    count: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def parse_collapsed(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    stacks = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        frames, _, count = line.rpartition(" ")
        stacks.append((frames.split(";"), int(count)))
    return stacks


def build_tree(stacks: Iterable[tuple[list[str], int]]) -> Node:
    root = Node("all")
    for frames, count in stacks:
        root.count += count
        node = root
        for frame in frames:
            node = node.children.setdefault(frame, Node(frame))
            node.count += count
    return root


def _depth(node: Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)


def _colour(name: str) -> str:
    """Warm for the scheduler's own code, green for the bench, blue-grey for the rest (stdlib, numpy)."""
    h = int(hashlib.md5(name.encode()).hexdigest()[:4], 16) / 0xFFFF
    if "metrics_sched/" in name:
        return f"rgb({205 + int(50 * h)},{80 + int(120 * h)},{40 + int(30 * h)})"
    if "bench/" in name:
        return f"rgb({90 + int(40 * h)},{170 + int(50 * h)},{90 + int(40 * h)})"
    return f"rgb({140 + int(40 * h)},{155 + int(40 * h)},{190 + int(40 * h)})"


def render_svg(stacks: Sequence[tuple[list[str], int]], title: str) -> str:
    root = build_tree(stacks)
    total = max(1, root.count)
    depth = _depth(root)
    height = PAD_TOP + depth * ROW + 10
    scale = (WIDTH - 20) / total
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {WIDTH:.0f} {height:.0f}" font-family="Verdana, sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="#fdfdf6"/>',
           f'<text x="{WIDTH / 2:.0f}" y="18" text-anchor="middle" font-size="15">{escape(title)}</text>',
           f'<text x="10" y="34" fill="#555">{total} samples; width = share of samples; hover a frame for '
           'its file and count</text>']

    def draw(node: Node, x: float, level: int) -> None:
        width = node.count * scale
        if width < MIN_WIDTH:
            return
        y = height - 10 - (level + 1) * ROW
        name = node.name
        short = name.split(" (", 1)[0]
        share = 100.0 * node.count / total
        out.append(f'<g><title>{escape(name)}: {node.count} samples ({share:.2f}%)</title>'
                   f'<rect x="{10 + x:.2f}" y="{y:.1f}" width="{width:.2f}" height="{ROW - 1:.0f}" '
                   f'fill="{"#e0e0d0" if level == 0 else _colour(name)}" rx="2"/>')
        fits = int((width - 6) / CHAR_WIDTH)
        if fits >= 3:
            label = short if len(short) <= fits else short[:fits - 2] + ".."
            out.append(f'<text x="{12 + x:.2f}" y="{y + ROW - 5:.1f}">{escape(label)}</text>')
        out.append("</g>")
        child_x = x
        for child in sorted(node.children.values(), key=lambda c: c.name):
            draw(child, child_x, level + 1)
            child_x += child.count * scale

    draw(root, 0.0, 0)
    out.append("</svg>\n")
    return "\n".join(out)


def profile_core(n_nodes: int, decisions: int, warmup: int, hz: int) -> Profile:
    """The core bench's decision loop (in this, the main, thread) sampled from another thread."""
    from bench.core_bench import cluster, make_pod, run_decisions, say

    harness = cluster(n_nodes)
    pods = [make_pod(i) for i in range(warmup + decisions)]
    stop = threading.Event()
    result: list[Profile] = []
    sampler = threading.Thread(target=lambda: result.append(sample(24 * 3600, hz, stop=stop)), name="sampler")
    say(f"flame: {n_nodes} nodes, {decisions} decisions sampled at {hz} Hz")
    sampler.start()
    try:
        stats = run_decisions(harness, pods, warmup)
    finally:
        stop.set()
        sampler.join()
        harness.stop()
    say(f"flame: {stats['decisions']} decisions, p50 {stats['p50_ms']} ms under the sampler")
    return result[0]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--decisions", type=int, default=2_000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--hz", type=int, default=100)
    parser.add_argument("--all-threads", action="store_true",
                        help="every thread (binder workers, reporter; mostly waiting), not only the loop's")
    parser.add_argument("--collapsed", type=Path, help="draw this collapsed-stacks file instead of running the bench")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.collapsed:
        stacks = parse_collapsed(args.collapsed.read_text().splitlines())
        title = f"metrics-sched: {args.collapsed.name}"
    else:
        profile = profile_core(args.nodes, args.decisions, args.warmup, args.hz)
        stacks = parse_collapsed(collapsed(profile).splitlines())
        if not args.all_threads:  # the loop runs in the main thread here; the rest wait for work
            stacks = [(frames, n) for frames, n in stacks if frames[0] == "MainThread"]
        title = (f"metrics-sched core: Scheduler.schedule_one at {args.nodes:,} nodes, {args.decisions:,} decisions, "
                 f"sampled at {args.hz} Hz")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_svg(stacks, title))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
