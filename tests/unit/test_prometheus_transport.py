"""The Prometheus source's transport for real deployments: tenant headers (plain and from files), mutual TLS,
bearer tokens re-read on change, a forward proxy, typed HTTP errors, 30 s timeouts, and their validation.

Servers are threads on 127.0.0.1 in this process: a fake Prometheus API, the tenant proxy of the e2e tests
(tests/e2e/tenant_proxy.py) in front of it, and a fake forward proxy.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import logging
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from adapters.http_common import SourceError
from adapters.prometheus import PRESETS, from_config
from adapters.prometheus.client import PrometheusClient, QueryError
from adapters.prometheus.config import PrometheusConfig, parse_config
from adapters.prometheus.series import Element
from metrics_sched.app.cli import main
from metrics_sched.config import ConfigError
from metrics_sched.telemetry import SourceContext
from tests.e2e.tenant_proxy import TENANT_HEADER, ClientPKI, TenantProxy, client_pki
from tests.local_http import QuietHandler, serving

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RESULT = [{"metric": {"__name__": "up", "node": "n1"}, "value": [2_000_000_000, "1"]}]
# What the client decodes RESULT into (a well-formed vector: typed elements, see adapters.prometheus.client).
DECODED = [Element(metric={"__name__": "up", "node": "n1"}, value=(2_000_000_000.0, "1"))]
SECRET_TENANT = "tenant-s3cr3t-4711"
TOKEN = "prom-bearer-0123456789abcdef"


@dataclass
class Upstream:
    """A fake Prometheus API: answers /api/v1/query with RESULT (or `reply`), records each request."""

    url: str = ""
    reply: tuple[int, bytes, dict[str, str]] | None = None
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def _handler(upstream: Upstream) -> type[QuietHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            upstream.requests.append((self.path, dict(self.headers.items())))
            status, body, headers = upstream.reply or (
                200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": RESULT}}).encode(),
                {"Content-Type": "application/json"})
            self.reply(status, body, headers)

    return Handler


def _serve(upstream: Upstream) -> Iterator[Upstream]:
    with serving(_handler(upstream)) as url:
        upstream.url = url
        yield upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    yield from _serve(Upstream())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClientPKI:
    return client_pki(tmp_path_factory.mktemp("pki"))


def config(url: str, base_dir: Path = Path("."), **extra: Any) -> PrometheusConfig:
    return parse_config({"url": url, "metrics": [{"name": "a", "query": "up"}], **extra}, base_dir=base_dir)


# -- tenant headers ----------------------------------------------------------------------------------


def test_the_tenant_header_is_sent_and_without_it_the_front_end_refuses(upstream: Upstream) -> None:
    with TenantProxy(upstream.url, "team-a") as proxy:
        assert PrometheusClient(config(proxy.url, headers={TENANT_HEADER: "team-a"})).query("up") == DECODED
        with pytest.raises(QueryError, match=r"^HTTP 401: no org id$"):
            PrometheusClient(config(proxy.url)).query("up")
        with pytest.raises(QueryError, match=r"^HTTP 403: tenant team-b is not allowed$"):
            PrometheusClient(config(proxy.url, headers={TENANT_HEADER: "team-b"})).query("up")
        assert proxy.statuses() == [200, 401, 403]
    assert len(upstream.requests) == 1 and upstream.requests[0][1][TENANT_HEADER] == "team-a"


def test_a_header_value_from_a_file_is_secret_and_followed_when_the_file_changes(
        upstream: Upstream, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    (tmp_path / "tenant").write_text(SECRET_TENANT + "\n")
    with TenantProxy(upstream.url, SECRET_TENANT) as proxy:
        cfg = config(proxy.url, tmp_path, headers={TENANT_HEADER: {"valueFile": "tenant"}, "X-Team": "sched"})
        client = PrometheusClient(cfg)
        assert client.query("up") == DECODED
        assert upstream.requests[-1][1]["X-Team"] == "sched"
        # Rotated: used from the very next query (the file changed), not a minute later.
        (tmp_path / "tenant").write_text("someone-else-0815")
        with pytest.raises(QueryError) as info:
            client.query("up")
        assert proxy.seen[-1].tenant == "someone-else-0815"
        for text in (str(info.value), repr(cfg), repr(client._session.auth), caplog.text):
            assert SECRET_TENANT not in text and "someone-else-0815" not in text


def test_a_bearer_token_file_is_re_read_as_soon_as_it_changes(upstream: Upstream, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    client = PrometheusClient(config(upstream.url, tmp_path, auth={"bearerTokenFile": "token"}))
    client.query("up")
    token.write_text(TOKEN + "-rotated-and-longer")
    client.query("up")
    assert [h["Authorization"] for _, h in upstream.requests] == [f"Bearer {TOKEN}",
                                                                 f"Bearer {TOKEN}-rotated-and-longer"]


def test_an_error_body_naming_a_secret_header_value_is_scrubbed(upstream: Upstream, tmp_path: Path) -> None:
    (tmp_path / "tenant").write_text(SECRET_TENANT)
    upstream.reply = (400, json.dumps({"status": "error", "errorType": "bad_data",
                                       "error": f"tenant {SECRET_TENANT}: parse error"}).encode(), {})
    client = PrometheusClient(config(upstream.url, tmp_path, headers={TENANT_HEADER: {"valueFile": "tenant"}}))
    with pytest.raises(QueryError) as info:
        client.query("up")
    assert str(info.value) == "HTTP 400: bad_data: tenant <redacted>: parse error"


# -- typed HTTP errors, redirects, timeouts --------------------------------------------------------


@pytest.mark.parametrize(("reply", "message"), [
    ((503, b'{"status":"error","errorType":"unavailable","error":"too many queries"}', {}),
     "HTTP 503: unavailable: too many queries"),
    ((502, b"<html>bad gateway</html>", {}), "HTTP 502: <html>bad gateway</html>"),
    ((500, b"", {}), "HTTP 500: Internal Server Error"),
    ((302, b"", {"Location": "http://elsewhere.invalid/api/v1/query"}),
     "HTTP 302: redirects are not followed; set url to the final address"),
])
def test_non_200_answers_are_typed_query_errors_without_parsing_library_text(
        upstream: Upstream, reply: tuple[int, bytes, dict[str, str]], message: str) -> None:
    upstream.reply = reply
    with pytest.raises(QueryError) as info:
        PrometheusClient(config(upstream.url)).query("up")
    assert str(info.value) == message
    assert len(upstream.requests) == 1  # no retry, no redirect followed


def test_timeouts_up_to_30s_reach_the_transport(upstream: Upstream) -> None:
    cfg = config(upstream.url, timeout="30s")
    assert cfg.timeout == 30.0
    assert PrometheusClient(cfg)._prom._timeout == 30.0


# -- mutual TLS ------------------------------------------------------------------------------------


def test_mutual_tls_with_a_client_certificate(upstream: Upstream, pki: ClientPKI) -> None:
    tls = {"caFile": str(pki.server_ca), "certFile": str(pki.client_cert), "keyFile": str(pki.client_key)}
    with TenantProxy(upstream.url, "team-a", pki) as proxy:
        assert proxy.url.startswith("https://")
        client = PrometheusClient(config(proxy.url, tls=tls, headers={TENANT_HEADER: "team-a"}))
        assert client.query("up") == DECODED
        assert proxy.seen[-1].client_cn == "metrics-sched"
        # Without a client certificate the handshake fails: the whole source is unreachable.
        with pytest.raises(SourceError, match="unreachable"):
            PrometheusClient(config(proxy.url, tls={"caFile": str(pki.server_ca)},
                                    headers={TENANT_HEADER: "team-a"})).query("up")
        # Verification stays on: the system trust store does not know the proxy's CA.
        with pytest.raises(SourceError, match="unreachable"):
            PrometheusClient(config(proxy.url, tls={"certFile": str(pki.client_cert), "keyFile": str(pki.client_key)},
                                    headers={TENANT_HEADER: "team-a"})).query("up")
        assert proxy.statuses() == [200]


# -- forward proxy ---------------------------------------------------------------------------------


def test_queries_go_through_the_configured_proxy_and_never_the_environments(
        upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # would refuse: must not be used
    monkeypatch.setenv("NO_PROXY", "*")  # would bypass the configured proxy: must not be read either
    # The upstream plays the forward proxy: a request through a proxy carries the absolute URL.
    client = PrometheusClient(config("http://prometheus.invalid:9090/prom", proxyUrl=upstream.url))
    assert client.query("up") == DECODED
    path, headers = upstream.requests[-1]
    assert path.startswith("http://prometheus.invalid:9090/prom/api/v1/query?")
    assert parse_qs(urlsplit(path).query)["query"] == ["up"]
    assert headers["Host"] == "prometheus.invalid:9090"


# -- presets ---------------------------------------------------------------------------------------


def test_the_engine_active_preset_works_on_mig_and_is_a_ratio() -> None:
    preset = PRESETS["dcgm_gpu_engine_active"]
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in preset.query and preset.unit == "ratio 0-1"
    assert preset.aggregation == "avg"
    # A MIG instance's series differ from its siblings by GPU_I_ID/GPU_I_PROFILE: aggregated `by` the node
    # labels, every GPU and MIG instance of a node is averaged into one series.
    query, timestamp_query = preset.render()
    assert query.startswith("avg by (node, ") and timestamp_query.startswith("min by (node, ")
    assert "GPU_I_ID" not in query
    assert PRESETS["dcgm_gpu_util"].unit == "%"
    src = from_config("p", {"url": "http://p", "metrics": [{"name": "u", "preset": "dcgm_gpu_engine_active",
                                                             "scale": 100}]}, SourceContext(Path(".")))
    assert src.config.metrics[0].scale == 100


# -- validation ------------------------------------------------------------------------------------


def _invalid(tmp_path: Path, pki: ClientPKI) -> list[tuple[dict[str, Any], str]]:
    https = "https://p"
    return [
        ({"timeout": "31s"}, "timeout"),
        ({"headers": ["X-Scope-OrgID"]}, "headers"),
        ({"headers": {"X Scope": "a"}}, "headers.X Scope"),
        ({"headers": {"Authorization": "Bearer x"}}, "headers.Authorization"),
        ({"headers": {"host": "x"}}, "headers.host"),
        ({"headers": {"X-Scope-OrgID": "a", "x-scope-orgid": "b"}}, "headers.x-scope-orgid"),
        ({"headers": {"X-Scope-OrgID": "a\r\nX-Evil: 1"}}, "headers.X-Scope-OrgID"),
        ({"headers": {"X-Scope-OrgID": ""}}, "headers.X-Scope-OrgID"),
        ({"headers": {"X-Scope-OrgID": 42}}, "headers.X-Scope-OrgID"),
        ({"headers": {"X-Scope-OrgID": {"file": "x"}}}, "headers.X-Scope-OrgID.file"),
        ({"headers": {"X-Scope-OrgID": {"valueFile": str(tmp_path / "missing")}}}, "headers.X-Scope-OrgID.valueFile"),
        ({"headers": {"X-Scope-OrgID": {"valueFile": str(tmp_path / "multiline")}}},
         "headers.X-Scope-OrgID.valueFile"),
        ({"url": "http://p", "tls": {"caFile": str(pki.server_ca)}}, "tls.caFile"),
        ({"url": https, "tls": {"certFile": str(pki.client_cert)}}, "tls.keyFile"),
        ({"url": https, "tls": {"keyFile": str(pki.client_key)}}, "tls.certFile"),
        ({"url": https, "tls": {"certFile": str(pki.client_cert), "keyFile": str(pki.server_key)}}, "tls.certFile"),
        ({"url": https, "tls": {"certFile": str(pki.client_cert), "keyFile": str(tmp_path / "none")}},
         "tls.keyFile"),
        ({"url": https, "tls": {"caFile": str(pki.client_key)}}, "tls.caFile"),
        ({"url": https, "tls": {"insecureSkipVerify": True}}, "tls.insecureSkipVerify"),
        ({"url": https, "tls": {"clientCert": "x"}}, "tls.clientCert"),
        ({"proxyUrl": "socks5://proxy:1080"}, "proxyUrl"),
        ({"proxyUrl": "http://user:pw@proxy:3128"}, "proxyUrl"),
        ({"proxyUrl": 3128}, "proxyUrl"),
    ]


def test_every_field_is_validated_and_errors_name_it(tmp_path: Path, pki: ClientPKI) -> None:
    (tmp_path / "multiline").write_text("a\nb")
    for extra, field_path in _invalid(tmp_path, pki):
        spec = {"url": "http://p", "metrics": [{"name": "a", "query": "up"}], **extra}
        with pytest.raises(ConfigError) as info:
            parse_config(spec, base_dir=tmp_path)
        assert info.value.field == field_path, (extra, info.value)


def test_check_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"sources": [{"name": "prom", "type": "prometheus", "url": "http://p",
                                             "headers": {"Authorization": "Bearer x"},
                                             "metrics": [{"name": "a", "query": "up"}]}]}))
    with pytest.raises(SystemExit) as info:
        main(["check-config", str(path)])
    assert info.value.code == 2
    assert "sources[0].headers.Authorization" in capsys.readouterr().err


def test_a_full_deployment_config_loads(tmp_path: Path, pki: ClientPKI) -> None:
    (tmp_path / "token").write_text(TOKEN)
    cfg = config("https://mimir.example/prometheus", tmp_path, timeout="30s", auth={"bearerTokenFile": "token"},
                 headers={TENANT_HEADER: "team-a"}, proxyUrl="http://proxy.example:3128",
                 tls={"caFile": str(pki.server_ca), "certFile": str(pki.client_cert), "keyFile": str(pki.client_key)})
    assert cfg.headers == ((TENANT_HEADER, "team-a"),) and cfg.proxy_url == "http://proxy.example:3128"
    assert cfg.client_certificate is not None and cfg.client_certificate.key_file == pki.client_key
    assert TOKEN not in repr(cfg)


# -- dependencies ----------------------------------------------------------------------------------


def test_every_package_the_product_imports_is_declared() -> None:
    declared = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-")
                for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    local = {"metrics_sched", "adapters", "__future__"}
    missing: dict[str, str] = {}
    for package in ("metrics_sched", "adapters"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                         else [])
                for name in names:
                    top = name.split(".")[0]
                    if top in local or top in sys.stdlib_module_names:
                        continue
                    dists = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
                    if not dists & declared:
                        missing[top] = str(path.relative_to(ROOT))
    assert not missing, f"imported but not in [project.dependencies]: {missing}"
