"""The end-to-end part of the bench report: a markdown table per size (median and min-max of each figure,
CPU-ms per pod first, ratios to the best kube-scheduler contender and to kube-tuned, the ceiling's validity,
every run that failed) and the chart's panels (backlog pods/s and CPU-ms/pod with min-max bars).
"""

from __future__ import annotations

from typing import Any

SHORT = {"kube-default": "kube default", "kube-tuned": "kube tuned", "kube-tuned-100": "kube tuned 100%",
         "ms-resources": "ms resources", "ms-all": "ms every metric", "ceiling": "ceiling"}
COLOURS = {"kube-default": "#999999", "kube-tuned": "#555555", "kube-tuned-100": "#777777",
           "ms-resources": "#4a90d9", "ms-all": "#1f5fa8", "ceiling": "#2a9d2a"}


def cell(value: dict[str, float] | None, digits: int = 1) -> str:
    """`median (min-max)`; a dash when no run completed."""
    if not value:
        return "-"
    if value["min"] == value["max"]:
        return f"{value['median']:.{digits}f}"
    return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def heartbeat_note(method: dict[str, Any]) -> str:
    hb = method.get("heartbeats") or {}
    if not hb:
        return ""
    return (f"KWOK heartbeats as kubelets: node Leases of {hb['lease_duration_s']} s renewed every "
            f"{hb['lease_renew_interval_s']:g} s ({hb['lease_updates_per_s']} updates/s), node status every "
            f"~{hb['status_report_s'] / 60:g} min ({hb['status_updates_per_s']} updates/s)")


