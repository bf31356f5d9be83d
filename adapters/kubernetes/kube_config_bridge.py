"""Kubeconfig and in-cluster credentials through the official client's loaders, bridged into the httpx stack.

`kubernetes.config` (KubeConfigMerger + KubeConfigLoader, InClusterConfigLoader) reads the files into a
`kubernetes.client.Configuration`: merged KUBECONFIG lists, exec plugins (token or client-certificate
output, with expiry), OIDC, tls-server-name, proxy-url, relative paths per file. This module turns that
Configuration into a KubeConfig (SSL context, httpx.Auth, SNI, proxy) and keeps its credential fresh through
the library's own `refresh_api_key_hook`, called under a lock and throttled (the hook may run a process).

What the library would accept but metrics-sched refuses, each with the reason in the message:
insecure-skip-tls-verify, plain http, impersonation, basic auth, auth providers other than OIDC, and an OIDC
refresh without an IdP CA (the library would then talk to the IdP without verifying TLS).

Two things stay hand-written, because the library's behaviour differs from client-go's: a `tokenFile` is
re-read every minute and wins over an inline `token` (the library reads it once, and prefers `token`), and a
failed refresh keeps the previous credential instead of raising into a request.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from adapters.kubernetes.config import (
    ClientCertificate,
    ContextRegistry,
    KubeConfig,
    KubeConfigError,
    PemSource,
)
from adapters.kubernetes.tokens import FileToken, StaticToken, TokenError, TokenSource
from metrics_sched.serving.gate import bearer_token

if TYPE_CHECKING:
    from kubernetes.client import Configuration

# The `kubernetes` package is imported where a configuration is loaded, not with this module: importing it
# takes about 2 s (all of its API models), which every other CLI command (check-config, explain) would pay.

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")
# How often the library's refresh hook is consulted (it re-reads the in-cluster token file when a minute has
# passed, re-runs an exec plugin within 5 minutes of its expiry): as client-go's cached file token source.
REFRESH_SECONDS = 60.0
# The least time between two refreshes forced by an expired credential or a 401: an exec plugin is a process,
# and a burst of 401s (a revoked token) must not start one per request.
MIN_REFRESH_SECONDS = 1.0
_IMPERSONATION = ("as", "as-uid", "as-groups", "as-user-extra")
_PROXY_SCHEMES = ("http", "https")


def load(kubeconfig: Path | None, *, context: str | None = None,
         environ: Mapping[str, str] | None = None) -> KubeConfig:
    """The configuration to use, in kube-scheduler's order plus kubectl's defaults: an explicit kubeconfig
    (--kubeconfig or clientConnection.kubeconfig); else the in-cluster service account inside a pod; else
    $KUBECONFIG (a list of files, merged); else ~/.kube/config."""
    env = os.environ if environ is None else environ
    if kubeconfig is not None:
        return load_kubeconfig([kubeconfig], context=context)
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        return load_in_cluster(environ=env)
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        # As kubectl: files of the list that do not exist are skipped, but not all of them.
        present = [path for path in listed if path.exists()]
        if not present:
            raise KubeConfigError(f"none of the KUBECONFIG files exist ({env['KUBECONFIG']})")
        return load_kubeconfig(present, context=context)
    default = DEFAULT_KUBECONFIG.expanduser()
    if default.is_file():
        return load_kubeconfig([default], context=context)
    raise KubeConfigError("not running in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set), "
                          f"KUBECONFIG is not set and {default} does not exist: pass --kubeconfig FILE or set "
                          "clientConnection.kubeconfig")


def load_kubeconfig(paths: Path | Sequence[Path], *, context: str | None = None) -> KubeConfig:
    """One kubeconfig file, or several merged as kubectl merges a KUBECONFIG list (the first file to define
    a name wins; each file's relative paths resolve against its own directory)."""
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    files = [paths] if isinstance(paths, Path) else list(paths)
    # kubectl takes current-context from the first file that sets it; the library's merger from the last.
    first_context = None
    for path in files:
        doc = _check_shape(path)
        first_context = first_context or doc.get("current-context")
    where = "kubeconfig " + os.pathsep.join(str(p) for p in files)
    try:
        merged = KubeConfigMerger(os.pathsep.join(str(p) for p in files)).config  # type: ignore[no-untyped-call]
    except yaml.YAMLError:
        # The YAML error quotes the offending text, which may be a credential.
        raise KubeConfigError(f"{where} is not valid YAML") from None
    except (ConfigException, AttributeError, TypeError):
        raise KubeConfigError(f"{where} is not a kubeconfig (a mapping with clusters, users and contexts)") from None
    if merged is None or not isinstance(merged.value, Mapping):
        raise KubeConfigError(f"{where} is not a mapping")
    context_name = context or first_context
    if not context_name:
        raise KubeConfigError(f"{where} has no current-context")
    origin = f"{where} (context {context_name!r})"
    cluster, cluster_path, user, user_path = _sections(merged, str(context_name), origin)
    _refuse_unsupported(cluster, user, origin)
    for section, key, base in ((cluster, "certificate-authority", cluster_path),
                               (user, "client-certificate", user_path), (user, "client-key", user_path)):
        if section.get(key) and not section.get(f"{key}-data"):
            file = _resolve(base, str(section[key]))
            if not file.is_file():
                raise KubeConfigError(f"{origin}: {key} file {file} does not exist")
    file_token: FileToken | None = None
    if user.get("tokenFile"):
        # client-go lets a tokenFile win over an inline token, re-reading it: the file is the one that rotates.
        try:
            file_token = FileToken(_resolve(user_path, str(user["tokenFile"])))
        except TokenError as exc:
            raise KubeConfigError(f"{origin}: {exc}") from None

    temp_dir = _private_temp_dir()

    def new_loader() -> Any:
        return KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=merged, active_context=context_name, config_base_path=None, temp_file_path=temp_dir)

    configuration = _configuration()
    loader = new_loader()
    _run_library(lambda: loader.load_and_set(configuration), origin)

    server = str(configuration.host)  # https://, checked in _refuse_unsupported (the library copies it as is)
    ca = PemSource(path=Path(configuration.ssl_ca_cert)) if configuration.ssl_ca_cert else None
    pair = _client_certificate(configuration, origin)
    contexts = ContextRegistry()
    token: TokenSource | None = None
    credentials: LibraryCredentials | None = None
    try:
        if file_token is not None:
            token = file_token
        elif "exec" in user or "auth-provider" in user:
            credentials = LibraryCredentials(configuration, loader, new_loader, origin, contexts)
            token = credentials
        elif user.get("token"):
            token = StaticToken(str(user["token"]))
    except TokenError as exc:
        raise KubeConfigError(f"{origin}: {exc}") from None
    if (token is None or not token.token()) and pair is None:
        raise KubeConfigError(f"{origin}: the user has no token, tokenFile, exec plugin, OIDC provider or client "
                              "certificate")
    return KubeConfig(server=server.rstrip("/"), ca=ca, client_certificate=pair, token=token,
                      namespace=str(_context_namespace(merged, str(context_name)) or "default"), origin=origin,
                      tls_server_name=configuration.tls_server_name or None,
                      proxy=_proxy(configuration.proxy, origin), certificates=credentials, contexts=contexts)


