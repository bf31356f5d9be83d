"""A CMDB / inventory / cost API as a telemetry source, mapped declaratively (NetBox, OpenCost, ServiceNow...).

The source type `cmdb` (TYPE and from_config, registered in the `metrics_sched.sources` entry-point group).
Configuration fields and defaults: see `adapters.cmdb.config`; presets: `adapters.cmdb.presets`. Its
circuit breaker is the core's (metrics_sched.telemetry.CircuitBreaker).
"""

from adapters.cmdb.config import CmdbConfig, FieldSpec, Pagination, parse_config
from adapters.cmdb.presets import PRESETS
from adapters.cmdb.source import TYPE, CmdbSource, from_config

__all__ = ["PRESETS", "TYPE", "CmdbConfig", "CmdbSource", "FieldSpec", "Pagination", "from_config", "parse_config"]
