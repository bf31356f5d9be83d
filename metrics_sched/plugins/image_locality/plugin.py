"""ImageLocality: favour nodes that already hold the pod's images, as kube-scheduler's plugin
(pkg/scheduler/framework/plugins/imagelocality/image_locality.go) scores them.

The pod's images are those of its init containers, containers and image volumes, each normalised as
upstream does (a name without a tag gets ":latest"; nothing else is rewritten, so the name must match one
of the names the node reports in status.images). An image on the node adds int(size * spread), where
size is the image's size (as first reported in the cluster) and spread = nodes holding it / all nodes,
which keeps a large image held by one node from pulling every pod there. The sum is clamped to
[23 MiB, 1000 MiB * number of images] and scaled to 0-100 (integer division, as upstream).

The NodeTable keeps the image index (name -> size, rows) up to date as nodes change, so a score is one
dict lookup and one scatter-add per image of the pod, vectorised over the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from metrics_sched.framework import (
    Batchable,
    BatchScope,
    CycleState,
    FloatArray,
    IntArray,
    NodeTable,
    Normalized,
    PodInfo,
    Reads,
    ScorePlugin,
    unchanged,
)

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB
MAX_NODE_SCORE = 100


def normalized_image_name(name: str) -> str:
    """Upstream normalizedImageName: adds ":latest" when the last ':' is not after the last '/'."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def pod_images(pod: Mapping[str, Any]) -> list[str]:
    """The normalised image of every init container, container and image volume, in that order (a
    repeated image counts each time, as upstream sums per container)."""
    spec = pod.get("spec") or {}
    images = [str(c.get("image") or "") for c in spec.get("initContainers") or []]
    images += [str(c.get("image") or "") for c in spec.get("containers") or []]
    for volume in spec.get("volumes") or []:
        image = volume.get("image")
        if isinstance(image, Mapping):
            images.append(str(image.get("reference") or ""))
    return [normalized_image_name(image) for image in images]


def calculate_priority(sums: IntArray, images: int) -> IntArray:
    """Upstream calculatePriority over an array of summed image scores."""
    max_threshold = MAX_CONTAINER_THRESHOLD * images
    clamped = np.maximum(sums, MIN_THRESHOLD)
    np.minimum(clamped, max_threshold, out=clamped)
    clamped -= MIN_THRESHOLD
    clamped *= MAX_NODE_SCORE
    clamped //= max_threshold - MIN_THRESHOLD
    return clamped


class ImageLocality(ScorePlugin, Batchable):
    name = "ImageLocality"
    normalized = Normalized.COMPLETE  # calculate_priority's 0-100
    events = frozenset()  # a score: it never rejects a pod

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's images (and how many nodes hold each: any node change)."""
        return BatchScope(Reads.NODE)

    def row_local_scores(self) -> bool:
        return True  # the image's spread is over every node, not the candidates

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        images = pod_images(pod.raw)
        total_nodes = len(table)
        if not images or total_nodes == 0:
            return np.zeros(rows.shape[0], dtype=np.float64)
        sums: IntArray | None = None
        for name in images:
            state = table.images.get(name)
            if state is None:
                continue
            spread = len(state.rows) / total_nodes
            if sums is None:
                sums = np.zeros(table.capacity, dtype=np.int64)
            sums[state.row_array()] += int(float(state.size) * spread)
        if sums is None:
            return np.zeros(rows.shape[0], dtype=np.float64)
        return calculate_priority(sums[rows], len(images)).astype(np.float64)

    normalize = unchanged  # already 0-100 (upstream has no NormalizeScore for it)
