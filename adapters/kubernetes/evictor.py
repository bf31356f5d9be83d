"""KubeEvictor: the Evictor port, a policy/v1 Eviction POSTed to the pod's eviction subresource.

The API server checks the pod's PodDisruptionBudgets before it deletes: 429 TooManyRequests when one forbids
the disruption now (the caller skips, it does not retry hot). The Eviction carries the pod's uid as a delete
precondition, so a pod deleted and re-created under the same name meanwhile is not evicted for its
predecessor (409). The reply is not parsed: only the status counts, as with the bind.

A dry run (deleteOptions.dryRun ["All"]) goes through the same checks, the PodDisruptionBudget's included,
and changes nothing: the API server checks the budget's disruptionsAllowed without decrementing it and
deletes nothing (pkg/registry/core/pod/storage/eviction.go). The rebalancer asks it of every member of a
gang before evicting any. Each dry run sees the budget as it is: two members under one budget that allows
one disruption both pass, and the second real eviction is refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import KubeClient

__all__ = ["KubeEvictor"]


class KubeEvictor:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        """Raises ApiError: 429 when a PodDisruptionBudget forbids it now, 404 when the pod is gone, 409 when the
        uid no longer matches. `dry_run`: checked, nothing changed."""
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if dry_run:
            options["dryRun"] = ["All"]
        body: dict[str, Any] = {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/eviction"
        # A 429 here is the PodDisruptionBudget's answer, not load shedding: it goes straight back to the caller
        # (the rebalancer records the eviction as blocked and backs off) instead of waiting out its Retry-After.
        self._client.send("POST", path, body, retry_429=False)
