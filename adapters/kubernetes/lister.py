"""KubeClusterLister: the ClusterLister port, a paged LIST of all nodes and pods (or one namespace's pods) straight
from the API server.

No resourceVersion is sent, so each list is a consistent (quorum) read of the current state, not an
answer from the API server's watch cache: the point is to check the watches against something else.
Pages are yielded as they arrive, so the caller never holds the whole JSON of every pod at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

from adapters.kubernetes.client import KubeClient
from metrics_sched.ports import KubeObject

PAGE_SIZE = 500


class KubeClusterLister:
    def __init__(self, client: KubeClient, *, page_size: int = PAGE_SIZE) -> None:
        self._client = client
        self._page_size = page_size

    def list_nodes(self) -> Iterator[KubeObject]:
        return self._list("/api/v1/nodes")

    def list_pods(self) -> Iterator[KubeObject]:
        return self._list("/api/v1/pods")

    def namespace_pods(self, namespace: str, label_selector: str | None = None) -> Iterator[KubeObject]:
        """One namespace's pods, those `label_selector` matches (the rebalancer's read of a gang's members)."""
        extra = {"labelSelector": label_selector} if label_selector else {}
        return self._list(f"/api/v1/namespaces/{quote(namespace, safe='')}/pods", extra)

    def _list(self, path: str, extra: dict[str, str] | None = None) -> Iterator[KubeObject]:
        # A continue token that expires mid-list raises ApiError(410): the comparer's run fails and the next
        # one starts afresh (restarting here would yield the first pages twice).
        params = {"limit": str(self._page_size), **(extra or {})}
        while True:
            page = self._client.list(path, params)
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            params["continue"] = str(token)
