"""A tiny loopback reverse proxy that stands in for a multi-tenant Prometheus front end (Mimir, Cortex, Thanos).

It forwards to a real Prometheus only requests that carry the tenant header: without it the answer is 401
("no org id", as Mimir says), with another tenant 403. In TLS mode it serves https with a certificate from
the dev cluster's PKI (devcluster.certs) and requires a client certificate signed by a client CA
(`client_pki`), as an mTLS ingress does. Runs as threads in the test process; every request is recorded.
"""

from __future__ import annotations

import datetime as dt
import ssl
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devcluster.certs import generate_pki
from tests.local_http import QuietHandler

TENANT_HEADER = "X-Scope-OrgID"
# Not forwarded: they describe this hop, not the request.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host",
                         "content-length", "te", "trailer"})


@dataclass(frozen=True)
class ClientPKI:
    """The proxy's serving side (CA + certificate for 127.0.0.1) and a client CA with one client certificate."""

    server_ca: Path
    server_cert: Path
    server_key: Path
    client_ca: Path
    client_cert: Path
    client_key: Path


def client_pki(directory: Path, name: str = "metrics-sched") -> ClientPKI:
    """Serving certificates from devcluster.certs, plus a client CA and a client certificate (clientAuth)."""
    server = generate_pki(directory / "server")
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tenant-proxy client CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = directory / "client"
    out.mkdir(parents=True, exist_ok=True)
    pki = ClientPKI(server.ca_cert, server.serving_cert, server.serving_key,
                    out / "ca.crt", out / "client.crt", out / "client.key")
    pki.client_ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.client_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.client_key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    pki.client_key.chmod(0o600)
    return pki


@dataclass
class Seen:
    path: str
    tenant: str | None
    status: int
    client_cn: str | None = None


@dataclass
class TenantProxy:
    """`with TenantProxy(upstream, tenant) as proxy:` serves on `proxy.url` until the block ends."""

    upstream: str
    tenant: str
    pki: ClientPKI | None = None
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._upstream = httpx.Client(base_url=self.upstream, timeout=30, trust_env=False)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        scheme = "http"
        if self.pki is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.pki.server_cert, self.pki.server_key)
            context.load_verify_locations(self.pki.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="tenant-proxy", daemon=True)

    def __enter__(self) -> TenantProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        self._upstream.close()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def statuses(self) -> list[int]:
        with self._lock:
            return [s.status for s in self.seen]

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
        reply = self._upstream.request(method, path, headers=forwarded, content=body)
        return reply.status_code, reply.content, reply.headers.get("Content-Type", "application/json")


def _peer_cn(cert: dict[str, Any] | None) -> str | None:
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _handler(proxy: TenantProxy) -> type[QuietHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            tenant = self.headers.get(TENANT_HEADER)
            peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
            if tenant is None:
                status, payload, content_type = 401, b"no org id\n", "text/plain"
            elif tenant != proxy.tenant:
                status, payload, content_type = 403, f"tenant {tenant} is not allowed\n".encode(), "text/plain"
            else:
                status, payload, content_type = proxy.forward(self.command, self.path, dict(self.headers.items()),
                                                              body)
            proxy.record(Seen(self.path, tenant, status, _peer_cn(peer)))
            self.reply(status, payload, {"Content-Type": content_type})

    return Handler