def load_in_cluster(*, environ: Mapping[str, str] | None = None,
                    service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    """The pod's service account, through the library's InClusterConfigLoader (which re-reads the projected
    token file once a minute: the kubelet rotates it)."""
    env = os.environ if environ is None else environ
    if not env.get("KUBERNETES_SERVICE_HOST") or not env.get("KUBERNETES_SERVICE_PORT"):
        raise KubeConfigError("not running in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT "
                              "are not set): pass --kubeconfig FILE or set clientConnection.kubeconfig")
    origin = f"in-cluster service account ({service_account_dir})"

    from kubernetes.config.incluster_config import InClusterConfigLoader

    def new_loader() -> Any:
        return InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(service_account_dir / "token"), cert_filename=str(service_account_dir / "ca.crt"),
            environ=env)

    configuration = _configuration()
    loader = new_loader()
    _run_library(lambda: loader.load_and_set(configuration), origin)
    ns_path = service_account_dir / "namespace"
    namespace = ns_path.read_text().strip() if ns_path.is_file() else "default"
    contexts = ContextRegistry()
    credentials = LibraryCredentials(configuration, loader, new_loader, origin, contexts)
    return KubeConfig(server=str(configuration.host), ca=PemSource(path=Path(str(configuration.ssl_ca_cert))),
                      token=credentials, namespace=namespace or "default", origin=origin, contexts=contexts)


class LibraryCredentials:
    """A credential kept by the library's loader: a bearer token (exec plugin, OIDC, in-cluster file) or an
    exec plugin's client certificate.

    token() consults the library's refresh_api_key_hook at most every `refresh_seconds`, or as soon as the
    credential's expirationTimestamp has passed (never more often than `min_seconds`); refresh() (after a
    401) reloads through a new loader, which re-runs the plugin or re-reads the file unconditionally. Library
    calls run under one lock: the loaders are not thread-safe, and concurrent requests must not start one
    plugin each. A failed refresh keeps the previous credential (the server decides whether it still works).
    """

    def __init__(self, configuration: Configuration, loader: Any, new_loader: Callable[[], Any], origin: str,
                 contexts: ContextRegistry, *, refresh_seconds: float = REFRESH_SECONDS,
                 min_seconds: float = MIN_REFRESH_SECONDS, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._configuration = configuration
        self._loader = loader
        self._new_loader = new_loader
        self._origin = origin
        self._contexts = contexts
        self._refresh_seconds = refresh_seconds
        self._min_seconds = min_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._checked_at = clock()
        self._token = _bearer(configuration)
        self._pair = _client_certificate(configuration, origin)
        self.refreshes = 0  # library refreshes performed (hook calls and reloads), for tests and metrics

    def token(self) -> str:
        if self._due():
            with self._lock:
                if self._due():
                    self._refresh_locked(force=False)
        return self._token

    def refresh(self) -> bool:
        with self._lock:
            if self._clock() - self._checked_at < self._min_seconds:
                return False  # another request just refreshed: nothing newer to retry with
            before = (self._token, self._pair)
            self._refresh_locked(force=True)
            return (self._token, self._pair) != before

    def client_certificate(self) -> ClientCertificate | None:
        self.token()  # an expired certificate is replaced like an expired token
        return self._pair

    def expiry(self) -> datetime | None:
        value = getattr(self._loader, "expiry", None)  # set by KubeConfigLoader from expirationTimestamp
        return value if isinstance(value, datetime) else None

    def _due(self) -> bool:
        elapsed = self._clock() - self._checked_at
        if elapsed >= self._refresh_seconds:
            return True
        expiry = self.expiry()
        return expiry is not None and elapsed >= self._min_seconds and self._wall_clock() >= expiry

    def _refresh_locked(self, *, force: bool) -> None:
        hook = self._configuration.refresh_api_key_hook
        try:
            if force or hook is None:
                # No hook: the library installs one only for tokens; an exec certificate is renewed by a reload.
                loader = self._new_loader()
                _run_library(lambda: loader.load_and_set(self._configuration), self._origin)
                self._loader = loader
            else:
                _run_library(lambda: hook(self._configuration), self._origin)
        except KubeConfigError as exc:
            log.warning("%s; keeping the previous credential", exc)
        self.refreshes += 1
        self._checked_at = self._clock()
        self._token = _bearer(self._configuration) or self._token
        try:
            pair = _client_certificate(self._configuration, self._origin)
        except KubeConfigError as exc:
            log.warning("%s; keeping the previous client certificate", exc)
            return
        if pair is not None and pair != self._pair:
            self._contexts.reload(pair, self._origin)
            self._pair = pair

    def __repr__(self) -> str:
        return f"LibraryCredentials({self._origin!r})"


def _configuration() -> Configuration:
    # proxy="" / no_proxy="": the Configuration would otherwise take them from the environment; only the
    # kubeconfig's proxy-url is used (the loader sets it when present).
    from kubernetes.client import Configuration

    return Configuration(proxy="", no_proxy="")


def _bearer(configuration: Configuration) -> str:
    # "Bearer x" from kubeconfigs, "bearer x\n" from the in-cluster file: an Authorization header's value.
    return bearer_token(configuration.api_key.get("BearerToken")) or ""


def _client_certificate(configuration: Configuration, origin: str) -> ClientCertificate | None:
    cert, key = configuration.cert_file, configuration.key_file
    if bool(cert) != bool(key):
        raise KubeConfigError(f"{origin}: client-certificate and client-key must be given together")
    return ClientCertificate(PemSource(path=Path(cert)), PemSource(path=Path(key))) if cert and key else None


def _run_library(call: Callable[[], object], origin: str) -> None:
    """Runs a loader call, its failures as one-line KubeConfigErrors. The exec plugin runner does not raise:
    it logs with logging.error and leaves the user without a credential, so its records are collected and
    become the error."""
    from kubernetes.config.config_exception import ConfigException

    with _library_errors() as errors:
        try:
            call()
        except ConfigException as exc:
            raise KubeConfigError(f"{origin}: {_one_line(str(exc))}") from None
        except OSError as exc:
            raise KubeConfigError(f"{origin}: {exc.strerror or type(exc).__name__}: "
                                  f"{getattr(exc, 'filename', '') or ''}") from None
        except binascii.Error:
            raise KubeConfigError(f"{origin}: a certificate or key *-data field is not valid base64") from None
        except (KeyError, ValueError, TypeError) as exc:
            # A malformed entry (a missing key the library indexes, a bad timestamp): name it, not its value.
            raise KubeConfigError(f"{origin}: malformed kubeconfig entry ({type(exc).__name__}: "
                                  f"{_one_line(str(exc))[:120]})") from None
    if errors:
        raise KubeConfigError(f"{origin}: {_one_line(errors[0])}")


class _Collect(logging.Filter):
    """Takes the library's logging.error(...) records (logged on the root logger itself) out of the log: they
    become the KubeConfigError, which the CLI prints as its one line."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            self.messages.append(record.getMessage())
            return False
        return True


@contextlib.contextmanager
def _library_errors() -> Iterator[list[str]]:
    collect = _Collect()
    root = logging.getLogger()
    root.addFilter(collect)
    try:
        yield collect.messages
    finally:
        root.removeFilter(collect)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:400]


def _check_shape(path: Path) -> Mapping[str, Any]:
    """One file's top level, checked before the library reads it: its errors would be about its internals."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KubeConfigError(f"cannot read kubeconfig {path}: {reason}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        # The YAML error quotes the offending text, which may be a credential.
        raise KubeConfigError(f"kubeconfig {path} is not valid YAML") from None
    except (ValueError, RecursionError) as exc:
        # Valid YAML that PyYAML cannot build (a date like 2024-13-45, an integer past Python's 4300 digits,
        # nesting deeper than the recursion limit): the library would raise the same, as a traceback.
        raise KubeConfigError(f"kubeconfig {path} cannot be read as YAML: {type(exc).__name__}") from None
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"kubeconfig {path} is not a mapping")
    for section in ("clusters", "contexts", "users"):
        if doc.get(section) is not None and not isinstance(doc[section], list):
            raise KubeConfigError(f"kubeconfig {path}: {section} is not a list")
    return doc


