"""Where the API server is and how to authenticate, as the httpx stack needs it.

The kubeconfig / in-cluster files are read by the official `kubernetes` client's loaders
(adapters/kubernetes/kube_config_bridge.py); this module holds what they produce in the form the raw-JSON
httpx client uses: a verifying ssl.SSLContext, an httpx.Auth, the SNI name and the proxy.

TLS is always verified: `insecure-skip-tls-verify` is refused by the loader, never honoured.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from adapters.kubernetes.tokens import BearerAuth, TokenSource


class KubeConfigError(ValueError):
    """The configuration cannot be used; the message says why (and never contains a credential)."""


@dataclass(frozen=True)
class PemSource:
    """PEM material given either as a file path or inline."""

    path: Path | None = None
    data: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.path is None) == (self.data is None):
            raise KubeConfigError("a PEM source needs exactly one of a path or inline data")

    def __repr__(self) -> str:
        return f"PemSource(path={str(self.path)!r})" if self.path else "PemSource(<inline>)"


@dataclass(frozen=True)
class ClientCertificate:
    cert: PemSource
    key: PemSource


class CertificateSource(Protocol):
    """A client certificate that can be replaced while the process runs (an exec plugin's output expires)."""

    def client_certificate(self) -> ClientCertificate | None: ...


class ContextRegistry:
    """The SSL contexts built from one configuration, so a rotated client certificate reaches all of them.

    ssl.SSLContext.load_cert_chain replaces the chain for every handshake after it: new connections present
    the new certificate without rebuilding the httpx clients.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._contexts: weakref.WeakSet[ssl.SSLContext] = weakref.WeakSet()

    def add(self, context: ssl.SSLContext) -> None:
        with self._lock:
            self._contexts.add(context)

    def reload(self, pair: ClientCertificate, origin: str) -> None:
        with self._lock:
            contexts = list(self._contexts)
        for context in contexts:
            load_client_certificate(context, pair, origin)


@dataclass(frozen=True)
class KubeConfig:
    server: str
    ca: PemSource | None = None  # None: the system trust store (still verified)
    client_certificate: ClientCertificate | None = None
    token: TokenSource | None = None
    namespace: str = "default"
    origin: str = ""  # e.g. "kubeconfig /path (context x)" or "in-cluster", for error messages
    tls_server_name: str | None = None  # the name checked in the server's certificate (and sent as SNI)
    proxy: str | None = None  # the kubeconfig's proxy-url; environment proxies are not used
    certificates: CertificateSource | None = field(default=None, repr=False)
    contexts: ContextRegistry = field(default_factory=ContextRegistry, repr=False, compare=False)

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying TLS context with the CA and, when configured, the client certificate loaded."""
        try:
            if self.ca is None:
                context = ssl.create_default_context()
            elif self.ca.path is not None:
                context = ssl.create_default_context(cafile=str(self.ca.path))
            else:
                assert self.ca.data is not None
                context = ssl.create_default_context(cadata=self.ca.data.decode("ascii"))
        except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
            raise KubeConfigError(f"{self.origin}: cannot load the certificate authority: {exc}") from None
        pair = self.certificates.client_certificate() if self.certificates is not None else self.client_certificate
        if pair is not None:
            load_client_certificate(context, pair, self.origin)
        self.contexts.add(context)
        return context

    def auth(self) -> httpx.Auth | None:
        if self.token is None and self.tls_server_name is None:
            return None
        return BearerAuth(self.token, sni_hostname=self.tls_server_name)

    def http_options(self) -> dict[str, Any]:
        """httpx.Client keyword arguments for a client of this API server: base URL, TLS, auth (which also
        sets SNI from tls-server-name), proxy. Environment proxies and netrc are never consulted."""
        options: dict[str, Any] = {"base_url": self.server, "verify": self.ssl_context(), "auth": self.auth(),
                                   "trust_env": False}
        if self.proxy:
            options["proxy"] = self.proxy
        return options


def load_client_certificate(context: ssl.SSLContext, pair: ClientCertificate, origin: str) -> None:
    # ssl only loads a certificate chain from files: inline data goes to a private directory that
    # lives just long enough for the load (the context keeps the key in memory).
    with tempfile.TemporaryDirectory(prefix="metrics-sched-tls-") as tmp:
        paths = []
        for name, source in (("client.crt", pair.cert), ("client.key", pair.key)):
            if source.path is not None:
                paths.append(source.path)
                continue
            assert source.data is not None
            path = Path(tmp) / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(source.data)
            paths.append(path)
        try:
            context.load_cert_chain(certfile=str(paths[0]), keyfile=str(paths[1]))
        except (OSError, ssl.SSLError) as exc:
            # ssl's message names the failing step, never key material.
            raise KubeConfigError(f"{origin}: cannot load the client certificate/key: {exc}") from None
