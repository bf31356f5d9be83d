"""The end-to-end bench's arithmetic and report: figures from watch times, medians and spreads over the
repetitions that completed, ratios to the best kube-scheduler contender, the ceiling's validity, the markdown
and the chart; and the KWOK heartbeat stage it runs with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import e2e_report
from bench.e2e_bench import (
    CHART_INTERVALS,
    CONTENDERS,
    KUBE_SETTINGS,
    another_rep_fits,
    chart_intervals,
    compare,
    control_plane_cpu,
    drain_cpu,
    drain_figures,
    figures,
    lease_config,
    metrics_sched_config,
    paused,
    summarize,
)
from bench.run import chart, markdown
from devcluster.heartbeats import NodeHeartbeats

pytestmark = pytest.mark.unit

BY_KEY = {c.key: c for c in CONTENDERS}


def run(contender: str, rep: int, pods_per_second: float, cpu_ms: float, status: str = "ok",
        backlog: float | None = None) -> dict[str, Any]:
    """A run's figures; its backlog drained 1.5x as fast as its paced pods came unless `backlog` says."""
    return {"contender": contender, "rep": rep, "status": status, "error": None if status == "ok" else "boom",
            "pods_per_second": pods_per_second, "cpu_ms_per_pod": cpu_ms, "latency_p50_ms": 100.0 * rep,
            "backlog_pods_per_second": 1.5 * pods_per_second if backlog is None else backlog,
            "latency_p99_ms": 300.0 * rep, "peak_rss_mb": 100.0 + rep, "creation_rate": 400.0,
            "backlog_cpu_ms_per_pod": 0.8 * cpu_ms, "backlog_apiserver_cpu_ms_per_pod": 2.0 + rep}


