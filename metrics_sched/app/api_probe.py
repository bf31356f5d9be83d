"""The API server probe at start: the scheduler's first request (list one node) answered, or a UserError saying
why the API server cannot be used (unreachable within the startup timeout, TLS verification failed, credentials
refused, not allowed to list nodes)."""

from __future__ import annotations

import logging
import ssl
import time
from typing import TYPE_CHECKING

import httpx

from metrics_sched.app.errors import UserError

if TYPE_CHECKING:
    from adapters.kubernetes import KubeConfig

log = logging.getLogger("metrics_sched.app")

DEFAULT_STARTUP_TIMEOUT = 30.0  # how long an unreachable API server is retried at start before exit 2
_PROBE = "/api/v1/nodes"  # what the scheduler needs first: reachability, TLS, credentials and RBAC in one GET


def check_api_server(kube: KubeConfig, timeout: float, *, retry_interval: float = 1.0,
                     transport: httpx.BaseTransport | None = None) -> None:
    """Returns once the API server answers the scheduler's first request; UserError when it cannot be used.

    Connection failures and 5xx/429 are retried until `timeout` (an API server restarting with the pod); a TLS
    failure (an unknown CA, a name mismatch, not TLS at all), 401 and 403 are not (they do not heal by waiting).
    """
    deadline = time.monotonic() + timeout
    where = f"API server {kube.server} ({kube.origin})"
    last, warned = "", False
    options = kube.http_options()
    if transport is not None:
        options.pop("proxy", None)  # a test transport replaces the network, proxy included
    with httpx.Client(**options, timeout=5.0, transport=transport) as http:
        while True:
            try:
                resp = http.get(_PROBE, params={"limit": "1"})
            except httpx.TransportError as exc:
                if _tls_failure(exc):
                    raise UserError(f"{where}: TLS failed: {exc}") from None
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 401:
                    raise UserError(f"{where}: the credentials were rejected (401 Unauthorized)")
                if resp.status_code == 403:
                    raise UserError(f"{where}: forbidden to list nodes (403): {_status_message(resp)}")
                if resp.status_code < 500 and resp.status_code != 429:
                    return
                last = f"HTTP {resp.status_code}: {_status_message(resp)}"
            if time.monotonic() >= deadline:
                raise UserError(f"{where}: not reachable within {timeout:g}s ({last})")
            if not warned:
                log.warning("%s: not reachable yet (%s); retrying for up to %gs", where, last, timeout)
                warned = True
            time.sleep(min(retry_interval, max(0.0, deadline - time.monotonic())))


def _tls_failure(exc: BaseException) -> bool:
    # httpx wraps the ssl error (as __context__/__cause__) or only quotes it.
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _status_message(resp: httpx.Response) -> str:
    try:
        message = resp.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else resp.text[:200] or resp.reason_phrase


__all__ = ["DEFAULT_STARTUP_TIMEOUT", "check_api_server"]
