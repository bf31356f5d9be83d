"""Scheduler configuration: a YAML file shaped like KubeSchedulerConfiguration v1.

The bottom layer of the core: it imports nothing else of metrics_sched (telemetry, framework and the CLI
import it). `metrics_sched.config.reader` is the toolkit every config parser uses.
"""

from metrics_sched.config.contract import FreshnessContract, OnMissing, parse_contract
from metrics_sched.config.errors import ArgsError, ConfigError
from metrics_sched.config.loader import DEFAULT_PLUGINS, PluginSpec, load_config, parse_config
from metrics_sched.config.model import (
    DEFAULT_SCHEDULER_NAME,
    LeaderElectionConfig,
    PluginRef,
    ProfileConfig,
    SchedulerConfig,
)

__all__ = [
    "DEFAULT_PLUGINS", "DEFAULT_SCHEDULER_NAME", "ArgsError", "ConfigError", "FreshnessContract",
    "LeaderElectionConfig", "OnMissing", "PluginRef", "PluginSpec", "ProfileConfig", "SchedulerConfig", "load_config",
    "parse_config", "parse_contract",
]