def sized(rates: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """One summary per contender from (pods/s, CPU-ms/pod), three equal repetitions each."""
    return [summarize(BY_KEY[key], [run(key, rep, pps, cpu) for rep in (1, 2, 3)]) for key, (pps, cpu) in
            rates.items()]


def test_the_contenders_are_the_issues() -> None:
    assert [c.key for c in CONTENDERS] == ["kube-default", "kube-tuned", "kube-tuned-100", "ms-resources", "ms-all",
                                           "ceiling"]
    assert KUBE_SETTINGS["kube-default"] == (50, 100, None)  # kube-scheduler's own defaults
    assert KUBE_SETTINGS["kube-tuned"][2] is None  # default adaptive percentageOfNodesToScore
    assert KUBE_SETTINGS["kube-tuned-100"][2] == 100


def test_figures_from_watch_arrival_times() -> None:
    created = {f"p{i}": 10.0 + i * 0.01 for i in range(100)}  # 100 pods over 0.99 s
    bound = {f"p{i}": created[f"p{i}"] + 0.05 + (0.5 if i == 99 else 0.0) for i in range(100)}
    out = figures(created, bound, cpu_seconds=0.2, peak_rss=200 * 2**20)
    assert out["bound"] == 100
    assert out["cpu_ms_per_pod"] == 2.0
    assert out["seconds"] == pytest.approx(1.54)
    assert out["pods_per_second"] == pytest.approx(100 / 1.54, abs=0.1)
    assert out["latency_p50_ms"] == pytest.approx(50.0)
    assert out["latency_p99_ms"] > 50.0
    assert out["peak_rss_mb"] == 200.0
    assert out["creation_rate"] == pytest.approx(100 / 0.99, abs=0.1)


def test_figures_of_a_run_that_bound_nothing() -> None:
    out = figures({"p0": 1.0}, {}, cpu_seconds=0.5, peak_rss=0)
    assert out["bound"] == 0 and out["cpu_ms_per_pod"] is None and out["pods_per_second"] is None


def test_medians_and_spread_leave_out_runs_that_did_not_complete() -> None:
    runs = [run("ms-all", 1, 100.0, 3.0), run("ms-all", 2, 120.0, 2.0), run("ms-all", 3, 500.0, 0.1, "timeout"),
            run("ms-all", 4, 110.0, 4.0)]
    summary = summarize(BY_KEY["ms-all"], runs)
    assert summary["reps"] == 4 and summary["reps_ok"] == 3
    assert summary["pods_per_second"] == {"median": 110.0, "min": 100.0, "max": 120.0}
    assert summary["cpu_ms_per_pod"] == {"median": 3.0, "min": 2.0, "max": 4.0}
    assert summary["runs"] == runs  # the failed run is kept, as measured
    assert not summary["creation_bound"]


def test_a_contender_near_the_creation_rate_is_creation_bound() -> None:
    summary = summarize(BY_KEY["ceiling"], [run("ceiling", rep, 380.0, 0.5) for rep in (1, 2, 3)])
    assert summary["creation_bound"]


def test_no_completed_run_means_no_figure() -> None:
    summary = summarize(BY_KEY["kube-default"], [run("kube-default", 1, 0.0, 0.0, "failed")])
    assert summary["pods_per_second"] is None and summary["reps_ok"] == 0


def test_ratios_to_the_best_kube_contender_and_to_kube_tuned() -> None:
    results = sized({"kube-default": (50.0, 2.5), "kube-tuned": (200.0, 2.0), "kube-tuned-100": (80.0, 4.0),
                     "ms-all": (100.0, 3.0), "ceiling": (300.0, 0.5)})
    summary = compare(results)
    assert summary["best_kube_throughput"] == "kube-tuned" and summary["best_kube_cpu"] == "kube-tuned"
    ms_all = next(r for r in results if r["contender"] == "ms-all")
    assert ms_all["vs_best_kube"] == {"backlog_pods_per_second": 0.5, "pods_per_second": 0.5, "cpu_ms_per_pod": 1.5,
                                      "backlog_cpu_ms_per_pod": 1.5}
    assert ms_all["vs_kube_tuned"] == {"backlog_pods_per_second": 0.5, "pods_per_second": 0.5, "cpu_ms_per_pod": 1.5,
                                       "backlog_cpu_ms_per_pod": 1.5}
    assert ms_all["throughput_vs_ceiling"] == pytest.approx(0.333)
    assert summary["ceiling"]["valid"] is True and summary["ceiling"]["beaten_by"] == []


def test_the_best_kube_contender_by_cpu_may_differ_from_the_fastest() -> None:
    results = sized({"kube-default": (50.0, 1.0), "kube-tuned": (200.0, 2.0), "ceiling": (300.0, 0.5)})
    summary = compare(results)
    assert summary["best_kube_throughput"] == "kube-tuned" and summary["best_kube_cpu"] == "kube-default"
    kube_tuned = next(r for r in results if r["contender"] == "kube-tuned")
    assert kube_tuned["vs_best_kube"] == {"backlog_pods_per_second": 1.0, "pods_per_second": 1.0,
                                          "cpu_ms_per_pod": 2.0, "backlog_cpu_ms_per_pod": 2.0}


def test_the_best_kube_contender_from_a_backlog_may_differ_from_the_fastest_paced() -> None:
    results = [summarize(BY_KEY[key], [run(key, rep, pps, 2.0, backlog=backlog) for rep in (1, 2, 3)])
               for key, pps, backlog in (("kube-default", 50.0, 60.0), ("kube-tuned", 200.0, 300.0),
                                         ("kube-tuned-100", 190.0, 400.0), ("ms-all", 195.0, 360.0))]
    summary = compare(results)
    assert summary["best_kube_backlog"] == "kube-tuned-100" and summary["best_kube_throughput"] == "kube-tuned"
    ms_all = next(r for r in results if r["contender"] == "ms-all")
    assert ms_all["vs_best_kube"]["backlog_pods_per_second"] == 0.9
    assert ms_all["vs_kube_tuned"]["backlog_pods_per_second"] == 1.2
    assert ms_all["vs_best_kube"]["pods_per_second"] == 0.975


def test_a_contender_draining_a_backlog_faster_than_the_ceiling_invalidates_it() -> None:
    results = [summarize(BY_KEY[key], [run(key, rep, pps, 2.0, backlog=backlog) for rep in (1, 2, 3)])
               for key, pps, backlog in (("kube-tuned", 150.0, 420.0), ("ceiling", 200.0, 400.0))]
    ceiling = compare(results)["ceiling"]
    assert ceiling["valid"] is False and ceiling["beaten_by"] == ["kube-tuned"]


def test_a_backlog_drains_from_its_first_bind_to_its_last() -> None:
    bound = {f"p{i}": 50.0 + i * 0.004 for i in range(501)}  # 500 intervals of 4 ms after the first bind
    assert drain_figures(bound) == {"backlog_pods": 501, "backlog_seconds": 2.0, "backlog_pods_per_second": 250.0}
    assert drain_figures({"p0": 1.0})["backlog_pods_per_second"] is None


def test_a_drains_cpu_is_per_backlog_pod_for_the_contender_and_the_control_plane() -> None:
    figures_ = drain_cpu(1.25, {"kube-apiserver": 3.0, "etcd": 0.5}, 1000)
    assert figures_ == {"backlog_cpu_ms_per_pod": 1.25, "backlog_apiserver_cpu_ms_per_pod": 3.0,
                        "backlog_control_plane_cpu_ms_per_pod": {"kube-apiserver": 3.0, "etcd": 0.5}}
    assert drain_cpu(0.5, {}, 500)["backlog_apiserver_cpu_ms_per_pod"] is None  # no API server among the pids


def test_both_schedulers_stand_by_on_the_runs_lease(tmp_path: Path) -> None:
    """metrics-sched's own loader takes the section kube-scheduler is given too (the same field names)."""
    from metrics_sched.config.loader import load_config
    from metrics_sched.plugins import in_tree_registry

    class Cluster:
        def telemetry_sources(self) -> list[dict[str, Any]]:
            return []

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(metrics_sched_config(BY_KEY["ms-resources"], Cluster(), 1234,  # type: ignore[arg-type]
                                                        lease_namespace="bench-ms-resources-1a2b")))
    election = load_config(path, in_tree_registry(third_party=False).catalog()).leader_election
    assert election.leader_elect and election.resource_namespace == "bench-ms-resources-1a2b"
    assert election.resource_name == lease_config("x")["resourceName"] and election.retry_period == 1.0
    assert metrics_sched_config(BY_KEY["ms-resources"], Cluster(), 1234)["leaderElection"] == {  # type: ignore[arg-type]
        "leaderElect": False}


