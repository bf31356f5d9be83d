"""The core with inter-pod constraints: a 1,000-replica Deployment with zone spread and hostname anti-affinity.

The cluster is the plain core case's (bench/core_bench.py: every plugin on, telemetry on every node,
5,000 heterogeneous nodes), with the nodes in 4 zones, plus 20,000 pods already bound to them. The bound
pods belong to 200 apps (100 pods each; labels app / tier / team / pod-template-hash; a ReplicaSet
each; namespaces `bench` and team-a..c) and carry what real clusters carry:
- 20 apps (2,000 pods, 10 %): required podAntiAffinity on kubernetes.io/hostname against their own
  app (one replica per node);
- 4 apps in `bench` (400 pods): required podAntiAffinity on hostname against `tier In [web]`, which the
  Deployment's pods match: by symmetry no web pod may land on those nodes;
- 20 apps: preferred podAffinity (zone, weight 50) to the next app and preferred podAntiAffinity
  (hostname, weight 30) against their own app; 4 apps in `bench`: preferred podAntiAffinity against
  `tier In [web]` (weight 20); 4 apps in `bench`: preferred podAffinity to `app In [big-deploy]` (zone).
Then the Deployment: `replicas` identical pods of one ReplicaSet (app=big-deploy, tier=web, 100m /
500Mi), each with

    topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone,
                                 whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: big-deploy}}}]
    affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution:
        [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: big-deploy}}}]

scheduled one after another by Scheduler.schedule_one exactly as the plain case's decisions are
(core_bench.run_decisions), after `warmup` untimed pods of a smaller Deployment of the same shape
(app=warm-deploy). The outcome is checked: every replica placed, on distinct nodes, zone counts at
most 1 apart, none on a node whose bound pod's anti-affinity refuses web pods. A violation is
reported under `violations` (and `python -m bench.run` then exits 1 after writing its results).

Needs the InterPodAffinity and PodTopologySpread plugins; without them (or while UnsupportedFields
still refuses those fields) the case is skipped with a message saying so.

    python -m bench.constraints_bench [--nodes 5000] [--existing 20000] [--replicas 1000] [--profile]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import importlib
import json
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.core_bench import CORE_CONFIG, ZONES, make_cluster, profile_summary, run_decisions
from bench.scenario import Harness, build_scheduler, pod_object
from metrics_sched.config import DEFAULT_PLUGINS
from metrics_sched.framework.registry import points_of
from metrics_sched.framework.runtime import CycleResult

CONSTRAINT_PLUGINS = ("InterPodAffinity", "PodTopologySpread")
SCORE_WEIGHTS = {"InterPodAffinity": 2, "PodTopologySpread": 2}  # kube-scheduler's defaults
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
N_ZONES = 4
N_APPS = 200
TIERS = ("web", "api", "worker", "batch", "cache")
NAMESPACE = "bench"  # the Deployment's (pod_object's default)
TEAM_NAMESPACES = ("team-a", "team-b", "team-c")
DEPLOY_APP = "big-deploy"
WARM_APP = "warm-deploy"


def say(message: str) -> None:
    print(f"[constraints] {message}", file=sys.stderr, flush=True)


# -- is the case runnable ------------------------------------------------------------------------
def unavailable() -> str | None:
    """Why the constraints case cannot run on this tree, or None when it can."""
    from metrics_sched.plugins import BUILTIN

    missing = [name for name in CONSTRAINT_PLUGINS if name not in BUILTIN]
    if missing:
        return (f"{' and '.join(missing)} not in metrics_sched.plugins.BUILTIN: skipping the constraints case "
                "(it needs inter-pod affinity and topology spreading; until those plugins land, UnsupportedFields "
                "refuses such pods)")
    module = importlib.import_module("metrics_sched.plugins.unsupported_fields")
    check = getattr(module, "unsupported_fields", None)
    if callable(check):
        refused = check(deployment(WARM_APP, 1, prefix="probe")[0]["spec"])
        if refused:
            return f"UnsupportedFields still refuses {', '.join(map(str, refused))}: skipping the constraints case"
    return None


def constraints_config() -> tuple[dict[str, Any], list[str]]:
    """The plain case's config; a constraint plugin that is in no default extension point is enabled at
    every point it implements (score weight as kube-scheduler's). Returns the config and what it enabled."""
    from metrics_sched.plugins import BUILTIN

    config = copy.deepcopy(CORE_CONFIG)
    plugins = config["profiles"][0].setdefault("plugins", {})
    enabled: list[str] = []
    for name in CONSTRAINT_PLUGINS:
        if any(ref.name == name for refs in DEFAULT_PLUGINS.values() for ref in refs):
            continue  # a default: the plain case runs it too
        for point in sorted(points_of(BUILTIN[name])):
            entry: dict[str, Any] = {"name": name}
            if point == "score":
                entry["weight"] = SCORE_WEIGHTS[name]
            plugins.setdefault(point, {}).setdefault("enabled", []).append(entry)
            enabled.append(f"{point}/{name}")
    return config, enabled


# -- the pods ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class App:
    """One app's pod template: namespace, labels, affinity, and whether it wants one replica per node."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    affinity: Mapping[str, Any] = field(default_factory=dict)
    one_per_node: bool = False
    refuses_web: bool = False  # required anti-affinity against tier=web (in NAMESPACE) on hostname

    @property
    def required_anti_affinity(self) -> bool:
        return self.one_per_node or self.refuses_web


def _term(selector: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {"labelSelector": selector, "topologyKey": key}


def _weighted(weight: int, selector: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": _term(selector, key)}


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def app(k: int) -> App:
    """App k of N_APPS (see the module's docstring for the mix)."""
    name = f"svc-{k:03d}"
    namespace = NAMESPACE if k % 2 == 0 else TEAM_NAMESPACES[k % 3]
    tier = "batch" if k % 50 in (20, 40) else TIERS[k % len(TIERS)]
    labels = {"app": name, "tier": tier, "team": f"team-{k % 12:02d}", "pod-template-hash": f"{k * 7919:06x}"}
    if k % 10 == 1:
        return App(name, namespace, labels, {"podAntiAffinity": {REQUIRED: [
            _term({"matchLabels": {"app": name}}, HOSTNAME_LABEL)]}}, one_per_node=True)
    if k % 10 == 3:
        return App(name, namespace, labels, {
            "podAffinity": {PREFERRED: [_weighted(50, _in("app", f"svc-{(k + 1) % N_APPS:03d}"), ZONE_LABEL)]},
            "podAntiAffinity": {PREFERRED: [_weighted(30, {"matchLabels": {"app": name}}, HOSTNAME_LABEL)]}})
    if k % 50 == 20:
        return App(name, namespace, labels, {"podAntiAffinity": {REQUIRED: [
            _term(_in("tier", "web"), HOSTNAME_LABEL)]}}, refuses_web=True)
    if k % 50 == 40:
        return App(name, namespace, labels, {"podAntiAffinity": {PREFERRED: [
            _weighted(20, _in("tier", "web"), HOSTNAME_LABEL)]}})
    if k % 50 == 30:
        return App(name, namespace, labels, {"podAffinity": {PREFERRED: [
            _weighted(10, _in("app", DEPLOY_APP), ZONE_LABEL)]}})
    return App(name, namespace, labels)


def existing_pods(n_pods: int, node_names: Sequence[str], seed: int = 0) -> list[dict[str, Any]]:
    """n_pods bound pods of N_APPS apps (pod i is of app i % N_APPS); one-per-node apps on distinct nodes."""
    rng = random.Random(seed + 1)
    apps = [app(k) for k in range(N_APPS)]
    used: dict[int, set[str]] = defaultdict(set)
    pods = []
    for i in range(n_pods):
        k = i % N_APPS
        spec = apps[k]
        node = node_names[rng.randrange(len(node_names))]
        if spec.one_per_node and len(used[k]) < len(node_names):
            while node in used[k]:
                node = node_names[rng.randrange(len(node_names))]
            used[k].add(node)
        big = i // N_APPS % 10 == 7
        extra: dict[str, Any] = {"affinity": copy.deepcopy(spec.affinity)} if spec.affinity else {}
        pods.append(pod_object(f"{spec.name}-{i // N_APPS:04d}", cpu="500m" if big else "100m",
                               memory="1Gi" if big else "500Mi", owner=f"{spec.name}-rs", node_name=node,
                               namespace=spec.namespace, labels=spec.labels, **extra))
    return pods


def deployment(app_name: str, replicas: int, *, prefix: str | None = None) -> list[dict[str, Any]]:
    """`replicas` identical pods of one ReplicaSet: zone spread (maxSkew 1, DoNotSchedule) and required
    hostname anti-affinity, both on app=app_name."""
    selector = {"matchLabels": {"app": app_name}}
    labels = {"app": app_name, "tier": "web", "team": "team-07", "pod-template-hash": "7d9f8c6b5"}
    return [pod_object(f"{prefix or app_name}-{i:05d}", cpu="100m", memory="500Mi", owner=f"{app_name}-rs",
                       labels=labels,
                       topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": ZONE_LABEL,
                                                   "whenUnsatisfiable": "DoNotSchedule",
                                                   "labelSelector": copy.deepcopy(selector)}],
                       affinity={"podAntiAffinity": {REQUIRED: [_term(copy.deepcopy(selector), HOSTNAME_LABEL)]}})
            for i in range(replicas)]


