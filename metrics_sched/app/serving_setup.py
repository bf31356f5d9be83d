"""The scheduler's HTTP server as `server:` configures it: HTTPS with the configured or a self-signed
certificate and every request but the always-allowed paths reviewed by the API server (adapters/kubernetes/
reviews.py), or, with `insecure`, plain HTTP on loopback for local use. What cannot be used is a UserError
naming the field (exit 2)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from metrics_sched.app.errors import UserError
from metrics_sched.config.model import ServerConfig
from metrics_sched.serving import (
    CachedAuthenticator,
    CachedAuthorizer,
    RequestGate,
    ServingCertificate,
    TLSFilesError,
)
from metrics_sched.serving.http_server import HTTPServer
from metrics_sched.serving.self_signed import generate, host_names

if TYPE_CHECKING:
    from adapters.kubernetes import KubeConfig

log = logging.getLogger("metrics_sched.serving")


def serving_certificate(server: ServerConfig, base_dir: Path) -> ServingCertificate:
    if server.tls_cert_file:
        try:
            return ServingCertificate(base_dir / server.tls_cert_file, base_dir / server.tls_private_key_file)
        except TLSFilesError as exc:
            raise UserError(f"server.tlsCertFile: {exc}") from None
    try:
        pair = generate(base_dir / server.cert_dir if server.cert_dir else None, host_names(server.bind_address))
        certificate = ServingCertificate(pair.cert_file, pair.key_file)
    except (OSError, TLSFilesError) as exc:
        raise UserError(f"server.certDir: cannot write or read the self-signed serving pair: {exc}") from None
    log.info("serving a self-signed certificate from %s (clients verify it with %s)", pair.cert_file, pair.ca_file)
    return certificate


def build_server(server: ServerConfig, port: int, kube: KubeConfig, *, registry: CollectorRegistry,
                 base_dir: Path) -> HTTPServer:
    host = server.bind_address
    if server.insecure:
        log.warning("serving plain HTTP without authentication on %s:%d (server.insecure)", host, port)
        try:
            return HTTPServer(host, port)
        except OSError as exc:  # the port is taken, or the address is not this host's
            raise UserError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    from adapters.kubernetes.reviews import KubeReviews

    certificate = serving_certificate(server, base_dir)
    reviews = KubeReviews.from_config(kube)
    gate = RequestGate(CachedAuthenticator(reviews, ttl=server.token_cache_ttl),
                       CachedAuthorizer(reviews, allowed_ttl=server.authorized_cache_ttl,
                                        denied_ttl=server.unauthorized_cache_ttl),
                       always_allow_paths=server.always_allow_paths, registry=registry)
    try:
        return HTTPServer(host, port, tls=certificate.context, guard=gate)
    except OSError as exc:
        reviews.close()
        raise UserError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


__all__ = ["build_server", "serving_certificate"]