def test_a_contender_faster_than_the_ceiling_invalidates_it() -> None:
    results = sized({"kube-tuned": (250.0, 2.0), "ms-all": (120.0, 3.0), "ceiling": (200.0, 0.5)})
    ceiling = compare(results)["ceiling"]
    assert ceiling["valid"] is False and ceiling["beaten_by"] == ["kube-tuned"]
    text = "\n".join(e2e_report.size_markdown(size_report(results)))
    assert "**Ceiling invalid on this run**: kube-tuned bound pods faster" in text


def test_a_ceiling_that_did_not_run_is_not_called_valid() -> None:
    results = sized({"kube-tuned": (250.0, 2.0)})
    results.append(summarize(BY_KEY["ceiling"], [run("ceiling", 1, 0.0, 0.0, "failed")]))
    assert compare(results)["ceiling"]["valid"] is None


def size_report(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": 500, "pods": 2000, "reps": 3, "complete": True, "date": "2026-12-01 19:00 UTC",
            "method": {"creation_rate": 400.0, "backlog": 1000, "paused_during_backlog": ["prometheus"],
                       "heartbeats": {
                "lease_duration_s": 40, "lease_renew_interval_s": 10.0, "status_report_s": 300.0,
                "lease_updates_per_s": 50, "status_updates_per_s": 1.7}},
            "results": results, "comparison": compare(results)}


def test_markdown_shows_median_spread_cpu_ratios_and_failed_runs() -> None:
    results = sized({"kube-default": (50.0, 2.5), "kube-tuned": (200.0, 2.0), "ceiling": (300.0, 0.5)})
    ms_all = [run("ms-all", 1, 100.0, 3.0), run("ms-all", 2, 120.0, 2.5), run("ms-all", 3, 0.0, 0.0, "timeout")]
    results.append(summarize(BY_KEY["ms-all"], ms_all))
    report = {"quick": True, "machine": {"date": "d", "cores": 2, "cpu": "AMD EPYC", "memory_gb": 23.5,
                                         "python": "3.11"}, "e2e": [size_report(results)]}
    text = markdown(report, base="bench/results/")
    row = next(line for line in text.splitlines() if line.startswith("| metrics-sched, every metric plugin"))
    # CPU, backlog pods/s, backlog CPU, paced
    assert "| 2.75 (2.50-3.00) | 165.0 (150.0-180.0) | 2.20 (2.00-2.40) | 110.0 (100.0-120.0) |" in row
    assert "| 1.38x | 0.55x | 1.38x | 0.55x | 2/3 |" in row  # vs kube-tuned, the best kube on both
    assert "Backlog pods/s: the first 1,000 pods of a run, created while the contender stood by" in text
    assert "no pod creator, prometheus stopped meanwhile." in text
    assert "The API server's over the same drains, per pod: kube-default 4.00 (3.00-5.00)" in text
    assert "ms-all 3.50 (3.00-4.00)" in text
    assert "Ceiling valid" in text
    assert "ms-all repetition 3: timeout (boom)" in text
    assert "node Leases of 40 s renewed every 10 s (50 updates/s)" in text
    assert "![pods/s and CPU-ms per pod, median with min-max bars](bench/results/latest.png)" in text