# -- the run -------------------------------------------------------------------------------------
def build(n_nodes: int, n_existing: int, config: Mapping[str, Any], seed: int = 0,
          ) -> tuple[Harness, dict[str, str], list[dict[str, Any]]]:
    """The scheduler with the nodes (in N_ZONES zones) and their telemetry, and the bound pods.

    Returns the harness, node -> zone, and the bound pods."""
    harness = build_scheduler(config, seed=seed)
    nodes, values = make_cluster(n_nodes, seed, zones=ZONES[:N_ZONES])
    for node in nodes:
        harness.scheduler.handlers.on_node_event("ADDED", node)
    harness.feed(values)
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE_LABEL] for n in nodes}
    bound = existing_pods(n_existing, list(zone_of), seed)
    for pod in bound:
        harness.scheduler.handlers.on_pod_event("ADDED", pod)
    return harness, zone_of, bound


def check_deployment(name: str, pods: Sequence[dict[str, Any]], placed: Mapping[str, str | None],
                     zone_of: Mapping[str, str], refusing: set[str]) -> tuple[dict[str, Any], list[str]]:
    """What the Deployment got (placed, distinct nodes, pods per zone) and what breaks its constraints."""
    nodes = [placed.get(p["metadata"]["uid"]) for p in pods]
    on = [n for n in nodes if n is not None]
    zones = Counter({zone: 0 for zone in sorted(set(zone_of.values()))})
    zones.update(zone_of[n] for n in on)
    skew = max(zones.values()) - min(zones.values()) if zones else 0
    shared = len(on) - len(set(on))
    refused = sum(1 for n in on if n in refusing)
    violations = []
    if len(on) != len(pods):
        violations.append(f"{name}: {len(pods) - len(on)} of {len(pods)} replicas not placed")
    if shared:
        violations.append(f"{name}: {len(set(on))} distinct nodes for {len(on)} placed replicas "
                          "(hostname anti-affinity)")
    if len(on) == len(pods) and skew > 1:
        violations.append(f"{name}: zone counts {dict(zones)} differ by {skew} (maxSkew 1)")
    if refused:
        violations.append(f"{name}: {refused} replicas on nodes whose bound pods refuse tier=web (symmetry)")
    return {"replicas": len(pods), "placed": len(on), "distinct_nodes": len(set(on)), "pods_per_zone": dict(zones),
            "zone_skew": skew, "on_refusing_nodes": refused}, violations


