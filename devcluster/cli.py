"""`metrics-sched devcluster build|up|down`: the local control plane from the command line.

Registered by the entry point `devcluster = "devcluster.cli:register"` (group `metrics_sched.cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from devcluster.build import BuildError, ensure_built
from devcluster.versions import load_versions


def register(sub: Any) -> None:
    parser = sub.add_parser("devcluster", help="build, start or stop the local dev cluster")
    dsub = parser.add_subparsers(dest="devcluster_command", required=True, metavar="ACTION")

    build = dsub.add_parser(
        "build", help="build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok and helm if missing")
    build.add_argument("--force", action="store_true", help="rebuild even when the binaries are present")
    build.add_argument("--kubernetes", metavar="VERSION", default=None,
                       help="one of the Kubernetes versions deploy/local/versions.toml lists "
                            "(default: $METRICS_SCHED_KUBERNETES, else its `kubernetes`)")
    build.set_defaults(handler=_build)

    up = dsub.add_parser("up", help="start a cluster in the background; writes DIR/kubeconfig, DIR/endpoints.json")
    up.add_argument("--dir", type=Path, required=True, help="run directory (logs, kubeconfig, endpoints.json)")
    up.add_argument("--nodes", type=int, default=20, help="fake KWOK nodes to create (default 20)")
    up.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    up.add_argument("--seed", type=int, default=1, help="seed of the fleet and telemetry scenario")
    up.add_argument("--scrape-interval", type=float, default=2.0, help="Prometheus scrape interval, s")
    up.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
    up.add_argument("--kube-scheduler", action="store_true", help="also run the real kube-scheduler")
    up.add_argument("--no-controller-manager", action="store_true",
                    help="without kube-controller-manager, node Leases and the test volume provisioner")
    up.add_argument("--kubernetes", metavar="VERSION", default=None,
                    help="one of the Kubernetes versions deploy/local/versions.toml lists "
                         "(default: $METRICS_SCHED_KUBERNETES, else its `kubernetes`)")
    up.set_defaults(handler=_up)

    down = dsub.add_parser("down", help="stop every process of a cluster started with `up`")
    down.add_argument("--dir", type=Path, required=True)
    down.set_defaults(handler=_down)

    conformance = dsub.add_parser(
        "conformance", help="run upstream's [sig-scheduling] e2e specs against metrics-sched as the only scheduler "
                            "(`make test-conformance`; builds the e2e binary once)")
    conformance.add_argument("--focus", default=None, help="ginkgo focus regex (default: [sig-scheduling])")
    conformance.add_argument("--skip", default=None,
                             help="ginkgo skip regex (default: [Feature:, [Disruptive], [Flaky])")
    conformance.add_argument("--dir", type=Path, default=None,
                             help="run directory: cluster logs, e2e.log, report/junit_01.xml (default: a temp dir)")
    conformance.add_argument("--build-only", action="store_true", help="only build the e2e binary")
    conformance.add_argument("--kubernetes", metavar="VERSION", default=None,
                             help="one of the Kubernetes versions deploy/local/versions.toml lists")
    conformance.set_defaults(handler=_conformance)

    versions = dsub.add_parser(
        "versions", help="print the Kubernetes versions the e2e suite is run against, one a line, default first")
    versions.add_argument("--matrix", action="store_true",
                          help="only the further ones (`kubernetes_matrix`), which `make test-matrix` runs")
    versions.set_defaults(handler=_versions)


def _build(args: argparse.Namespace) -> int:
    try:
        ensure_built(force=args.force, kubernetes=args.kubernetes)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _conformance(args: argparse.Namespace) -> int:
    from devcluster.cluster import DevClusterError
    from devcluster.conformance import runner
    from devcluster.conformance.build import ensure_e2e_binary
    from devcluster.progress import Progress

    selection = runner.Selection(focus=args.focus or runner.FOCUS, skip=args.skip or runner.SKIP)
    try:
        if args.build_only:
            ensure_e2e_binary(load_versions(kubernetes=args.kubernetes), Progress("conformance"))
            return 0
        return runner.main(selection, run_dir=args.dir, kubernetes=args.kubernetes)
    except (BuildError, DevClusterError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _versions(args: argparse.Namespace) -> int:
    try:
        tested = load_versions().tested_kubernetes
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for version in tested[1:] if args.matrix else tested:
        print(version)
    return 0


def _up(args: argparse.Namespace) -> int:
    from devcluster.cluster import DevCluster, DevClusterError

    run_dir: Path = args.dir.resolve()
    if (run_dir / "pids.json").exists():
        from devcluster.processes import leftovers

        if leftovers(run_dir):
            print(f"error: a cluster is already running in {run_dir}; `devcluster down --dir {run_dir}` first",
                  file=sys.stderr)
            return 1
    cluster = DevCluster(
        run_dir, nodes=args.nodes, gpus_per_node=args.gpus_per_node, seed=args.seed,
        scrape_interval=args.scrape_interval, with_prometheus=not args.no_prometheus,
        with_kube_scheduler=args.kube_scheduler, with_controller_manager=not args.no_controller_manager,
        detach=True, kubernetes=args.kubernetes,
    )
    try:
        endpoints = cluster.start()
    except (DevClusterError, BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in vars(endpoints).items() if v}, indent=2))
    print(f"stop it with: metrics-sched devcluster down --dir {run_dir}", file=sys.stderr)
    return 0


def _down(args: argparse.Namespace) -> int:
    from devcluster.cluster import down

    run_dir: Path = args.dir.resolve()
    stopped = down(run_dir)
    for pid, cmdline in stopped:
        print(f"stopped {pid}: {cmdline[:100]}")
    if not stopped:
        print(f"nothing was running in {run_dir}")
    return 0
