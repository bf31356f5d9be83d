"""MetricBatch: one metric's values for many nodes at once, as arrays.

A source that reduces a whole answer at once (Prometheus: a metric is one query for every node) hands the
cache a batch per metric instead of one `Sample` per node: at 5,000 nodes and a handful of metrics that is
tens of thousands of objects built, walked and dropped per refresh, where a batch is stored by a few numpy
operations (MetricCache.ingest). A `BatchedFetchResult` is a FetchResult whose batches come on top of its
plain `samples`; `samples_of` gives every value of a result as Samples (tests, tools).

A metric configured per device (a GPU's own temperature, for a DRA plugin choosing one GPU) also comes as a
`DeviceBatch`: one value per (node, device id), next to the metric's per-node batch (the node value, e.g. the
hottest GPU, which per-node scoring keeps reading).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from metrics_sched.ports import FetchResult, Sample
from metrics_sched.state.node_table import FloatArray

__all__ = ["BatchedFetchResult", "DeviceBatch", "DeviceKey", "MetricBatch", "samples_of"]

DeviceKey = tuple[str, str]  # (node name, device id as the source's labels give it, e.g. a GPU's UUID)


@dataclass(frozen=True)
class MetricBatch:
    """`metric`'s value for each of `nodes` (each node at most once), stamped with when it was measured (the
    sample's own time, unix seconds). `nodes` is the source's: the cache keeps it to recognise the same
    nodes in the same order at the next refresh, so it must not be changed afterwards."""

    metric: str
    nodes: list[str]
    values: FloatArray
    observed_at: FloatArray

    def __post_init__(self) -> None:
        if not len(self.nodes) == len(self.values) == len(self.observed_at):
            raise ValueError(f"batch of {self.metric}: {len(self.nodes)} nodes, {len(self.values)} values, "
                             f"{len(self.observed_at)} timestamps")

    @classmethod
    def of(cls, metric: str, nodes: list[str], values: list[float], observed_at: list[float]) -> MetricBatch:
        return cls(metric, nodes, np.array(values, dtype=np.float64), np.array(observed_at, dtype=np.float64))

    def samples(self) -> list[Sample]:
        return [Sample(metric=self.metric, node=node, value=value, observed_at=at)
                for node, value, at in zip(self.nodes, self.values.tolist(), self.observed_at.tolist(), strict=True)]


@dataclass(frozen=True)
class DeviceBatch:
    """`metric`'s value for each of `keys` ((node, device id), each at most once), stamped with when it was
    measured. Like MetricBatch.nodes, `keys` is kept by the cache to recognise the same devices in the same order
    at the next refresh: it must not be changed afterwards."""

    metric: str
    keys: list[DeviceKey]
    values: FloatArray
    observed_at: FloatArray

    def __post_init__(self) -> None:
        if not len(self.keys) == len(self.values) == len(self.observed_at):
            raise ValueError(f"device batch of {self.metric}: {len(self.keys)} devices, {len(self.values)} values, "
                             f"{len(self.observed_at)} timestamps")

    @classmethod
    def of(cls, metric: str, keys: list[DeviceKey], values: list[float], observed_at: list[float]) -> DeviceBatch:
        return cls(metric, keys, np.array(values, dtype=np.float64), np.array(observed_at, dtype=np.float64))

    def items(self) -> list[tuple[str, str, float, float]]:
        """(node, device, value, observed_at) of every entry (tests, tools)."""
        return [(node, device, value, at) for (node, device), value, at
                in zip(self.keys, self.values.tolist(), self.observed_at.tolist(), strict=True)]


@dataclass
class BatchedFetchResult(FetchResult):
    batches: list[MetricBatch] = field(default_factory=list)
    device_batches: list[DeviceBatch] = field(default_factory=list)


def samples_of(result: FetchResult) -> list[Sample]:
    """Every value of a refresh as Samples: the plain ones, then each batch's."""
    if not isinstance(result, BatchedFetchResult):
        return list(result.samples)
    return [*result.samples, *(sample for batch in result.batches for sample in batch.samples())]
