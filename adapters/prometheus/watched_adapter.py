"""The requests transport adapter of the Prometheus session, whose connections show their sockets to the deadline.

urllib3 applies a timeout to each socket operation, never to an answer: a server that drips its headers or
its body keeps a query going for as long as it likes. The answer's `adapters.bounded_answer.Cutter` shuts the
socket down at the deadline, and needs the socket from the connect on, before any header arrives; these
connection classes hand it every socket they connect or reuse for a request (urllib3 keeps `sock` public).
Otherwise this is requests' own HTTPAdapter (same pools, retries, TLS and proxy handling).
"""

from __future__ import annotations

from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from adapters.bounded_answer import current

__all__ = ["WatchedAdapter"]


def _show(sock: object) -> None:
    cutter = current()
    if cutter is not None:
        cutter.watch(sock)


class _Watched:
    """Mixed into urllib3's connection classes (before them): `connect` and `request` show the socket."""

    sock: Any

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _show(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:  # a reused connection: this answer's from now on
            _show(self.sock)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class WatchedAdapter(HTTPAdapter):
    """requests' HTTPAdapter whose pools (direct and through a forward proxy) use the watched connections."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager
