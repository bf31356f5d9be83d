"""What the HTTP telemetry adapters share: secrets read from files, scrubbing, HTTP config readers.

Secrets (tokens, passwords) live in files so they can be rotated and never sit in a config dump. Their
values never appear in a repr, a log line, an exception message or health(): every error text an
adapter keeps or logs goes through `scrub` first.
"""

from __future__ import annotations

import base64
import logging
import re
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import orjson

from adapters.bounded_answer import BoundedAnswerError, get_bounded
from metrics_sched.config import ConfigError, reader
from metrics_sched.config.reader import field_name, mapping, read_duration, read_str
from metrics_sched.model.quantity import QuantityError, parse_quantity

log = logging.getLogger(__name__)

SECRET_REFRESH_SECONDS = 60.0
MAX_TIMEOUT_SECONDS = 2.0
REDACTED = "<redacted>"
# Keys the caller's source list puts in every source spec; they are not this adapter's to validate.
CALLER_KEYS = frozenset({"name", "type"})
_INSECURE_KEYS = frozenset({"insecure", "insecureSkipVerify", "insecure_skip_verify", "insecure-skip-tls-verify",
                            "verify", "skipVerify"})
_AUTH_HEADER = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)[^'\",}\r\n]+")


class SourceError(RuntimeError):
    """A whole-source failure (unreachable, circuit open, ...); the message is already scrubbed."""


class SecretFileError(ValueError):
    """A secret file that cannot be used; the message names the file, never its content."""


# -- secrets -------------------------------------------------------------------------------------------


class SecretFile:
    """A token or password in a file, re-read at most `max_age` apart so a rotated secret is picked up.

    The one file-backed secret of the adapters: CMDB and Prometheus credentials, and (through
    adapters.kubernetes.tokens.FileToken) service-account tokens. `kind` names it in messages.
    """

    def __init__(self, path: Path, *, max_age: float = SECRET_REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic, kind: str = "secret") -> None:
        self.path = path
        self.kind = kind
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        # Eager: a missing or empty file is a config error, not a surprise at the first refresh.
        self._value = self._read()
        self._read_at = clock()

    def _read(self) -> str:
        try:
            value = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise SecretFileError(f"cannot read {self.kind} file {self.path}: {reason}") from None
        if not value:
            raise SecretFileError(f"{self.kind} file {self.path} is empty")
        return value

    def value(self) -> str:
        with self._lock:
            if self._clock() - self._read_at >= self._max_age:
                self._reload_locked()
            return self._value

    def refresh(self) -> bool:
        """Re-reads now; True when the value changed (worth retrying a request refused with 401)."""
        with self._lock:
            before = self._value
            self._reload_locked()
            return self._value != before

    def _reload_locked(self) -> None:
        self._read_at = self._clock()
        try:
            self._value = self._read()
        except SecretFileError as exc:
            # A rotation swaps the file (the kubelet through a symlink); a failed read mid-swap should not
            # drop a secret that may well still be valid.
            log.warning("keeping the previous %s: %s", self.kind, exc)

    def __repr__(self) -> str:
        return f"SecretFile(path={str(self.path)!r})"


@dataclass(frozen=True)
class Credentials:
    """How to fill the Authorization header: `<scheme> <token>` or HTTP basic auth."""

    kind: Literal["token", "basic"]
    scheme: str = "Bearer"
    token: SecretFile | None = None
    username: str = ""
    password: SecretFile | None = None

    def authorization(self) -> str:
        if self.kind == "token":
            assert self.token is not None
            return f"{self.scheme} {self.token.value()}"
        assert self.password is not None
        return f"Basic {_basic(self.username, self.password.value())}"

    def secrets(self) -> list[str]:
        """Every form in which a secret could show up in a text, for `scrub`."""
        if self.kind == "token":
            assert self.token is not None
            return [self.token.value()]
        assert self.password is not None
        password = self.password.value()
        return [password, _basic(self.username, password)]


def _basic(username: str, password: str) -> str:
    return base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret and anything that looks like an Authorization header value removed."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)


def clean_message(text: str, secrets: Iterable[str] = (), *, limit: int = 300) -> str:
    """`text` on one line, scrubbed and bounded: fit for errors, logs and the source's health."""
    text = scrub(" ".join(text.split()), secrets)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_error(exc: BaseException, secrets: Iterable[str] = (), *, limit: int = 300) -> str:
    text = str(exc)
    return clean_message(f"{type(exc).__name__}: {text}" if text.strip() else type(exc).__name__, secrets,
                         limit=limit)


# -- time ----------------------------------------------------------------------------------------------


def parse_rfc3339(text: str) -> float:
    """Unix seconds from an RFC 3339 timestamp ("2024-05-01T10:00:00Z", fractions, offsets); naive is UTC."""
    stamp = datetime.fromisoformat(text.strip())
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


# -- config readers ------------------------------------------------------------------------------------
# The generic ones are metrics_sched.config.reader's; these add what only HTTP sources need.


def check_keys(spec: Mapping[str, Any], known: Collection[str], where: str) -> None:
    """reader.check_keys, but first refusing any option that would disable TLS verification."""
    for key in spec:
        if key in _INSECURE_KEYS:
            raise ConfigError(field_name(where, str(key)),
                              "TLS is always verified; give tls.caFile to trust a private CA instead")
    reader.check_keys(spec, known, where)


def read_timeout(spec: Mapping[str, Any], where: str, default: float = MAX_TIMEOUT_SECONDS,
                 maximum: float = MAX_TIMEOUT_SECONDS) -> float:
    return read_duration(spec, "timeout", where, default, maximum=maximum)


def read_url(spec: Mapping[str, Any], where: str, key: str = "url") -> str:
    field = field_name(where, key)
    url = read_str(spec, key, where).strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(field, f"must be an http:// or https:// URL, got {url!r}")
    if parts.username is not None or parts.password is not None:
        # Credentials in a URL end up in logs and error messages; they belong in files.
        raise ConfigError(field, "must not contain credentials; use auth with a token or password file")
    if parts.fragment:
        raise ConfigError(field, "must not contain a #fragment")
    return url


def resolve_path(base_dir: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base_dir / path


def read_tls(spec: Mapping[str, Any], where: str, base_dir: Path, url: str) -> Path | None:
    """tls.caFile: a PEM bundle to verify the server with (None: the system trust store)."""
    if "tls" not in spec or spec["tls"] is None:
        return None
    tls_where = field_name(where, "tls")
    tls = mapping(spec["tls"], tls_where)
    check_keys(tls, {"caFile"}, tls_where)
    if "caFile" not in tls:
        return None
    ca = resolve_path(base_dir, read_str(tls, "caFile", tls_where))
    if not ca.is_file():
        raise ConfigError(field_name(tls_where, "caFile"), f"{ca} is not a readable file")
    if not url.startswith("https://"):
        raise ConfigError(field_name(tls_where, "caFile"), "is only used with an https:// url")
    try:
        ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(field_name(tls_where, "caFile"), f"{ca} holds no usable PEM certificates: {exc}") from None
    return ca


def read_auth(spec: Mapping[str, Any], where: str, base_dir: Path, *, token_key: str,
              schemes: Collection[str] | None = None, default_scheme: str = "Bearer") -> Credentials | None:
    """auth: {<token_key>: file[, scheme]} or {basicAuth: {username, passwordFile}}; None without auth."""
    if spec.get("auth") is None:
        return None
    auth_where = field_name(where, "auth")
    auth = mapping(spec["auth"], auth_where)
    check_keys(auth, {token_key, "basicAuth", *(("scheme",) if schemes else ())}, auth_where)
    if (token_key in auth) == ("basicAuth" in auth):
        raise ConfigError(auth_where, f"needs exactly one of {token_key} or basicAuth")
    if token_key in auth:
        scheme = default_scheme
        if schemes:
            scheme = read_str(auth, "scheme", auth_where, default_scheme)
            if scheme not in schemes:
                raise ConfigError(field_name(auth_where, "scheme"), f"must be one of {', '.join(schemes)}")
        token = _secret(auth, token_key, auth_where, base_dir)
        return Credentials(kind="token", scheme=scheme, token=token)
    if "scheme" in auth:
        raise ConfigError(field_name(auth_where, "scheme"), "only applies to a token")
    basic_where = field_name(auth_where, "basicAuth")
    basic = mapping(auth["basicAuth"], basic_where)
    check_keys(basic, {"username", "passwordFile"}, basic_where)
    username = read_str(basic, "username", basic_where)
    if not username or ":" in username:
        raise ConfigError(field_name(basic_where, "username"), "must be non-empty and contain no ':'")
    return Credentials(kind="basic", username=username, password=_secret(basic, "passwordFile", basic_where, base_dir))


def _secret(spec: Mapping[str, Any], key: str, where: str, base_dir: Path) -> SecretFile:
    path = resolve_path(base_dir, read_str(spec, key, where))
    try:
        return SecretFile(path)
    except SecretFileError as exc:
        raise ConfigError(field_name(where, key), str(exc)) from None


def status_message(resp: httpx.Response) -> str:
    """An API server's error answer in a few words: its Status `message`, else the start of the body."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    return str(body.get("message", "")) if isinstance(body, Mapping) else resp.text[:200]


def kube_api_client(factory: Callable[[], httpx.Client] | None) -> httpx.Client:
    """A client of the Kubernetes API from the sources' context; check-config validates without a cluster, so
    without a factory the client points nowhere (the real one is only made when the scheduler runs)."""
    return factory() if factory is not None else httpx.Client(base_url="https://kubernetes.invalid")


def get_body(client: httpx.Client, path: str, *, timeout: float, max_bytes: int,
             params: Mapping[str, str] | None = None, accept: str = "application/json") -> bytes:
    """GET an aggregated Kubernetes API (metrics.k8s.io, custom/external metrics): the body of a 200 answer, or
    a SourceError naming the path (transport error, non-200 with the Status message, an answer past `max_bytes`
    or not complete within `timeout`: adapters.bounded_answer)."""
    try:
        resp = get_bounded(client, path, params=params, timeout=timeout, max_bytes=max_bytes,
                           headers={"Accept": accept})
    except BoundedAnswerError as exc:
        raise SourceError(f"GET {path}: {exc}") from None
    except httpx.HTTPError as exc:
        raise SourceError(f"GET {path}: {describe_error(exc)}") from None
    if resp.status_code != 200:
        raise SourceError(clean_message(f"GET {path}: HTTP {resp.status_code}: {status_message(resp)}"))
    return resp.content


def loads_body(path: str, content: bytes) -> object:
    """A body decoded as plain JSON, or a SourceError naming the path when it is not JSON."""
    try:
        body: object = orjson.loads(content)  # megabytes at 5,000 nodes: several times the stdlib's speed
    except orjson.JSONDecodeError:
        raise SourceError(f"GET {path}: the reply is not JSON") from None
    return body


def get_json(client: httpx.Client, path: str, *, timeout: float, max_bytes: int,
             params: Mapping[str, str] | None = None, accept: str = "application/json") -> object:
    """`get_body`, decoded (`loads_body`)."""
    return loads_body(path, get_body(client, path, timeout=timeout, max_bytes=max_bytes, params=params,
                                     accept=accept))


def counted_quantity(raw: object, dropped: Counter[str]) -> Fraction | None:
    """A metric item's quantity, or None with the reason counted in `dropped` (missing, malformed)."""
    if raw is None:
        dropped["missing"] += 1
        return None
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        dropped["malformed"] += 1
        return None
    try:
        return parse_quantity(raw)
    except QuantityError:
        dropped["malformed"] += 1
        return None


def counted_timestamp(item: Mapping[str, Any], dropped: Counter[str]) -> float | None:
    """A metric item's `timestamp` (RFC 3339) as epoch seconds, or None counted as no_timestamp in `dropped`."""
    stamp = item.get("timestamp")
    try:
        observed_at = parse_rfc3339(stamp) if isinstance(stamp, str) else None
    except ValueError:
        observed_at = None
    if observed_at is None:
        dropped["no_timestamp"] += 1
    return observed_at
