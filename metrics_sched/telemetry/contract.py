"""The freshness contract, as the cache's readers import it (it is defined with the config, which parses it)."""

from metrics_sched.config.contract import FreshnessContract, OnMissing

__all__ = ["FreshnessContract", "OnMissing"]
