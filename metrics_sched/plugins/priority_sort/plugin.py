"""PrioritySort: higher priority first, then older pods first (kube-scheduler's default QueueSort)."""

from __future__ import annotations

from typing import Any

from metrics_sched.framework import PodInfo, QueueSortPlugin


class PrioritySort(QueueSortPlugin):
    name = "PrioritySort"

    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        return (-pod.priority, pod.created)