def test_a_size_that_could_not_run_says_why() -> None:
    text = "\n".join(e2e_report.size_markdown({"nodes": 5000, "pods": 10000, "error": "DevClusterError: no"}))
    assert "Not measured: DevClusterError: no" in text


def test_chart_draws_every_size_and_the_core(tmp_path: Path) -> None:
    results = sized({"kube-tuned": (200.0, 2.0), "ms-all": (100.0, 3.0), "ceiling": (300.0, 0.5)})
    report = {"machine": {"date": "d", "cores": 2}, "e2e": [size_report(results)],
              "core": {"sizes": [{"nodes": 5000, "decisions_per_second": 900.0}]}}
    chart(report, tmp_path / "latest.png")
    assert (tmp_path / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heartbeats_stage_posts_status_about_every_report_period() -> None:
    heartbeats = NodeHeartbeats(lease_duration_seconds=40, status_report_seconds=300.0)
    assert heartbeats.lease_renewals_per_node_per_second == 0.1  # a renewal every 10 s
    stage = yaml.safe_load(heartbeats.status_stage())
    assert stage["kind"] == "Stage" and stage["spec"]["resourceRef"] == {"apiGroup": "v1", "kind": "Node"}
    delay = stage["spec"]["delay"]
    # Uniform in [150 s, 450 s]: a mean of 300 s, the first round spread out instead of one burst.
    assert (delay["durationMilliseconds"], delay["jitterDurationMilliseconds"]) == (150_000, 450_000)
    assert "lastHeartbeatTime: {{ $now | Quote }}" in stage["spec"]["next"]["statusTemplate"]


@pytest.mark.parametrize("kwargs", [{"lease_duration_seconds": 2}, {"status_report_seconds": 0},
                                    {"lease_parallelism": 0}])
def test_heartbeats_refuse_settings_kwok_cannot_run(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        NodeHeartbeats(**kwargs)


def test_markdown_links_the_flame_graph_and_states_the_regression_check() -> None:
    report = {"quick": False, "machine": {"date": "d", "cores": 2, "cpu": "AMD EPYC", "memory_gb": 23.5,
                                          "python": "3.11"},
              "flame": {"file": "flame-5000.svg", "this_run": True},
              "regression": {"ok": True, "message": "no regression: core decisions/s at 5000 nodes: ..."}}
    text = markdown(report, base="bench/results/")
    assert "[flame graph of the core at 5,000 nodes](bench/results/flame-5000.svg)" in text
    assert "not this run" not in text
    assert "Regression check: no regression: core decisions/s at 5000 nodes" in text
    report["flame"] = {"file": "flame-5000.svg", "this_run": False}
    assert "made by the last `make bench`, not this run" in markdown(report)


def test_markdown_names_the_code_it_measured() -> None:
    report: dict[str, Any] = {"quick": True, "machine": {"date": "d", "cores": 2, "cpu": "AMD EPYC",
                                                         "memory_gb": 23.5, "python": "3.11"}}
    assert "Code:" not in markdown(report)  # a report from before it recorded its code
    report["commit"] = {"sha": "0123456789abcdef" * 2 + "01234567", "dirty": False}
    assert "Mode: quick. Code: 0123456789." in markdown(report)
    report["commit"]["dirty"] = True
    assert "Mode: quick. Code: 0123456789 with uncommitted changes." in markdown(report)


def test_a_repetition_starts_only_if_it_fits_the_time_budget() -> None:
    assert another_rep_fits(0, elapsed=10_000.0, longest=0.0, budget=60.0)  # the first always runs
    assert another_rep_fits(1, elapsed=100.0, longest=100.0, budget=None)
    assert another_rep_fits(1, elapsed=100.0, longest=100.0, budget=200.0)
    assert not another_rep_fits(2, elapsed=150.0, longest=100.0, budget=200.0)


def test_a_size_cut_short_says_so() -> None:
    report = size_report(sized({"kube-tuned": (200.0, 2.0), "ceiling": (300.0, 0.5)}))
    report["cut_short"] = "1 of 3 repetitions: another would end past this size's time budget of 720s"
    assert "**Cut short by the time budget**: 1 of 3 repetitions" in "\n".join(e2e_report.size_markdown(report))


def test_control_plane_cpu_reads_the_api_server_and_etcd_only() -> None:
    me = os.getpid()
    sum(i * i for i in range(200_000))  # some CPU of our own to read back
    cpu = control_plane_cpu({"kube-apiserver": me, "etcd": me, "kwok": me})
    assert set(cpu) == {"kube-apiserver", "etcd"} and cpu["etcd"] > 0
    assert control_plane_cpu({"kwok": me}) == {}


def test_the_memory_run_states_its_peak_at_every_mark() -> None:
    report = {**size_report(sized({"kube-tuned": (200.0, 2.0), "ceiling": (300.0, 0.5)})), "nodes": 5000}
    report["memory"] = {"contender": "ms-all", "label": "metrics-sched, every metric plugin", "pods": 50000,
                        "status": "ok", "error": None, "peak_rss_mb_at": {"50000": 410.4, "10000": 240.2},
                        "pods_per_second": 90.1, "cpu_ms_per_pod": 4.2}
    text = "\n".join(e2e_report.size_markdown(report))
    assert ("**Memory**: one run of metrics-sched, every metric plugin with 50,000 pods on these 5,000 nodes "
            "(not cleaned up between marks): peak RSS 240 MB by 10,000 pods bound, 410 MB by 50,000 pods bound; "
            "90.1 pods/s, 4.2 CPU-ms/pod.") in text
    report["memory"].update(status="timeout", error="30000 of 50000 pods bound after 2620s",
                            peak_rss_mb_at={"10000": 240.2})
    assert ("peak RSS 240 MB by 10,000 pods bound; the run did not complete (timeout: 30000 of 50000 pods bound "
            "after 2620s).") in "\n".join(e2e_report.size_markdown(report))


def test_the_sources_refresh_is_stated_with_its_spread_and_prometheus_own_share() -> None:
    report = {**size_report(sized({"kube-tuned": (200.0, 2.0), "ceiling": (300.0, 0.5)})), "nodes": 5000}
    wall = {"median": 0.8, "min": 0.6, "max": 1.3}
    report["sources"] = {
        "nodes": 5000, "repetitions": 5, "recording_rules": True, "queries": 6,
        "load_average": {"before": [2.25, 2.0, 1.5], "after": [2.0, 2.0, 1.5]},
        "sources": {"prometheus": {"queries": 4, "wall_seconds": wall},
                    "metrics-server": {"queries": 1, "wall_seconds": {"median": 0.2, "min": 0.2, "max": 0.3}}},
        "prometheus_queries": {"prometheus/a": {"execTotalTime": {"median": 0.25}},
                               "prometheus/b": {"execTotalTime": {"median": 0.5}}},
        "concurrent_wall_seconds": {"median": 0.9, "min": 0.7, "max": 1.4},
        "concurrent_cpu_seconds": {"median": 0.12, "min": 0.1, "max": 0.2},
    }
    text = "\n".join(e2e_report.size_markdown(report))
    assert ("**Sources**: one refresh of every source (Prometheus through its recording rules), 6 queries, all at "
            "once through the cache: 0.90 (0.70-1.40) s wall, 0.12 (0.10-0.20) s of the scheduler's CPU (median "
            "(min-max) of 5); each alone: prometheus 4 queries 0.80 (0.60-1.30) s, metrics-server 1 query 0.20 "
            "(0.20-0.30) s; Prometheus' own evaluation 0.25-0.50 s per query (median); load average 2.2 while "
            "measured.") in text


def test_markdown_shows_the_batch_bench_per_profile() -> None:
    def side(rate: float, p99: float) -> dict[str, Any]:
        return {"placements_per_second": {"median": rate, "min": rate - 10, "max": rate + 10},
                "runs": [{"p99_us": p99 + 1, "cold_first_cycle_ms": 9.0}, {"p99_us": p99, "cold_first_cycle_ms": 10.0},
                         {"p99_us": p99 - 1, "cold_first_cycle_ms": 11.0}]}

    batching = {"nodes": 5000, "replicas": 1000, "repeat": 3, "warmup_pods": 1,
                "core": {"batched": side(4000.0, 500.0), "unbatched": side(900.0, 1400.0), "speedup": 4.44,
                         "same_placements": True},
                "no_default_spread": {"batched": side(9000.0, 200.0), "unbatched": side(1400.0, 900.0),
                                      "speedup": 6.43, "same_placements": False}}
    report = {"quick": True, "machine": {"date": "d", "cores": 2, "cpu": "AMD EPYC", "memory_gb": 23.5,
                                         "python": "3.11"},
              "core": {"sizes": [{"nodes": 5000, "decisions_per_second": 900.0}], "batching": batching}}
    text = markdown(report)
    assert "a 1,000-replica Deployment placed on 5,000 nodes" in text
    assert "on a running scheduler: 1 pod(s) of another template placed first, untimed" in text
    assert "first cycle ever, which builds what later ones reuse: 10.0 ms" in text
    assert "| 4000.0 (3990.0-4010.0) | 500.0 | 900.0 (890.0-910.0) | 4.44x | yes |" in text
    assert "| 9000.0 (8990.0-9010.0) | 200.0 | 1400.0 (1390.0-1410.0) | 6.43x | NO |" in text


def test_ms_all_refreshes_each_source_as_the_chart_deploys_it(tmp_path: Path) -> None:
    values = yaml.safe_load(Path("deploy/helm/metrics-sched/values.yaml").read_text())["sources"]
    assert chart_intervals() == {"prometheus": 10.0, "metrics-server": 15.0, "cmdb": 60.0}
    assert values["prometheus"]["interval"] == "10s" and values["cmdb"]["interval"] == "60s"
    changed = tmp_path / "values.yaml"
    values["cmdb"]["interval"] = "5m"
    changed.write_text(yaml.safe_dump({"sources": values}))
    assert chart_intervals(changed)["cmdb"] == 300.0  # read from the chart, not written twice

    class Cluster:
        def telemetry_sources(self) -> list[dict[str, Any]]:
            return [{"name": "prometheus", "interval": 5.0}, {"name": "metrics-server", "interval": 5.0},
                    {"name": "cmdb", "interval": 5.0}]

    config = metrics_sched_config(BY_KEY["ms-all"], Cluster(), 1234)  # type: ignore[arg-type]
    assert {s["name"]: s["interval"] for s in config["sources"]} == CHART_INTERVALS
    assert "sources" not in metrics_sched_config(BY_KEY["ms-resources"], Cluster(), 1234)  # type: ignore[arg-type]


def test_markdown_states_the_telemetry_intervals() -> None:
    size = size_report(sized({"kube-tuned": (300.0, 2.0), "ms-all": (310.0, 1.5)}))
    size["method"]["source_intervals_s"] = {"prometheus": 10.0, "cmdb": 60.0}
    text = "\n".join(e2e_report.size_markdown(size))
    assert "telemetry refreshed as the Helm chart deploys it: prometheus every 10 s, cmdb every 60 s." in text


def test_paused_stops_the_named_processes_and_always_continues_them() -> None:
    import subprocess
    import time

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def settled(pid: int, want: str) -> str:
        deadline = time.monotonic() + 10  # the signal is delivered asynchronously: wait for exactly that state
        while state(pid) != want and time.monotonic() < deadline:
            time.sleep(0.01)
        return state(pid)

    child = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        class Managed:
            def __init__(self, pid: int) -> None:
                self.pid = pid

            def alive(self) -> bool:
                return True

        class Cluster:
            class group:  # noqa: N801 - as DevCluster.group
                processes = {"prometheus": Managed(child.pid), "kwok": Managed(other.pid)}

        with pytest.raises(RuntimeError, match="inside"), paused(Cluster(), ("prometheus",)):  # type: ignore[arg-type]
            assert settled(child.pid, "T") == "T"
            assert state(other.pid) != "T"  # not named: left alone
            raise RuntimeError("inside")
        assert settled(child.pid, "S") == "S"  # continued (asleep again) although the block raised
    finally:
        for process in (child, other):
            process.kill()
            process.wait()


def test_each_size_has_its_own_repetitions_unless_told() -> None:
    import argparse

    from bench.e2e_bench import REPS
    from bench.run import e2e_sizes

    def sizes(**kwargs: Any) -> list[tuple[int, int]]:
        args = argparse.Namespace(**{"e2e_sizes": None, "quick": False, "reps": None, **kwargs})
        return [(nodes, reps) for nodes, _, _, _, reps in e2e_sizes(args)]

    assert sizes() == [(500, 5), (5000, 3)]  # a 500-node drain is ~3 s: five of them for its median
    assert sizes(reps=2) == [(500, 2), (5000, 2)]
    assert sizes(quick=True) == [(500, 3)]
    assert sizes(e2e_sizes=["1000x500"]) == [(1000, REPS)]
