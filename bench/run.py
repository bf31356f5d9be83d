"""Runs every benchmark and writes bench/results/latest.{json,md,png} (and the table in docs/benchmarks.md).

    python -m bench.run --quick   # make bench-quick: e2e 500 nodes / 500 pods x 3 repetitions, small core
                                  # sizes, then the regression check of the core's decisions/s (< 10 min)
    python -m bench.run           # make bench: e2e 500 nodes / 2,000 pods and 5,000 nodes / 1,000 pods, 3
                                  # repetitions each, a memory run of 50,000 pods on the 5,000 nodes, the full
                                  # core, quality, soak, rebalance and the flame graph

Durations on a machine of this kind (2 cores): `make bench` 49 min measured on 2026-12-03 (67 min the same
afternoon on a host ~1.8x slower: e2e 61, core 3; in the morning run e2e 45 with the
memory run, core 2.2, soak 1.4; bench/e2e_bench.py says how the e2e part adds up), inside CI's 90;
`make bench-quick` 6.4 min (its same-run regression check included). On a busy machine
each e2e size stops repeating at its time budget (E2E_FULL, E2E_QUICK), and the report says so.
Every part is measured in this run: each e2e size writes its own e2e-<nodes>.json when it finishes, and this
assembles latest.json from them (with `--skip e2e`, the previous e2e figures are kept, each with its date).
`--out DIR` writes everything there instead of bench/results (and leaves the README alone); `--render` measures
nothing and writes the report, chart and README section again from the latest.json there.
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
# The benchmarks page of the docs holds the latest run's table between its bench markers (the README links it).
README = Path(__file__).parent.parent / "docs" / "benchmarks.md"


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


def markdown(report: dict[str, Any], base: str = "") -> str:
    """The report in markdown; `base` prefixes the links to the chart and the flame graph (they sit in
    bench/results: "" for latest.md there, "../bench/results/" for docs/benchmarks.md)."""
    from bench import e2e_report, rebalance_bench, soak_bench

    m = report["machine"]
    commit = report.get("commit") or {}
    code = (f" Code: {commit['sha'][:10]}{' with uncommitted changes' if commit.get('dirty') else ''}."
            if commit.get("sha") else "")
    lines = [f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), {m['memory_gb']} GB, Python {m['python']}; "
             f"kubernetes {report.get('versions', {}).get('kubernetes', '?')}. "
             f"Mode: {'quick' if report['quick'] else 'full'}.{code}", ""]
    for size in report.get("e2e", []):
        lines += e2e_report.size_markdown(size)
    if report.get("e2e"):
        lines += [f"![pods/s and CPU-ms per pod, median with min-max bars]({base}latest.png)", ""]
    core = report.get("core")
    if core:
        lines += ["**Core only** (no API). A decision is `Scheduler.schedule_one` (pop, cycle, assume, Reserve, the "
                  "hand-off to the binder, whose threads share the GIL); a cycle is `Framework.schedule` + assume.", "",
                  "| nodes | plugins | decisions/s | p50 ms | p99 ms | cycles/s | cycle p50 ms | cycle p99 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        rows = [(row, "default + CustomMetric, NodeLabelFilter, NodeLabelScore, ZoneSpread")
                for row in core.get("sizes", [])]
        if core.get("default_profile"):
            rows.append((core["default_profile"], "the default profile"))
        for row, plugins in rows:
            cycle = row.get("cycle") or {}
            lines.append(f"| {row.get('nodes')} | {plugins} | {row.get('decisions_per_second')} | "
                         f"{row.get('p50_ms')} | {row.get('p99_ms')} | {cycle.get('decisions_per_second', '-')} | "
                         f"{cycle.get('p50_ms', '-')} | {cycle.get('p99_ms', '-')} |")
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
        lines += _batching_markdown(core.get("batching"))
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
    flame_graph = report.get("flame")
    if flame_graph:
        lines += [f"**Profile**: [flame graph of the core at 5,000 nodes]({base}{flame_graph['file']}) "
                  "(bench/flame.py: Scheduler.schedule_one with every plugin, sampled at 100 Hz"
                  + ("" if flame_graph["this_run"] else "; made by the last `make bench`, not this run") + ").", ""]
    regression = report.get("regression")
    if regression:
        lines += [f"Regression check: {regression['message']}.", ""]
    return "\n".join(lines)


# The batch bench's profiles, as the report names them.
_BATCHING_PROFILES = {
    "core": "the core bench's profile: default spreading (PodTopologySpread's system defaults, ZoneSpread)",
    "no_default_spread": "without default spreading (what kube-scheduler's own batching needs)",
}


def _batching_markdown(batching: dict[str, Any] | None) -> list[str]:
    """The batch bench's table (bench/batch_bench.py): placements/s batched and not, per profile."""
    if not batching:
        return []
    warmup = batching.get("warmup_pods")
    cold = sorted(run["cold_first_cycle_ms"] for row in (batching.get(name) for name in _BATCHING_PROFILES) if row
                  for run in row["batched"]["runs"] if run.get("cold_first_cycle_ms") is not None)
    running = (f"; on a running scheduler: {warmup} pod(s) of another template placed first, untimed (a fresh "
               f"scheduler's first cycle ever, which builds what later ones reuse: {cold[len(cold) // 2]} ms)"
               if warmup and cold else "")
    lines = ["", f"**Opportunistic batching** (a {batching.get('replicas'):,}-replica Deployment placed on "
             f"{batching.get('nodes'):,} nodes, {batching.get('repeat')} runs each, batched and unbatched alternating; "
             f"`Framework.schedule` + assume per pod, the Deployment's first cycles included{running}; median "
             "(min-max))", "",
             "| profile | batched placements/s | batched p99 us | unbatched placements/s | speedup | same placements |",
             "|---|---|---|---|---|---|"]
    for name, label in _BATCHING_PROFILES.items():
        row = batching.get(name)
        if not row:
            continue
        batched, unbatched = row["batched"], row["unbatched"]
        rate, plain = batched["placements_per_second"], unbatched["placements_per_second"]
        p99 = sorted(run["p99_us"] for run in batched["runs"])
        lines.append(f"| {label} | {rate['median']} ({rate['min']}-{rate['max']}) | {p99[len(p99) // 2]} | "
                     f"{plain['median']} ({plain['min']}-{plain['max']}) | {row.get('speedup')}x | "
                     f"{'yes' if row.get('same_placements') else 'NO'} |")
    return lines


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench import e2e_report

    sizes = [s for s in report.get("e2e", []) if s.get("results")]
    core = report.get("core") or {}
    core_bars = [(f"plain\n{row['nodes']} nodes", row.get("decisions_per_second") or 0.0, "#1f5fa8")
                 for row in core.get("sizes", [])]
    constraints = core.get("constraints") or {}
    if constraints.get("decisions_per_second"):
        core_bars.append((f"constraints\n{constraints['nodes']} nodes", constraints["decisions_per_second"], "#d9822b"))
    rows = max(1, len(sizes) + (1 if core_bars else 0))
    fig, axes = plt.subplots(rows, 2, figsize=(13, 4.2 * rows), squeeze=False)
    for row, size in enumerate(sizes):
        e2e_report.panels(size, axes[row][0], axes[row][1])
    if core_bars:
        ax = axes[len(sizes)][0]
        bars = ax.bar([b[0] for b in core_bars], [b[1] for b in core_bars], color=[b[2] for b in core_bars])
        ax.bar_label(bars, fmt="%.0f")
        ax.set_title("core only (no API), every plugin on: decisions per second", fontsize=10)
        axes[len(sizes)][1].axis("off")
    fig.suptitle(f"metrics-sched vs kube-scheduler ({report['machine']['cores']} cores, {report['machine']['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_report(report: dict[str, Any], out: Path, *, readme: bool) -> str:
    """latest.md, latest.png and (for bench/results, unless readme is False) the README's section; the markdown."""
    md = markdown(report)
    (out / "latest.md").write_text(md + "\n")
    chart(report, out / "latest.png")
    if readme and out == RESULTS.resolve():
        update_readme(markdown(report, base="../bench/results/"))
    return md


def update_readme(md: str) -> None:
    text = README.read_text()
    new = re.sub(r"<!-- bench:start -->.*<!-- bench:end -->", f"<!-- bench:start -->\n{md}\n<!-- bench:end -->",
                 text, flags=re.S)
    README.write_text(new)


# (nodes, pods per run, time budget in seconds: no repetition after the first starts past it, pods of the
# memory run after the repetitions or None). The budgets keep `make bench` inside CI's 90 minutes (with ~15 for
# the other parts) and bench-quick inside 10 on a busy machine; on an idle one every repetition fits
# (bench/e2e_bench.py's docstring has the durations). At 5,000 nodes a run has 1,000 pods: deleting them takes
# longer than binding them (the API server deletes 22-75 pods/s there), and 3 repetitions of 6 contenders with
# 2,000 pods each took ~45 min; the memory figures at 10,000 and 50,000 pods come from the one memory run.
# The last: repetitions of every contender (--reps overrides). 500 nodes has five: a backlog drains there in ~3 s,
# and one contender's drains moved by up to a half from one repetition to the next with the API server's CPU per pod
# (kube-tuned 199-392 pods/s in one run of 2026-12-05), so three left the median to one or two drains; five cost
# ~6 more minutes.
Size = tuple[int, int, float | None, int | None, int]
E2E_FULL: tuple[Size, ...] = ((500, 2000, 16 * 60.0, None, 5), (5000, 1000, 30 * 60.0, 50_000, 3))
E2E_QUICK: tuple[Size, ...] = ((500, 500, 6 * 60.0, None, 3),)
MEMORY_MARKS = (10_000,)  # besides the memory run's end: issue 18, item 5 (<= 300 MB at 10,000, <= 500 at 50,000)


def e2e_sizes(args: argparse.Namespace) -> list[Size]:
    if args.e2e_sizes:
        from bench.e2e_bench import REPS

        return [(int(n), int(p), None, None, args.reps or REPS) for n, p in (s.split("x") for s in args.e2e_sizes)]
    sizes = list(E2E_QUICK if args.quick else E2E_FULL)
    return [(n, p, budget, memory, args.reps or reps) for n, p, budget, memory, reps in sizes]


def run_e2e(sizes: list[Size], out: Path) -> list[dict[str, Any]]:
    """Each size on its own dev cluster; a size that cannot run at all is recorded with the reason."""
    from bench import e2e_bench

    measured: list[dict[str, Any]] = []
    for nodes, pods, budget, memory_pods, reps in sizes:
        try:
            measured.append(e2e_bench.run_size(nodes, pods, reps=reps, out_dir=out, budget=budget,
                                               memory_pods=memory_pods, memory_marks=MEMORY_MARKS))
        except Exception as exc:  # noqa: BLE001 - one size failing leaves the others' figures standing
            say(f"e2e at {nodes} nodes failed: {type(exc).__name__}: {exc}")
            measured.append({"nodes": nodes, "pods": pods, "reps": reps, "complete": False,
                             "error": f"{type(exc).__name__}: {exc}", "results": []})
    return measured


def flame(out: Path) -> str | None:
    """Regenerates the flame graph of the core at 5,000 nodes; its file name, or None if it failed."""
    path = out / "flame-5000.svg"
    done = subprocess.run([sys.executable, "-m", "bench.flame", "--nodes", "5000", "--out", str(path)], check=False)
    if done.returncode != 0:
        say(f"the flame graph failed (exit {done.returncode})")
        return None
    return path.name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", nargs="*", default=[], choices=["e2e", "core", "quality", "soak", "rebalance"])
    parser.add_argument("--no-readme", action="store_true", help="leave README.md's bench section as it is")
    parser.add_argument("--e2e-sizes", nargs="*", default=None, metavar="NODESxPODS",
                        help=f"e.g. 5000x10000, no time budget (default {' '.join(f'{n}x{p}' for n, p, *_ in E2E_FULL)}"
                             f"; quick: {' '.join(f'{n}x{p}' for n, p, *_ in E2E_QUICK)})")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions of every e2e contender per size (default: each size's own, E2E_FULL)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory (not bench/results: the "
                                                                  "README is left alone)")
    parser.add_argument("--render", action="store_true", help="measure nothing: write latest.md, the chart and the "
                        "README's section again from the results directory's latest.json (after a report change)")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    if args.render:
        write_report(json.loads((out / "latest.json").read_text()), out, readme=not args.no_readme)
        return
    from bench import core_bench, quality_bench, rebalance_bench, regression, soak_bench

    out.mkdir(parents=True, exist_ok=True)
    # The code measured: what a later regression check measures again as the baseline (bench.regression).
    report: dict[str, Any] = {"quick": args.quick, "machine": machine(), "commit": regression.checkout_commit()}
    began = time.monotonic()
    if "e2e" not in args.skip:
        report["e2e"] = run_e2e(e2e_sizes(args), out)
        report["versions"] = next((s["versions"] for s in report["e2e"] if s.get("versions")), {})
    else:
        previous = json.loads((out / "latest.json").read_text()) if (out / "latest.json").exists() else {}
        report["e2e"] = previous.get("e2e", [])  # keep the last measured end-to-end figures (each has its date)
        report["versions"] = previous.get("versions", {})
    timings = {"e2e": round(time.monotonic() - began, 1)}
    for part, what, runner in (("core", "core benchmark", core_bench.run),
                               ("quality", "placement quality benchmark", quality_bench.run),
                               # its plot beside the report (--out), not always in bench/results
                               ("soak", "soak: a simulated week",
                                lambda quick: soak_bench.run(quick, plot=out / "soak.png")),
                               ("rebalance", "rebalancing: nodes heating up, with and without the rebalancer",
                                rebalance_bench.run)):
        if part not in args.skip:
            say(what)
            started = time.monotonic()
            report[part] = runner(args.quick)
            timings[part] = round(time.monotonic() - started, 1)
    if not args.quick and "core" not in args.skip:
        say("flame graph of the core at 5,000 nodes")
        made = flame(out)
        report["flame"] = {"file": made, "this_run": True} if made else None
    elif (out / "flame-5000.svg").exists():  # quick: the last full run's, said as such
        report["flame"] = {"file": "flame-5000.svg", "this_run": False}
    verdict = None
    if args.quick and "core" not in args.skip:
        verdict = regression.check(report, regression.committed_report(), say=say)
        report["regression"] = {"ok": verdict.ok, "message": verdict.message}
    timings["total"] = round(time.monotonic() - began, 1)
    report["seconds"] = timings
    (out / "latest.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(write_report(report, out, readme=not args.no_readme))
    failures = []
    violations = (report.get("core") or {}).get("constraints", {}).get("violations")
    if violations:
        failures.append("the constraints case's outcome is wrong: " + "; ".join(violations))
    if report.get("soak") and not report["soak"]["checks"]["ok"]:
        failures.append("the soak's checks failed")
    if verdict is not None and not verdict.ok:
        failures.append(verdict.message)
    for failure in failures:
        say(failure)
    say(f"done in {timings['total']:.0f}s: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
