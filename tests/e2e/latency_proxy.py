"""A loopback TCP proxy with adjustable latency, for the split-brain test (no TLS termination: bytes pass
through untouched, so the client verifies the API server's certificate as usual).

Each chunk the client sends is held for the latency in force when it arrived, then forwarded; answers come
back at once. A connection the client has closed forwards nothing more: a request it abandoned (its timeout
fired while the request was still held) never reaches the server. That models delay *before* a request
leaves the client (rate limiter, connection pool, a slow write queue), which is what a bind fence bounds; a
network that stores an abandoned request and delivers it later could not be fenced by any client.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque


class LatencyProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.latency = 0.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._connections: list[_Connection] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def holding(self, received_before: float) -> int:
        """Chunks received before that time (monotonic) and still held for later delivery."""
        with self._lock:
            connections = list(self._connections)
        total = 0
        for connection in connections:
            with connection.cond:
                total += sum(1 for received, _, _ in connection.held if received < received_before)
        return total

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            connection = _Connection(self, client, upstream)
            with self._lock:
                self._sockets += [client, upstream]
                self._connections.append(connection)
            connection.start()


class _Connection:
    def __init__(self, proxy: LatencyProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.held: deque[tuple[float, float, bytes]] = deque()  # (received, due, data)
        self.cond = threading.Condition()
        self.client_gone = False

    def start(self) -> None:
        for target in (self._from_client, self._to_upstream, self._from_upstream):
            threading.Thread(target=target, daemon=True).start()

    def _from_client(self) -> None:
        while True:
            try:
                data = self.client.recv(65536)
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.client_gone = True  # whatever is still held is dropped
                    self.held.clear()
                    self.cond.notify_all()
                    return
                now = time.monotonic()
                self.held.append((now, now + self.proxy.latency, data))
                self.cond.notify_all()

    def _to_upstream(self) -> None:
        while True:
            with self.cond:
                while not self.client_gone and not self.held:
                    self.cond.wait()
                if self.client_gone:
                    break
                _, due, data = self.held[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                self.held.popleft()
            try:
                self.upstream.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            self.upstream.shutdown(socket.SHUT_RDWR)

    def _from_upstream(self) -> None:
        while True:
            try:
                data = self.upstream.recv(65536)
                if not data:
                    break
                self.client.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            self.client.shutdown(socket.SHUT_RDWR)
