"""`metrics-sched run --config FILE [--kubeconfig FILE]`: the scheduler itself.

kube-scheduler's flags that users type from habit work here too: `--secure-port` (= --port), `-v`/`--v N`
(klog verbosity: 4 and above is debug, below is info), `--leader-elect[=true|false]` (overrides
leaderElection.leaderElect) and `--kubeconfig`."""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metrics_sched.app.cli.config_cmd import load_or_exit
from metrics_sched.app.cli.logging_setup import LEVELS, log_level, setup_logging
from metrics_sched.config import SchedulerConfig
from metrics_sched.plugins import in_tree_registry


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the scheduler")
    parser.add_argument("--config", type=Path, required=True, help="scheduler config (YAML)")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="kubeconfig file; without it (and clientConnection.kubeconfig): the in-cluster service "
                             "account inside a pod, else $KUBECONFIG, else ~/.kube/config")
    parser.add_argument("--port", "--secure-port", type=port, default=None,
                        help="override server.port (0 = any free port)")
    parser.add_argument("--leader-elect", type=boolean, nargs="?", const=True, default=None, metavar="true|false",
                        help="override leaderElection.leaderElect")
    parser.add_argument("--identity", default=None, help="leader-election identity (default: host + random)")
    parser.add_argument("--startup-timeout", type=seconds, default=None, metavar="SECONDS",
                        help="how long an unreachable API server is retried at start before exiting 2 "
                             "(default 30)")
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("--log-level", type=log_level, default=None, help=f"one of {', '.join(LEVELS)} (default info)")
    level.add_argument("-v", "--v", dest="verbosity", type=verbosity, default=None, metavar="N",
                       help=f"kube-style verbosity: {DEBUG_VERBOSITY} or more is --log-level debug, less is info")
    parser.set_defaults(handler=_run)


# klog's convention (kube-scheduler runs at --v=2; 4 is "debug-level verbosity").
DEBUG_VERBOSITY = 4


def verbosity(value: str) -> int:
    """argparse type of -v/--v: a klog level, an integer >= 0."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a verbosity level (an integer >= 0)") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number


def effective_log_level(args: argparse.Namespace) -> str:
    if args.log_level is not None:
        return str(args.log_level)
    if args.verbosity is not None and args.verbosity >= DEBUG_VERBOSITY:
        return "debug"
    return "info"


def with_flag_overrides(config: SchedulerConfig, args: argparse.Namespace) -> SchedulerConfig:
    """The config with what the flags override (--port is passed on to the app as is)."""
    if args.leader_elect is None:
        return config
    return dataclasses.replace(config, leader_election=dataclasses.replace(config.leader_election,
                                                                           leader_elect=args.leader_elect))


def boolean(value: str) -> bool:
    """argparse type of a Go-style bool flag value (`--leader-elect=false`)."""
    lowered = value.lower()
    if lowered in ("true", "1", "t", "yes"):
        return True
    if lowered in ("false", "0", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


def port(value: str) -> int:
    """argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {number}")
    return number


def seconds(value: str) -> float:
    """argparse type: a finite number of seconds >= 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value!r}")
    return number


def _run(args: argparse.Namespace) -> int:
    limit_malloc_arenas()  # before any thread allocates
    setup_logging(args.log_format, effective_log_level(args))
    registry = in_tree_registry()
    config = with_flag_overrides(load_or_exit(args.config, registry), args)
    if config.cpu_affinity == "one":  # before any thread starts: threads take their creator's CPUs
        cpu = keep_to_one_cpu()
        if cpu is not None:
            logging.getLogger(__name__).debug("keeping to CPU %d (cpuAffinity: one)", cpu)
    from metrics_sched.app import scheduler_app as app

    built = app.build(config, registry, args.kubeconfig, port=args.port, identity=args.identity,
                      config_dir=args.config.resolve().parent,
                      startup_timeout=app.DEFAULT_STARTUP_TIMEOUT if args.startup_timeout is None
                      else args.startup_timeout)
    tune_gc(built.scheduler.handlers.on_all_synced)
    return app.run(built)


# glibc's malloc arenas for the whole process. By default each thread that allocates gets its own, up to 8 per
# core, and what a thread frees stays in its arena for its next allocation: with ~40 threads (bind workers,
# reporters, watches, telemetry sources) a 5,000-node / 50,000-pod run held ~114 MB in per-thread arenas
# (bench/pod_memory.py, issue 18). Python code runs one thread at a time under the GIL, so two arenas cost no
# contention worth measuring; MALLOC_ARENA_MAX in the environment still decides when it is set.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Caps glibc's malloc arenas (mallopt M_ARENA_MAX) unless MALLOC_ARENA_MAX is set; True when capped here.
    A no-op where the C library is not glibc (no mallopt)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))


def keep_to_one_cpu() -> int | None:
    """Keeps the calling thread, and every thread it starts from now on, to one of the CPUs it may use (the
    scheduler: all of its threads, when called first). Python runs one thread at a time; with the threads on two
    CPUs the GIL changes CPU at nearly every release (each large numpy operation releases it), and the core bench
    measured ~1,000-1,270 decisions/s on one CPU against ~770-810 on two. Replicas started on one host take
    different CPUs (by pid). The CPU, or None where affinity cannot be set."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if not allowed:
        return None
    cpu = allowed[os.getpid() % len(allowed)]
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    return cpu


# Young-generation collections every this many allocations (CPython's default: 700). Decoding one pod event
# allocates ~50 containers and handling it more; most die young or live as long as the pod. Feeding 20,000
# bound-pod events through the handlers after a 20,000-pod sync: 0.150 ms CPU per event with the defaults,
# 0.099 with these thresholds and the freeze below (the collector's own time 28x less).
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc(on_all_synced: list[Callable[[], None]]) -> None:
    """Collector settings for a process whose heap is mostly long-lived caches: a larger young generation, and
    everything alive after the initial LIST of every resource moved out of the collector's sight (gc.freeze: the
    full collections that the cache's growth triggers no longer walk the nodes and pods listed at start)."""
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()  # the modules and configuration: here for good

    def freeze_caches() -> None:
        gc.collect()  # the garbage of the sync is freed first, not frozen with it
        gc.freeze()

    on_all_synced.append(freeze_caches)
