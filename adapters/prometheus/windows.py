"""History-aware metrics: a window over a metric's recent values, evaluated by Prometheus (docs/forecasting.md).

A metric of the Prometheus source may carry `window: {function, range, horizon, quantile, step}`: its value is then
the function of its query over the last `range` instead of the query's current value, e.g. the mean and standard
deviation of a node's CPU utilisation over 15 minutes (LoadRiskBalancing), its peak over an hour, or the GPU
temperature `predict_linear` forecasts 30 minutes ahead from the last 10 (GPUThermalForecast). The scheduler still
reads one value per node per refresh from its cache: the window costs Prometheus, never the hot path, and with the
recording rules (`recordingRules: true`) it is evaluated once per rule evaluation for every reader.

A plain series selector (a recorded series) is windowed as a range vector, `f(x[range])`; any other query as a
subquery, `f((query)[range:step])` (step empty: Prometheus' default resolution). The sample time stays the query's
own (its `timestampQuery`): a window ending at a stale sample is as old as that sample.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.config import ConfigError
from metrics_sched.config.reader import check_keys, field_name, mapping, read_choice, read_float, read_str

__all__ = ["FUNCTIONS", "Window", "duration_seconds", "read_window"]

FUNCTIONS = ("avg_over_time", "max_over_time", "min_over_time", "stddev_over_time", "quantile_over_time",
             "predict_linear", "deriv")
_KEYS = {"function", "range", "horizon", "quantile", "step"}
# One Prometheus duration unit (what the explanation shows as written).
_DURATION = re.compile(r"^([1-9][0-9]*)(s|m|h|d|w)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SELECTOR = re.compile(r'^\s*[A-Za-z_:][A-Za-z0-9_:]*\s*(\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})?\s*$')


def duration_seconds(text: str) -> int:
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration like 10m: {text!r}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@dataclass(frozen=True)
class Window:
    function: str
    range: str
    horizon: str | None = None  # predict_linear only: how far ahead
    quantile: float | None = None  # quantile_over_time only, 0-1
    step: str | None = None  # a subquery's resolution (None: Prometheus' default)

    def apply(self, query: str) -> str:
        """`query` windowed: a range vector of a plain selector, a subquery of anything else."""
        if _SELECTOR.match(query):
            inner = f"{query.strip()}[{self.range}]"
        else:
            inner = f"({query})[{self.range}:{self.step or ''}]"
        if self.function == "predict_linear":
            assert self.horizon is not None  # read_window requires it
            return f"predict_linear({inner}, {duration_seconds(self.horizon)})"
        if self.function == "quantile_over_time":
            return f"quantile_over_time({self.quantile:g}, {inner})"
        return f"{self.function}({inner})"

    def describe(self) -> str:
        """In words, for docs, /sources and explain: "predict_linear over 10m, 30m ahead"."""
        what = f"quantile_over_time {self.quantile:g}" if self.function == "quantile_over_time" else self.function
        return f"{what} over {self.range}" + (f", {self.horizon} ahead" if self.horizon else "")


def _duration(spec: Mapping[str, Any], key: str, where: str) -> str:
    value = read_str(spec, key, where, non_empty=True)
    if not _DURATION.match(value):
        raise ConfigError(field_name(where, key), f"must be a duration like 10m (one unit of s, m, h, d, w), "
                                                  f"got {value!r}")
    return value


def read_window(raw: object, where: str) -> Window:
    spec = mapping(raw, where)
    check_keys(spec, _KEYS, where)
    function = read_choice(spec, "function", where, FUNCTIONS)
    window_range = _duration(spec, "range", where)
    horizon = _duration(spec, "horizon", where) if "horizon" in spec else None
    if (function == "predict_linear") != (horizon is not None):
        raise ConfigError(field_name(where, "horizon"), "is required with predict_linear and only with it")
    quantile = read_float(spec, "quantile", where, None) if "quantile" in spec else None
    if (function == "quantile_over_time") != (quantile is not None):
        raise ConfigError(field_name(where, "quantile"), "is required with quantile_over_time and only with it")
    if quantile is not None and not 0 <= quantile <= 1:
        raise ConfigError(field_name(where, "quantile"), f"must be between 0 and 1, got {quantile:g}")
    step = _duration(spec, "step", where) if "step" in spec else None
    return Window(function, window_range, horizon, quantile, step)
