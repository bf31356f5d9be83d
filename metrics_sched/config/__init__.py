"""Scheduler configuration: a YAML file shaped like KubeSchedulerConfiguration v1."""

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
    "DEFAULT_PLUGINS", "DEFAULT_SCHEDULER_NAME", "ArgsError", "ConfigError", "LeaderElectionConfig", "PluginRef",
    "PluginSpec", "ProfileConfig", "SchedulerConfig", "load_config", "parse_config",
]
