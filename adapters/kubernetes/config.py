"""Where the API server is and how to authenticate: from a kubeconfig file or from inside a pod.

TLS is always verified. A kubeconfig asking for `insecure-skip-tls-verify` is refused rather than
honoured: a scheduler that binds pods must not talk to an unauthenticated server.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from adapters.kubernetes.tokens import BearerAuth, FileToken, StaticToken, TokenError, TokenSource

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(ValueError):
    """The configuration cannot be used; the message says why (and never contains a credential)."""


@dataclass(frozen=True)
class PemSource:
    """PEM material given either as a file path or inline (the kubeconfig's `*-data` fields, decoded)."""

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


@dataclass(frozen=True)
class KubeConfig:
    server: str
    ca: PemSource | None = None  # None: the system trust store (still verified)
    client_certificate: ClientCertificate | None = None
    token: TokenSource | None = None
    namespace: str = "default"
    origin: str = ""  # e.g. "kubeconfig /path (context x)" or "in-cluster", for error messages

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
        if self.client_certificate is not None:
            _load_client_certificate(context, self.client_certificate, self.origin)
        return context

    def auth(self) -> httpx.Auth | None:
        return BearerAuth(self.token) if self.token is not None else None


def _load_client_certificate(context: ssl.SSLContext, pair: ClientCertificate, origin: str) -> None:
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


def load(kubeconfig: Path | None, *, context: str | None = None) -> KubeConfig:
    """The kubeconfig's current (or named) context, or the in-cluster service account when None."""
    return load_kubeconfig(kubeconfig, context=context) if kubeconfig is not None else load_in_cluster()


def load_kubeconfig(path: Path, *, context: str | None = None) -> KubeConfig:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        # The YAML error quotes the offending text, which may be a credential.
        raise KubeConfigError(f"kubeconfig {path} is not valid YAML") from None
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"kubeconfig {path} is not a mapping")
    context_name = context or doc.get("current-context")
    if not context_name:
        raise KubeConfigError(f"kubeconfig {path} has no current-context")
    origin = f"kubeconfig {path} (context {context_name!r})"
    ctx = _named(doc, "contexts", "context", context_name, origin)
    cluster = _named(doc, "clusters", "cluster", _str(ctx, "cluster", origin), origin)
    user_name = ctx.get("user")
    user = _named(doc, "users", "user", user_name, origin) if user_name else {}
    base = path.resolve().parent

    server = _str(cluster, "server", origin)
    if cluster.get("insecure-skip-tls-verify") is True:
        raise KubeConfigError(
            f"{origin}: insecure-skip-tls-verify is set; metrics-sched always verifies the API server's "
            "certificate. Set certificate-authority or certificate-authority-data instead."
        )
    if not server.startswith("https://"):
        raise KubeConfigError(f"{origin}: server {server!r} is not https://")
    ca = _pem(cluster, "certificate-authority", base, origin)

    for unsupported in ("exec", "auth-provider", "username", "password"):
        if user.get(unsupported):
            raise KubeConfigError(f"{origin}: user auth method {unsupported!r} is not supported; use a token, "
                                  "tokenFile or a client certificate")
    token: TokenSource | None = None
    try:
        # client-go lets a tokenFile win over an inline token: the file is the one that gets rotated.
        if user.get("tokenFile"):
            token = FileToken(_resolve(base, str(user["tokenFile"])))
        elif user.get("token"):
            token = StaticToken(str(user["token"]))
    except TokenError as exc:
        raise KubeConfigError(f"{origin}: {exc}") from None
    cert = _pem(user, "client-certificate", base, origin)
    key = _pem(user, "client-key", base, origin)
    if (cert is None) != (key is None):
        raise KubeConfigError(f"{origin}: client-certificate and client-key must be given together")
    client_certificate = ClientCertificate(cert, key) if cert is not None and key is not None else None
    if token is None and client_certificate is None:
        raise KubeConfigError(f"{origin}: the user has no token, tokenFile or client certificate")
    return KubeConfig(server=server.rstrip("/"), ca=ca, client_certificate=client_certificate, token=token,
                      namespace=str(ctx.get("namespace") or "default"), origin=origin)


def load_in_cluster(*, environ: Mapping[str, str] | None = None,
                    service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError("not running in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT "
                              "are not set): pass --kubeconfig FILE or set clientConnection.kubeconfig")
    origin = f"in-cluster service account ({service_account_dir})"
    ca_path = service_account_dir / "ca.crt"
    if not ca_path.is_file():
        raise KubeConfigError(f"{origin}: {ca_path} does not exist")
    try:
        token = FileToken(service_account_dir / "token")
    except TokenError as exc:
        raise KubeConfigError(f"{origin}: {exc}") from None
    ns_path = service_account_dir / "namespace"
    namespace = ns_path.read_text().strip() if ns_path.is_file() else "default"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return KubeConfig(server=f"https://{host}:{port}", ca=PemSource(path=ca_path), token=token,
                      namespace=namespace or "default", origin=origin)


def _named(doc: Mapping[str, Any], section: str, key: str, name: object, origin: str) -> Mapping[str, Any]:
    entries = doc.get(section) or ()
    if not isinstance(entries, list):
        raise KubeConfigError(f"{origin}: {section} is not a list")
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(key) or {}
            if not isinstance(value, Mapping):
                raise KubeConfigError(f"{origin}: {section} entry {name!r} is malformed")
            return value
    raise KubeConfigError(f"{origin}: no {section} entry named {name!r}")


def _str(section: Mapping[str, Any], key: str, origin: str) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not value:
        raise KubeConfigError(f"{origin}: missing {key!r}")
    return value


def _resolve(base: Path, value: str) -> Path:
    # kubectl resolves relative paths against the kubeconfig's own directory, not the working directory.
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _pem(section: Mapping[str, Any], key: str, base: Path, origin: str) -> PemSource | None:
    data = section.get(f"{key}-data")
    if data:
        try:
            return PemSource(data=base64.b64decode("".join(str(data).split()), validate=True))
        except (binascii.Error, ValueError):
            raise KubeConfigError(f"{origin}: {key}-data is not valid base64") from None
    if section.get(key):
        path = _resolve(base, str(section[key]))
        if not path.is_file():
            raise KubeConfigError(f"{origin}: {key} file {path} does not exist")
        return PemSource(path=path)
    return None
