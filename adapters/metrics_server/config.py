"""The Metrics Server source's configuration, validated.

Fields (paths relative to the source spec; `name` and `type` belong to the caller and are ignored). The
API server address, credentials and TLS come from the injected Kubernetes client, not from here.

- `interval` (default `15s`): seconds between refreshes (Metrics Server itself resolves every 15 s).
- `timeout` (default `5s`, at most 30 s): for the one LIST request, the whole answer (connect to last byte).
- `maxResponseBytes` (default 67108864, 64 MiB; 4096..1073741824): the largest answer read, counted after
  decompression; a larger one is cut off while it streams in and the refresh fails ("answer larger than
  maxResponseBytes"), so one bad answer cannot exhaust the scheduler's memory.
- `cpuMetric` (default `node_cpu_utilisation`): name of usage.cpu / allocatable cpu (0-1, can exceed 1).
- `memoryMetric` (default `node_memory_utilisation`): name of usage.memory (working set) / allocatable
  memory.
- `path` (default `/apis/metrics.k8s.io/v1beta1/nodes`): the NodeMetricsList to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.bounded_answer import DEFAULT_MAX_RESPONSE_BYTES, read_max_response_bytes
from adapters.http_common import CALLER_KEYS, check_keys, read_timeout
from metrics_sched.config import ConfigError
from metrics_sched.config.reader import mapping, read_duration, read_str

DEFAULT_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
_KEYS = {"interval", "timeout", "maxResponseBytes", "cpuMetric", "memoryMetric", "path", *CALLER_KEYS}


@dataclass(frozen=True)
class MetricsServerConfig:
    interval: float = 15.0
    timeout: float = 5.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    cpu_metric: str = "node_cpu_utilisation"
    memory_metric: str = "node_memory_utilisation"
    path: str = DEFAULT_PATH


def parse_config(spec: Mapping[str, Any]) -> MetricsServerConfig:
    spec = mapping(spec, "")
    check_keys(spec, _KEYS, "")
    defaults = MetricsServerConfig()
    cpu = read_str(spec, "cpuMetric", "", defaults.cpu_metric, non_empty=True)
    memory = read_str(spec, "memoryMetric", "", defaults.memory_metric, non_empty=True)
    if cpu == memory:
        raise ConfigError("memoryMetric", "must differ from cpuMetric")
    path = read_str(spec, "path", "", defaults.path).strip()
    if not path.startswith("/"):
        raise ConfigError("path", "must be an absolute path on the API server, e.g. " + DEFAULT_PATH)
    return MetricsServerConfig(
        interval=read_duration(spec, "interval", "", defaults.interval),
        timeout=read_timeout(spec, "", defaults.timeout, maximum=30.0),
        max_response_bytes=read_max_response_bytes(spec),
        cpu_metric=cpu,
        memory_metric=memory,
        path=path,
    )
