"""The Prometheus HTTP API through prometheus-api-client, with failures sorted into two kinds.

`PrometheusUnreachable`: no connection at all (refused, DNS, TLS, connect timeout): the whole source is
down and the refresh stops. `QueryError`: Prometheus answered but this query failed (4xx/5xx, bad PromQL,
read timeout, malformed body): only that metric fails this round.

The session never retries (the next refresh is the retry, and a refresh must stay bounded), never reads
proxies or .netrc from the environment, and always verifies TLS.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.auth import AuthBase
from urllib3.exceptions import MaxRetryError, ReadTimeoutError
from urllib3.util.retry import Retry

from adapters.http_common import Credentials, SourceError, clean_message, describe_error
from adapters.prometheus.config import PrometheusConfig

USER_AGENT = "metrics-sched/0.1"
_STATUS = re.compile(r"^HTTP Status Code (\d+) \((.*)\)$", re.S)


class PrometheusUnreachable(SourceError):
    pass


class QueryError(Exception):
    """One query failed; the message is scrubbed and short."""


class HeaderAuth(AuthBase):
    """Sets Authorization from files re-read on rotation (requests' own auth classes hold fixed values)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = self.credentials.authorization()
        return request

    def __repr__(self) -> str:
        return f"HeaderAuth(kind={self.credentials.kind!r})"


def _read_timeout(exc: requests.exceptions.RequestException) -> bool:
    """With retries off, requests reports a read timeout as a ConnectionError around urllib3's MaxRetryError."""
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return True
    inner = exc.args[0] if exc.args else None
    return isinstance(inner, MaxRetryError) and isinstance(inner.reason, ReadTimeoutError)


class PrometheusClient:
    def __init__(self, config: PrometheusConfig, *, session: requests.Session | None = None) -> None:
        self.url = config.url
        self.timeout = config.timeout
        self._credentials = config.credentials
        session = session or requests.Session()
        session.trust_env = False
        session.verify = str(config.ca_file) if config.ca_file else True
        session.auth = HeaderAuth(config.credentials) if config.credentials else None
        session.headers["User-Agent"] = USER_AGENT
        self._session = session
        no_retries = Retry(total=0, connect=0, read=0, status=0, redirect=0, raise_on_status=False)
        # PrometheusConnect is typed Any (the package resolves it lazily); query() below is the typed edge.
        self._prom: Any = PrometheusConnect(url=config.url, session=session, retry=no_retries,
                                            timeout=config.timeout)

    def secrets(self) -> list[str]:
        return self._credentials.secrets() if self._credentials else []

    def query(self, promql: str) -> object:
        """The `data.result` of an instant query."""
        try:
            result: object = self._prom.custom_query(query=promql)
            return result
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            if _read_timeout(exc):
                raise QueryError(f"no answer within {self.timeout:g}s") from None
            # Refused, DNS, TLS, connect timeout, proxy: nothing can be asked of this Prometheus now.
            raise PrometheusUnreachable(f"Prometheus at {self.url} unreachable: {self._cause(exc)}") from None
        except requests.exceptions.JSONDecodeError:
            raise QueryError("malformed response: not JSON") from None
        except requests.exceptions.RequestException as exc:
            raise QueryError(self._cause(exc)) from None
        except PrometheusApiClientException as exc:
            raise QueryError(self._status_message(str(exc))) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryError(f"malformed response: {describe_error(exc, self.secrets(), limit=120)}") from None

    def _cause(self, exc: requests.exceptions.RequestException) -> str:
        # requests wraps urllib3's MaxRetryError, whose text repeats the whole query URL; its reason is the point.
        inner = exc.args[0] if exc.args else None
        if isinstance(inner, MaxRetryError) and inner.reason is not None:
            return describe_error(inner.reason, self.secrets())
        return describe_error(exc, self.secrets())

    def _status_message(self, text: str) -> str:
        match = _STATUS.match(text)
        if not match:
            return clean_message(text, self.secrets())
        status, body = match.group(1), match.group(2)
        detail = body
        try:
            raw = ast.literal_eval(body)
            decoded = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            detail = decoded
            payload = json.loads(decoded)
            if isinstance(payload, dict) and payload.get("error"):
                detail = f"{payload.get('errorType', 'error')}: {payload['error']}"
        except (ValueError, SyntaxError):
            pass
        return clean_message(f"HTTP {status}: {detail}", self.secrets())

    def close(self) -> None:
        self._prom.close()