def _sections(merged: Any, context_name: str, origin: str,
              ) -> tuple[Mapping[str, Any], Path, Mapping[str, Any], Path]:
    """The context's cluster and user sections (raw), each with the file it came from."""
    from kubernetes.config.config_exception import ConfigException

    try:
        ctx = merged["contexts"].get_with_name(context_name)["context"]
        cluster_node = merged["clusters"].get_with_name(ctx["cluster"])
        user_name = ctx.safe_get("user")
        user_node = merged["users"].get_with_name(user_name, safe=True) if user_name and "users" in merged else None
        if user_name and user_node is None:
            raise KubeConfigError(f"{origin}: no users entry named {user_name!r}")
        cluster_value = cluster_node["cluster"].value
        user_value = user_node["user"].value if user_node is not None else {}
    except ConfigException as exc:
        raise KubeConfigError(f"{origin}: {_one_line(str(exc))}") from None
    except (TypeError, AttributeError):
        raise KubeConfigError(f"{origin}: contexts, clusters and users must be lists of named entries") from None
    if not isinstance(cluster_value, Mapping) or not isinstance(user_value, Mapping):
        raise KubeConfigError(f"{origin}: the context's cluster and user entries must be mappings")
    user_path = Path(str((user_node.path if user_node is not None else None) or merged.path or "."))
    return cluster_value, Path(str(cluster_node.path or merged.path or ".")), user_value, user_path


