"""A CMDB / inventory / cost API as a telemetry source, mapped declaratively (NetBox, OpenCost, ServiceNow...).

Configuration fields and defaults: see `adapters.cmdb.config`; presets: `adapters.cmdb.presets`.
"""

from adapters.cmdb.breaker import CircuitBreaker
from adapters.cmdb.config import CmdbConfig, FieldSpec, Pagination, parse_config
from adapters.cmdb.presets import PRESETS
from adapters.cmdb.source import CircuitOpen, CmdbSource, from_config

__all__ = ["PRESETS", "CircuitBreaker", "CircuitOpen", "CmdbConfig", "CmdbSource", "FieldSpec", "Pagination",
           "from_config", "parse_config"]
