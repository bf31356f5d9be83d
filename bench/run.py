"""Runs every benchmark and writes bench/results/latest.{json,md,png} (and the README's table).

    python -m bench.run --quick   # make bench-quick: 500 nodes / 2,000 pods, small core sizes (< 10 min)
    python -m bench.run           # make bench: adds 5,000 nodes / 10,000 pods and the full core sizes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
README = Path(__file__).parent.parent / "README.md"


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal"))
    go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem / 2**20, 1),
            "python": platform.python_version(), "go": go, "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(report: dict[str, Any]) -> str:
    from bench import rebalance_bench, soak_bench

    m = report["machine"]
    lines = [f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), {m['memory_gb']} GB, Python {m['python']}; "
             f"kubernetes {report.get('versions', {}).get('kubernetes', '?')}. "
             f"Mode: {'quick' if report['quick'] else 'full'}.", ""]
    for size in report.get("e2e", []):
        lines += [f"**End to end, {size['nodes']} nodes / {size['pods']} pods** (same API server, KWOK nodes)", "",
                  "| contender | pods/s | vs kube tuned | vs ceiling | p50 ms | p99 ms | CPU s | peak RSS MB |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in size["results"]:
            lines.append(f"| {r['label']} | {r['pods_per_second']} | {r.get('throughput_vs_kube_tuned', '-')} | "
                         f"{r.get('throughput_vs_ceiling', '-')} | {r['latency_p50_ms']} | {r['latency_p99_ms']} | "
                         f"{r['scheduler_cpu_seconds']} | {r['scheduler_peak_rss_mb']} |")
        lines.append("")
    core = report.get("core")
    if core:
        lines += ["**Core only** (no API; every plugin on)", "", "| nodes | decisions/s | p50 ms | p99 ms |",
                  "|---|---|---|---|"]
        for row in core.get("sizes", []):
            lines.append(f"| {row.get('nodes')} | {row.get('decisions_per_second')} | {row.get('p50_ms')} | "
                         f"{row.get('p99_ms')} |")
        constraints = core.get("constraints")
        if constraints and constraints.get("skipped"):
            lines.append(f"\nConstraints case skipped: {constraints['skipped']}.")
        elif constraints:
            plain: dict[str, Any] = next((r for r in core.get("sizes", []) if r.get("nodes") == constraints["nodes"]),
                                         {})
            outcome = constraints.get("outcome", {})
            lines += ["", f"**Core with constraints** ({constraints['nodes']} nodes in {constraints['zones']} zones, "
                      f"{constraints['existing_pods']} labelled pods already bound, "
                      f"{constraints.get('existing_required_anti_affinity')} of them with required anti-affinity; "
                      f"a {constraints['replicas']}-replica Deployment with zone spread (maxSkew 1) and "
                      "hostname anti-affinity)", "",
                      "| case | decisions/s | p50 ms | p99 ms |", "|---|---|---|---|",
                      f"| plain, {constraints['nodes']} nodes | {plain.get('decisions_per_second', '-')} | "
                      f"{plain.get('p50_ms', '-')} | {plain.get('p99_ms', '-')} |",
                      f"| constraints | {constraints.get('decisions_per_second')} | {constraints.get('p50_ms')} | "
                      f"{constraints.get('p99_ms')} |", "",
                      f"Outcome: {outcome.get('placed')} of {outcome.get('replicas')} placed on "
                      f"{outcome.get('distinct_nodes')} distinct nodes, per zone "
                      f"{', '.join(map(str, outcome.get('pods_per_zone', {}).values()))}: "
                      + ("constraints hold." if constraints.get("verified") else
                         "VIOLATED: " + "; ".join(constraints.get("violations", [])) + ".")]
        if core.get("rss"):
            lines.append(f"\nRSS with {core['rss'].get('nodes')} nodes and {core['rss'].get('pods')} pods: "
                         f"{core['rss'].get('rss_mb')} MB.")
        lines.append("")
    quality = report.get("quality")
    if quality:
        lines += ["**Placement quality** (seeded scenario)", "",
                  "| contender | mean °C | max °C | $/h placed | load std | max burst share | objective % of optimum |",
                  "|---|---|---|---|---|---|---|"]
        for name, q in quality.get("contenders", {}).items():
            lines.append(f"| {name} | {q.get('mean_gpu_temp')} | {q.get('max_gpu_temp')} | {q.get('hourly_cost')} | "
                         f"{q.get('load_std')} | {q.get('max_burst_share')} | {q.get('objective_pct_of_optimum')} |")
        lines.append("")
    if report.get("soak"):
        lines += [soak_bench.markdown(report["soak"]), ""]
    if report.get("rebalance"):
        lines += [rebalance_bench.markdown(report["rebalance"]), ""]
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report.get("e2e", [])
    core = report.get("core") or {}
    core_bars = [(f"plain\n{row['nodes']} nodes", row.get("decisions_per_second") or 0.0, "#1f5fa8")
                 for row in core.get("sizes", [])]
    constraints = core.get("constraints") or {}
    if constraints.get("decisions_per_second"):
        core_bars.append((f"constraints\n{constraints['nodes']} nodes", constraints["decisions_per_second"], "#d9822b"))
    panels = max(1, len(sizes) + (1 if core_bars else 0))
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=False):
        labels = [r["contender"] for r in size["results"]]
        values = [r["pods_per_second"] for r in size["results"]]
        bars = ax.bar(labels, values, color=["#888", "#555", "#4a90d9", "#1f5fa8", "#2a2"][: len(values)])
        ax.bar_label(bars, fmt="%.0f")
        ax.set_title(f"{size['nodes']} nodes / {size['pods']} pods")
        ax.set_ylabel("pods bound per second")
        ax.tick_params(axis="x", rotation=20)
    if core_bars:
        ax = axes[0][len(sizes)]
        bars = ax.bar([b[0] for b in core_bars], [b[1] for b in core_bars], color=[b[2] for b in core_bars])
        ax.bar_label(bars, fmt="%.0f")
        ax.set_title("core only (no API), every plugin on")
        ax.set_ylabel("decisions per second")
    fig.suptitle(f"metrics-sched vs kube-scheduler ({report['machine']['cores']} cores, {report['machine']['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def update_readme(md: str) -> None:
    text = README.read_text()
    new = re.sub(r"<!-- bench:start -->.*<!-- bench:end -->", f"<!-- bench:start -->\n{md}\n<!-- bench:end -->",
                 text, flags=re.S)
    README.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", nargs="*", default=[], choices=["e2e", "core", "quality", "soak", "rebalance"])
    parser.add_argument("--no-readme", action="store_true", help="leave README.md's bench section as it is")
    parser.add_argument("--e2e-sizes", nargs="*", default=None, metavar="NODESxPODS",
                        help="e.g. 5000x10000; sizes already in latest.json and not listed are kept")
    args = parser.parse_args()
    from bench import core_bench, e2e_bench, quality_bench, rebalance_bench, soak_bench

    report: dict[str, Any] = {"quick": args.quick, "machine": machine()}
    if "e2e" not in args.skip:
        sizes = [(500, 2000)] if args.quick else [(500, 2000), (5000, 10000)]
        kept: list[dict[str, Any]] = []
        if args.e2e_sizes:
            sizes = [(int(n), int(p)) for n, p in (s.split("x") for s in args.e2e_sizes)]
            previous = json.loads((RESULTS / "latest.json").read_text()) if (RESULTS / "latest.json").exists() else {}
            kept = [s for s in previous.get("e2e", []) if (s["nodes"], s["pods"]) not in sizes]
        report["e2e"] = kept + [e2e_bench.run_size(n, p) for n, p in sizes]
        report["e2e"].sort(key=lambda s: s["nodes"])
        report["versions"] = report["e2e"][0].get("versions", {})
    else:
        previous = json.loads((RESULTS / "latest.json").read_text()) if (RESULTS / "latest.json").exists() else {}
        report["e2e"] = previous.get("e2e", [])  # keep the last measured end-to-end figures
        report["versions"] = previous.get("versions", {})
    if "core" not in args.skip:
        say("core benchmark")
        report["core"] = core_bench.run(args.quick)
    if "quality" not in args.skip:
        say("placement quality benchmark")
        report["quality"] = quality_bench.run(args.quick)
    if "soak" not in args.skip:
        say("soak: a simulated week")
        report["soak"] = soak_bench.run(args.quick)
    if "rebalance" not in args.skip:
        say("rebalancing: nodes heating up, with and without the rebalancer")
        report["rebalance"] = rebalance_bench.run(args.quick)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    md = markdown(report)
    (RESULTS / "latest.md").write_text(md + "\n")
    chart(report, RESULTS / "latest.png")
    if not args.no_readme:
        update_readme(md)
    print(md)
    violations = (report.get("core") or {}).get("constraints", {}).get("violations")
    if violations:
        say("the constraints case's outcome is wrong: " + "; ".join(violations))
        sys.exit(1)
    if report.get("soak") and not report["soak"]["checks"]["ok"]:
        say("the soak's checks failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