def _context_namespace(merged: Any, context_name: str) -> object:
    return merged["contexts"].get_with_name(context_name)["context"].safe_get("namespace")


def _refuse_unsupported(cluster: Mapping[str, Any], user: Mapping[str, Any], origin: str) -> None:
    if cluster.get("insecure-skip-tls-verify") is True:
        raise KubeConfigError(
            f"{origin}: insecure-skip-tls-verify is set; metrics-sched always verifies the API server's "
            "certificate. Set certificate-authority or certificate-authority-data instead.")
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise KubeConfigError(f"{origin}: server {server!r} is not https://")
    for key in _IMPERSONATION:
        if user.get(key):
            raise KubeConfigError(f"{origin}: impersonation ({key!r}) is not supported: give the scheduler's own "
                                  "identity")
    if user.get("username") or user.get("password"):
        raise KubeConfigError(f"{origin}: basic auth (username/password) is not supported: kube-apiserver removed "
                              "it in 1.19")
    provider = user.get("auth-provider")
    if provider:
        name = provider.get("name") if isinstance(provider, Mapping) else None
        if name != "oidc":
            raise KubeConfigError(f"{origin}: auth-provider {name!r} is not supported (only oidc; use an exec "
                                  "plugin for cloud providers)")
        settings = provider.get("config") or {}
        if settings.get("refresh-token") and not (settings.get("idp-certificate-authority")
                                                  or settings.get("idp-certificate-authority-data")):
            raise KubeConfigError(f"{origin}: the oidc provider has a refresh-token but no "
                                  "idp-certificate-authority(-data): refreshing would not verify the IdP's TLS")
    for section, key in ((cluster, "certificate-authority-data"), (user, "client-certificate-data"),
                         (user, "client-key-data")):
        if section.get(key):
            # The library decodes leniently (dropping what is not base64): a typo would become an empty PEM.
            try:
                base64.b64decode("".join(str(section[key]).split()), validate=True)
            except (binascii.Error, ValueError):
                raise KubeConfigError(f"{origin}: {key} is not valid base64") from None
    exec_spec = user.get("exec")
    if exec_spec is not None and (not isinstance(exec_spec, Mapping) or not exec_spec.get("command")
                                  or not exec_spec.get("apiVersion")):
        raise KubeConfigError(f"{origin}: the exec plugin needs a command and an apiVersion")
    if bool(user.get("client-certificate") or user.get("client-certificate-data")) != bool(
            user.get("client-key") or user.get("client-key-data")):
        raise KubeConfigError(f"{origin}: client-certificate and client-key must be given together")


def _proxy(value: object, origin: str) -> str | None:
    if not value:
        return None
    proxy = str(value)
    scheme = urlsplit(proxy).scheme
    if scheme not in _PROXY_SCHEMES:
        raise KubeConfigError(f"{origin}: proxy-url scheme {scheme!r} is not supported (http or https; a socks "
                              "proxy needs the socksio package, which metrics-sched does not install)")
    return proxy


def _resolve(origin_file: Path, value: str) -> Path:
    # kubectl resolves relative paths against the kubeconfig's own directory, not the working directory.
    path = Path(value).expanduser()
    return path if path.is_absolute() else origin_file.resolve().parent / path


_TEMP_LOCK = threading.Lock()
_TEMP_DIR: list[str] = []


def _private_temp_dir() -> str:
    """Where the library writes inline CA/certificate/key data and exec certificates: a 0700 directory of
    this process (the library removes its files at exit)."""
    with _TEMP_LOCK:
        if not _TEMP_DIR:
            _TEMP_DIR.append(tempfile.mkdtemp(prefix="metrics-sched-kube-"))
        return _TEMP_DIR[0]
