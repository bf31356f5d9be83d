"""The InFlightLedger plugin: its class in plugin.py."""

from metrics_sched.plugins.in_flight_ledger.plugin import InFlightLedger

__all__ = ["InFlightLedger"]
