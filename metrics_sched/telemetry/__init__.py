"""Telemetry in the core: sources (one polling base, one health model, a registry of types found by
entry point), the TTL metric cache with its freshness contracts, and the in-flight ledger.

Layering: telemetry imports config (the freshness contract is parsed there), never the reverse.
"""

from metrics_sched.config.contract import FreshnessContract, OnMissing
from metrics_sched.telemetry.breaker import CircuitBreaker
from metrics_sched.telemetry.cache import MetricCache, MetricColumn
from metrics_sched.telemetry.health import BreakerState, BreakerStatus, SourceHealth
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from metrics_sched.telemetry.polled import PolledSource
from metrics_sched.telemetry.registry import (
    ENTRY_POINT_GROUP,
    SourceContext,
    SourceFactory,
    SourceRegistry,
    SourceType,
    default_registry,
)

__all__ = [
    "ENTRY_POINT_GROUP", "BreakerState", "BreakerStatus", "CircuitBreaker", "FreshnessContract", "InFlightLedgerStore",
    "MetricCache", "MetricColumn", "OnMissing", "PolledSource", "SourceContext", "SourceFactory", "SourceHealth",
    "SourceRegistry", "SourceType", "default_registry",
]