def measure(n_nodes: int = 5_000, n_existing: int = 20_000, replicas: int = 1_000, warmup: int = 50,
            seed: int = 0, profiler: cProfile.Profile | None = None) -> dict[str, Any]:
    shape = {"nodes": n_nodes, "zones": N_ZONES, "existing_pods": n_existing, "replicas": replicas,
             "warmup": warmup}
    reason = unavailable()
    if reason:
        say(reason)
        return {**shape, "skipped": reason}
    config, enabled = constraints_config()
    if enabled:
        say(f"not in the default profile, enabled for this case: {', '.join(enabled)}")
    t0 = time.perf_counter()
    harness, zone_of, bound = build(n_nodes, n_existing, config, seed)
    setup = time.perf_counter() - t0
    apps = [app(k) for k in range(N_APPS)]
    refusing = {p["spec"]["nodeName"] for i, p in enumerate(bound)
                if apps[i % N_APPS].refuses_web and p["metadata"]["namespace"] == NAMESPACE}
    warm, big = deployment(WARM_APP, warmup), deployment(DEPLOY_APP, replicas)
    failures: Counter[str] = Counter()
    per_plugin: dict[str, float] = defaultdict(float)

    def observe(i: int, result: CycleResult | None) -> None:
        if result is None:
            failures["schedule_one returned None"] += 1
            return
        if result.node is None or not result.status.ok:
            failures[result.message()[:300]] += 1
        if i >= warmup:
            for plugin, point, seconds, _ in result.timings:
                per_plugin[f"{point}/{plugin}"] += seconds

    say(f"{n_nodes} nodes in {N_ZONES} zones, {n_existing} bound pods ({setup:.1f} s to load): "
        f"{warmup} warm-up + {replicas} replicas")
    try:
        stats = run_decisions(harness, warm + big, warmup, profiler=profiler, observe=observe)
        with harness.scheduler.state.lock:
            placed = {uid: record.node for uid, record in harness.scheduler.state.pods.items()}
    finally:
        harness.stop()
    gc.collect()
    outcome, violations = check_deployment(DEPLOY_APP, big, placed, zone_of, refusing)
    warm_outcome, warm_violations = check_deployment(WARM_APP, warm, placed, zone_of, refusing)
    violations += warm_violations
    violations += [f"{count} x failed: {message}" for message, count in failures.most_common(3)]
    breakdown = sorted(((key, total / max(1, replicas) * 1e6) for key, total in per_plugin.items()),
                       key=lambda kv: -kv[1])
    row: dict[str, Any] = {
        **shape, "setup_seconds": round(setup, 2),
        "enabled_for_this_case": enabled,
        "existing_required_anti_affinity": sum(1 for i in range(n_existing)
                                               if apps[i % N_APPS].required_anti_affinity),
        "existing_with_affinity": sum(1 for i in range(n_existing) if apps[i % N_APPS].affinity),
        "nodes_refusing_web": len(refusing),
        "decisions_per_second": stats.get("decisions_per_second"), "p50_ms": stats.get("p50_ms"),
        "p99_ms": stats.get("p99_ms"), "max_ms": stats.get("max_ms"),
        "decision": stats,
        "plugin_us_per_decision": {key: round(us, 1) for key, us in breakdown},
        "outcome": outcome, "warmup_outcome": warm_outcome,
        "verified": not violations, "violations": violations,
    }
    if violations:
        say("CONSTRAINTS VIOLATED: " + "; ".join(violations))
    say(f"{replicas} replicas: {row['decisions_per_second']}/s p50 {row['p50_ms']} ms p99 {row['p99_ms']} ms; "
        f"per zone {outcome['pods_per_zone']}, {outcome['distinct_nodes']} distinct nodes")
    return row


def profile(n_nodes: int = 5_000, n_existing: int = 20_000, replicas: int = 1_000, warmup: int = 50,
            top: int = 20, seed: int = 0) -> dict[str, Any]:
    """measure() under cProfile (the measured decisions only): the top functions, and the run's figures."""
    profiler = cProfile.Profile()
    row = measure(n_nodes, n_existing, replicas, warmup, seed, profiler=profiler)
    if "skipped" in row:
        return row
    return {"nodes": n_nodes, "existing_pods": n_existing, "decisions": replicas,
            "decision_p50_ms_under_profiler": row["p50_ms"], "verified": row["verified"],
            **profile_summary(profiler, replicas, top)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--existing", type=int, default=20_000, help="pods already bound")
    parser.add_argument("--replicas", type=int, default=1_000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--profile", action="store_true", help="run under cProfile and print the top functions")
    args = parser.parse_args(argv)
    if args.profile:
        result = profile(args.nodes, args.existing, args.replicas, args.warmup)
    else:
        result = measure(args.nodes, args.existing, args.replicas, args.warmup)
    print(json.dumps(result, indent=2))
    if result.get("violations") or (args.profile and result.get("verified") is False):
        sys.exit(1)


if __name__ == "__main__":
    main()