def size_markdown(size: dict[str, Any]) -> list[str]:
    head = f"**End to end, {size['nodes']:,} nodes / {size['pods']:,} pods per run**"
    if size.get("error"):
        return [head, "", f"Not measured: {size['error']}", ""]
    method = size.get("method") or {}
    lines = [head + f" — {size.get('reps')} repetitions, contenders interleaved; median (min-max) over the runs "
             f"that completed; measured {size.get('date', '?')}" + ("" if size.get("complete") else
                                                                     " (**incomplete**: the size did not finish)"),
             "",
             "| contender | CPU-ms/pod | backlog pods/s | backlog CPU-ms/pod | paced pods/s | p50 ms | p99 ms "
             "| peak RSS MB | CPU vs best kube | backlog vs best kube | CPU vs kube tuned | backlog vs kube tuned "
             "| runs ok |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in size["results"]:
        best, tuned = r.get("vs_best_kube") or {}, r.get("vs_kube_tuned") or {}
        paced = cell(r["pods_per_second"]) + (" ¹" if r.get("creation_bound") else "")
        lines.append(f"| {r['label']} | {cell(r['cpu_ms_per_pod'], 2)} | {cell(r.get('backlog_pods_per_second'))} | "
                     f"{cell(r.get('backlog_cpu_ms_per_pod'), 2)} | {paced} | {cell(r['latency_p50_ms'], 0)} | "
                     f"{cell(r['latency_p99_ms'], 0)} | "
                     f"{cell(r['peak_rss_mb'], 0)} | {ratio(best.get('cpu_ms_per_pod'))} | "
                     f"{ratio(best.get('backlog_pods_per_second'))} | {ratio(tuned.get('cpu_ms_per_pod'))} | "
                     f"{ratio(tuned.get('backlog_pods_per_second'))} | {r['reps_ok']}/{r['reps']} |")
    lines.append("")
    comparison = size.get("comparison") or {}
    notes = []
    ceiling = comparison.get("ceiling") or {}
    if ceiling.get("valid") is True:
        notes.append("Ceiling valid: no contender bound pods faster than the bare bind loop.")
    elif ceiling.get("valid") is False:
        notes.append(f"**Ceiling invalid on this run**: {ceiling.get('reason')}.")
    else:
        notes.append(f"Ceiling not established: {ceiling.get('reason', 'not run')}.")
    notes.append(f"Best kube-scheduler contender: {comparison.get('best_kube_backlog')} by backlog pods/s, "
                 f"{comparison.get('best_kube_throughput')} by paced pods/s, {comparison.get('best_kube_cpu')} by "
                 "CPU-ms/pod.")
    if any(r.get("creation_bound") for r in size["results"]):
        notes.append("¹ within 10 % of the rate the pod creator reached: the creator, not the contender, set its "
                     "paced pods/s.")
    rate = method.get("creation_rate")
    if method.get("backlog"):
        notes.append(f"Backlog pods/s: the first {method['backlog']:,} pods of a run, created while the contender "
                     "stood by (a scheduler on a Lease the bench held, its caches and telemetry warm; the ceiling "
                     "not yet started), bound per second from its first bind to its last: the scheduler and the API "
                     "server, no pod creator" + (f", {' and '.join(method['paused_during_backlog'])} stopped meanwhile"
                                                 if method.get("paused_during_backlog") else "")
                     + ". The run's other pods are paced; CPU-ms/pod and latency are theirs.")
        plane = [f"{r['contender']} {cell(r.get('backlog_apiserver_cpu_ms_per_pod'), 2)}" for r in size["results"]
                 if r.get("backlog_apiserver_cpu_ms_per_pod")]
        if plane:
            notes.append("Backlog CPU-ms/pod: the contender's CPU from its release to the last bind, per backlog pod "
                         "(the ceiling's from its readiness). The API server's over the same drains, per pod: "
                         + ", ".join(plane) + " (kube-scheduler and metrics-sched send the same requests, a bind "
                         "and an event per pod; the ceiling binds only).")
    if rate:
        notes.append(f"Paced pods created at {rate:g} pods/s. " + heartbeat_note(method) + ".")
    intervals = method.get("source_intervals_s")
    if intervals:
        notes.append("metrics-sched's telemetry refreshed as the Helm chart deploys it: "
                     + ", ".join(f"{name} every {seconds:g} s" for name, seconds in intervals.items()) + ".")
    if size.get("cut_short"):
        notes.append(f"**Cut short by the time budget**: {size['cut_short']}.")
    memory = size.get("memory")
    if memory:
        notes.append(memory_note(memory, size["nodes"]))
    sources = size.get("sources")
    if sources:
        notes.append(sources_note(sources))
    failed = [f"{r['contender']} repetition {run.get('rep')}: {run['status']} ({run.get('error')})"
              for r in size["results"] for run in r["runs"] if run["status"] != "ok"]
    if failed:
        notes.append("Runs that did not complete (left out of the medians): " + "; ".join(failed) + ".")
    return [*lines, " ".join(notes), ""]


def memory_note(memory: dict[str, Any], nodes: int) -> str:
    """The memory run in a sentence: its peak RSS at each mark it passed, and how it went."""
    at = ", ".join(f"{mb:.0f} MB by {int(count):,} pods bound" for count, mb in sorted(
        (int(k), v) for k, v in memory.get("peak_rss_mb_at", {}).items()))
    head = (f"**Memory**: one run of {memory['label']} with {memory['pods']:,} pods on these {nodes:,} nodes "
            "(not cleaned up between marks): peak RSS ")
    if memory.get("status") != "ok":
        return head + (f"{at}; " if at else "") + f"the run did not complete ({memory.get('status')}: " \
                                                   f"{memory.get('error')})."
    return head + f"{at}; {memory.get('pods_per_second')} pods/s, {memory.get('cpu_ms_per_pod')} CPU-ms/pod."


def sources_note(sources: dict[str, Any]) -> str:
    """The sources' refresh cost in a sentence (bench/sources_bench.sources_cost, measured on this size's cluster
    after its runs): every source at once through the cache, each alone, Prometheus' own evaluation per query."""
    each = sources.get("sources") or {}
    alone = ", ".join(f"{name} {v['queries']} quer{'y' if v['queries'] == 1 else 'ies'} "
                      f"{cell(v['wall_seconds'], 2)} s" for name, v in each.items())
    evaluation = [q["execTotalTime"]["median"] for q in (sources.get("prometheus_queries") or {}).values()
                  if q.get("execTotalTime")]
    own = (f"; Prometheus' own evaluation {min(evaluation):.2f}-{max(evaluation):.2f} s per query (median)"
           if evaluation else "")
    load = (sources.get("load_average") or {}).get("before")
    rules = " (Prometheus through its recording rules)" if sources.get("recording_rules") else ""
    return (f"**Sources**: one refresh of every source{rules}, {sources.get('queries')} queries, all at once "
            f"through the cache: {cell(sources.get('concurrent_wall_seconds'), 2)} s wall, "
            f"{cell(sources.get('concurrent_cpu_seconds'), 2)} s of the scheduler's CPU "
            f"(median (min-max) of {sources.get('repetitions')}); each alone: {alone}{own}"
            + (f"; load average {load[0]:.1f} while measured" if load else "") + ".")


def panels(size: dict[str, Any], throughput_ax: Any, cpu_ax: Any) -> None:
    """Draws a size's medians with min-max bars: pods/s (from a backlog when the run had one, else paced) on one
    axis, CPU-ms per pod on the other."""
    throughput = "backlog_pods_per_second" if (size.get("method") or {}).get("backlog") else "pods_per_second"
    results = [r for r in size.get("results", []) if r.get(throughput)]
    labels = [SHORT.get(r["contender"], r["contender"]) for r in results]
    colours = [COLOURS.get(r["contender"], "#888888") for r in results]
    named = "backlog pods bound per second" if throughput != "pods_per_second" else "pods bound per second"
    for ax, figure, title in ((throughput_ax, throughput, named),
                              (cpu_ax, "cpu_ms_per_pod", "scheduler CPU-ms per pod (lower is better)")):
        medians = [r[figure]["median"] if r.get(figure) else 0.0 for r in results]
        low = [m - r[figure]["min"] if r.get(figure) else 0.0 for m, r in zip(medians, results, strict=True)]
        high = [r[figure]["max"] - m if r.get(figure) else 0.0 for m, r in zip(medians, results, strict=True)]
        bars = ax.bar(labels, medians, color=colours, yerr=[low, high], capsize=4)
        ax.bar_label(bars, fmt="%.2f" if figure == "cpu_ms_per_pod" else "%.1f", label_type="center",
                     color="white", fontsize=9)
        ax.set_title(f"{size['nodes']:,} nodes / {size['pods']:,} pods: {title}", fontsize=10)
        ax.tick_params(axis="x", rotation=25, labelsize=8)
