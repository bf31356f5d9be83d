"""The leanest client for the benchmark's own API traffic (the ceiling's binds, the pod creator): a persistent
HTTPS connection per thread with http.client, so the benchmark's helpers take as little of the machine's two
cores as they can from the API server and the contenders.
"""

from __future__ import annotations

import http.client
import urllib.parse

from devcluster.kubeapi import Credentials, tls_context


class Api:
    """A persistent HTTPS connection to the API server (one per thread: http.client is not thread-safe)."""

    def __init__(self, creds: Credentials, timeout: float | None = 30) -> None:
        url = urllib.parse.urlsplit(creds.server)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.context = tls_context(creds.ca_file)
        self.headers = {"Authorization": f"Bearer {creds.token}", "Content-Type": "application/json",
                        "Accept": "application/json"}
        self.timeout = timeout
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)

    def request(self, method: str, path: str, body: bytes | None = None) -> http.client.HTTPResponse:
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body, headers=self.headers)
                return self.conn.getresponse()
            except (http.client.HTTPException, OSError):
                self.conn.close()  # a keep-alive connection the server closed: reconnect once
                self.conn = self._connect()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
