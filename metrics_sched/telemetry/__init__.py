"""Telemetry in the core: the TTL metric cache, freshness contracts and the in-flight ledger."""

from metrics_sched.telemetry.cache import MetricCache, MetricColumn, SourceHealth
from metrics_sched.telemetry.contract import FreshnessContract, OnMissing
from metrics_sched.telemetry.ledger import InFlightLedgerStore

__all__ = ["FreshnessContract", "InFlightLedgerStore", "MetricCache", "MetricColumn", "OnMissing", "SourceHealth"]
