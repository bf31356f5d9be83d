"""CmdbSource: pagination, paths, value checks, retries, circuit breaker and secrecy.

Most tests use httpx.MockTransport; the preset tests run the project's emulator in-process on 127.0.0.1
(a thread, no subprocess), so the NetBox and OpenCost shapes are the ones the e2e cluster serves.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.cmdb import CmdbSource, pages, parse_config
from adapters.cmdb.paths import ShapeError, extract_items, split_path
from adapters.http_common import Credentials, SecretFile, SourceError
from devcluster.certs import generate_pki
from devcluster.emulator import EmulatorControl, EmulatorServer, serve
from metrics_sched.config import ConfigError
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry import BreakerStatus, CircuitBreaker
from metrics_sched.telemetry.batch import samples_of

pytestmark = pytest.mark.unit

TOKEN = "cmdb-s3cr3t-token-0123456789abcdef"
T_FETCH = 1_800_000_000.0
NODES = NodeDirectory(names=frozenset({"n1", "n2", "n3", "n4", "n5"}), by_internal_ip={}, cpu_allocatable={},
                      memory_allocatable={})
Handler = Callable[[httpx.Request], httpx.Response]


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Recorder:
    """Wraps a handler, keeping every request it saw."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)

    @property
    def urls(self) -> list[str]:
        return [str(r.url) for r in self.requests]


def make(handler: Handler, tmp_path: Path | None = None, *, clock: Clock | None = None,
         sleeps: list[float] | None = None, **spec: Any) -> CmdbSource:
    spec.setdefault("url", "https://cmdb.test/api/items")
    config = parse_config(spec, base_dir=tmp_path or Path("."))
    sleep_log = sleeps if sleeps is not None else []
    return CmdbSource("cmdb", config, transport=httpx.MockTransport(handler), clock=clock or Clock(),
                      wall_clock=lambda: T_FETCH, sleep=sleep_log.append)


def values(result: FetchResult) -> dict[tuple[str, str], float]:
    return {(s.metric, s.node): s.value for s in samples_of(result)}


def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "cmdb-token"
    path.write_text(TOKEN + "\n")
    return path


# -- pagination ------------------------------------------------------------------------------------


def test_next_url_pagination_stays_on_the_configured_origin_and_sends_the_token(tmp_path: Path) -> None:
    pages = {
        "0": {"count": 3, "next": "http://internal-netbox:8000/api/items?limit=2&offset=2", "results": [
            {"name": "n1", "cost": 1.5}, {"name": "n2", "cost": 2.5}]},
        "2": {"count": 3, "next": None, "results": [{"name": "n3", "cost": 3.5}]},
    }
    recorder = Recorder(lambda r: httpx.Response(200, json=pages[r.url.params.get("offset", "0")]))
    src = make(recorder, tmp_path, itemsPath="results", nodeKey="name", fields={"cost": "cost"},
               pagination={"type": "next", "pageSize": 2}, auth={"tokenFile": str(token_file(tmp_path)),
                                                                  "scheme": "Token"})
    result = src.fetch(NODES)
    assert recorder.urls == ["https://cmdb.test/api/items?limit=2", "https://cmdb.test/api/items?limit=2&offset=2"]
    assert all(r.headers["Authorization"] == f"Token {TOKEN}" for r in recorder.requests)
    assert values(result) == {("cost", "n1"): 1.5, ("cost", "n2"): 2.5, ("cost", "n3"): 3.5}
    assert all(s.observed_at == T_FETCH for s in samples_of(result))
    assert result.queries == 2
    src.poll(NODES)
    assert src.health.extra["pages"] == 2 and src.health.extra["truncated"] is False


def _netbox_pages(items: int, page_size: int, grows_to: int | None = None,
                  hold: threading.Barrier | None = None) -> Recorder:
    """NetBox's devices list (limit/offset, `count` and a `next` URL); `grows_to`: more items from the second page on
    than the first page counted; `hold`: pages after the first wait there for another to arrive."""
    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("offset", "0"))
        limit = int(request.url.params["limit"])
        total = items if offset == 0 or grows_to is None else grows_to
        if offset and hold is not None:
            hold.wait()
        following = f"https://cmdb.test/api/items?limit={limit}&offset={offset + limit}" if offset + limit < total \
            else None
        return httpx.Response(200, json={"count": total, "next": following, "results": [
            {"name": f"n{i + 1}", "cost": float(i)} for i in range(offset, min(offset + limit, total))]})

    return Recorder(handler)


def test_pages_after_the_first_are_fetched_at_once_when_the_first_says_how_many() -> None:
    hold = threading.Barrier(2, timeout=10)  # two pages in flight at once, or the test fails (BrokenBarrierError)
    recorder = _netbox_pages(5, 1, hold=hold)
    src = make(recorder, itemsPath="results", nodeKey="name", fields={"cost": "cost"},
               pagination={"type": "next", "pageSize": 1})
    result = src.fetch(NODES)
    assert not result.errors, result.errors
    assert values(result) == {("cost", f"n{i + 1}"): float(i) for i in range(5)}
    assert sorted(r.url.params.get("offset", "0") for r in recorder.requests) == ["0", "1", "2", "3", "4"]
    assert result.queries == 5 and pages.CONCURRENT_PAGES >= 2


def test_planned_pages_stop_at_max_pages_and_a_grown_collection_is_followed() -> None:
    capped = make(_netbox_pages(5, 1), itemsPath="results", nodeKey="name", fields={"cost": "cost"},
                  pagination={"type": "next", "pageSize": 1}, maxPages=3)
    result = capped.poll(NODES)
    assert result is not None and len(samples_of(result)) == 3
    assert capped.health.extra == {**capped.health.extra, "pages": 3, "truncated": True}
    # The first page counted 3 items; from the second on there are 5: the pages planned (offsets 1, 2), then the
    # last one's next URL, one by one.
    recorder = _netbox_pages(3, 1, grows_to=5)
    grown = make(recorder, itemsPath="results", nodeKey="name", fields={"cost": "cost"},
                 pagination={"type": "next", "pageSize": 1})
    result = grown.fetch(NODES)
    assert values(result) == {("cost", f"n{i + 1}"): float(i) for i in range(5)}
    assert [r.url.params.get("offset", "0") for r in recorder.requests][-2:] == ["3", "4"]


def test_link_header_pagination_like_servicenow() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("sysparm_offset", "0"))
        rows = [{"name": f"n{offset + 1}", "u_hourly_cost": str(offset + 1.25)}]
        headers = {}
        if offset < 2:
            headers["Link"] = (f'<https://cmdb.test/api/now/table/cmdb_ci?sysparm_limit=1&sysparm_offset={offset + 1}>;'
                               f'rel="next", <https://cmdb.test/api/now/table/cmdb_ci?sysparm_offset=0>;rel="first"')
        return httpx.Response(200, json={"result": rows}, headers=headers)

    recorder = Recorder(handler)
    src = make(recorder, url="https://cmdb.test/api/now/table/cmdb_ci", itemsPath="result", nodeKey="name",
               fields={"cost": "u_hourly_cost"}, pagination={"type": "link", "limitParam": "sysparm_limit",
                                                             "pageSize": 1})
    result = src.fetch(NODES)
    assert values(result) == {("cost", "n1"): 1.25, ("cost", "n2"): 2.25, ("cost", "n3"): 3.25}
    assert len(recorder.requests) == 3 and recorder.requests[0].url.params["sysparm_limit"] == "1"


@pytest.mark.parametrize(("total", "expected_pages"), [(5, 3), (4, 3), (1, 1)])
def test_offset_pagination_stops_at_a_short_page(total: int, expected_pages: int) -> None:
    rows = [{"host": {"name": f"n{i + 1}"}, "cost": i} for i in range(total)]

    def handler(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["start"]), int(request.url.params["count"])
        return httpx.Response(200, json=rows[offset:offset + limit])

    recorder = Recorder(handler)
    src = make(recorder, nodeKey="host.name", fields={"cost": "cost"}, params={"site": "dc1"},
               pagination={"type": "offset", "offsetParam": "start", "limitParam": "count", "pageSize": 2})
    result = src.fetch(NODES)
    assert len(recorder.requests) == expected_pages
    assert [r.url.params["start"] for r in recorder.requests] == [str(2 * i) for i in range(expected_pages)]
    assert all(r.url.params["site"] == "dc1" for r in recorder.requests)
    assert len(samples_of(result)) == total


def test_max_pages_caps_a_refresh_and_health_says_so() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "0"))
        return httpx.Response(200, json={"items": [{"name": f"n{page + 1}", "v": 1}],
                                         "next": f"/api/items?page={page + 1}"})

    src = make(handler, itemsPath="items", nodeKey="name", fields={"v": "v"}, pagination={"type": "next"},
               maxPages=2)
    result = src.poll(NODES)
    assert result is not None and len(samples_of(result)) == 2
    assert src.health.extra["truncated"] is True and src.health.as_dict()["extra"]["truncated"] is True


def test_a_pagination_loop_is_an_error_not_a_hang() -> None:
    src = make(lambda r: httpx.Response(200, json={"items": [], "next": "/api/items"}), itemsPath="items",
               nodeKey="name", fields={"v": "v"}, pagination={"type": "next", "limitParam": ""})
    result = src.fetch(NODES)
    assert result.errors == {"v": "pagination loops back to https://cmdb.test/api/items"}


# -- items, fields, values -------------------------------------------------------------------------


def test_items_paths_with_indexes_dict_values_and_top_level_lists() -> None:
    doc = {"data": [{"a": {"name": "n1"}, "b": {"name": "n2"}}, {"c": {"name": "n3"}}]}
    assert extract_items(doc, split_path("data.0"), "dictValues") == [{"name": "n1"}, {"name": "n2"}]
    assert extract_items(doc, split_path("data.-1"), "dictValues") == [{"name": "n3"}]
    assert extract_items([1, 2], split_path(""), "list") == [1, 2]
    assert extract_items({"data": []}, split_path("data.0"), "dictValues") == []
    with pytest.raises(ShapeError, match="nothing at 'results'"):
        extract_items({"detail": "x"}, split_path("results"), "list")
    with pytest.raises(ShapeError, match="expected a list"):
        extract_items({"results": {}}, split_path("results"), "list")


def test_field_paths_scale_booleans_strings_and_refusals() -> None:
    rows = [
        {"name": "n1", "cf": {"cost": 2.0, "maint": True, "watts": "350.5"}},
        {"name": "N2", "cf": {"cost": "1.5", "maint": "false", "watts": None}},  # names are matched lower-cased
        {"name": "n3", "cf": {"cost": -1, "maint": {"x": 1}, "watts": "lots"}},
        {"name": "n4", "cf": {}},
        {"name": "n1", "cf": {"cost": 9}},  # duplicate
        {"name": "elsewhere", "cf": {"cost": 1}},
        {"cf": {"cost": 1}},
        "junk",
    ]
    src = make(lambda r: httpx.Response(200, json=rows), nodeKey="name", fields={
        "cost_cents": {"path": "cf.cost", "scale": 100},
        "maintenance": "cf.maint",
        "watts": {"path": "cf.watts"},
    })
    result = src.fetch(NODES)
    assert values(result) == {
        ("cost_cents", "n1"): 200.0, ("maintenance", "n1"): 1.0, ("watts", "n1"): 350.5,
        ("cost_cents", "n2"): 150.0, ("maintenance", "n2"): 0.0,
    }
    assert result.dropped == {"missing": 4, "negative": 1, "malformed": 3, "duplicate": 1, "unknown_node": 1,
                              "no_node_key": 1}
    assert result.unmatched_series == 2


def test_nan_and_infinity_tokens_are_refused_one_value_at_a_time() -> None:
    body = b'[{"name": "n1", "a": NaN, "b": 1}, {"name": "n2", "a": Infinity, "b": -Infinity},' \
           b' {"name": "n3", "a": 1e999, "b": 2}]'
    src = make(lambda r: httpx.Response(200, content=body), nodeKey="name",
               fields={"a": "a", "b": {"path": "b", "allowNegative": True}})
    result = src.fetch(NODES)
    assert values(result) == {("b", "n1"): 1.0, ("b", "n3"): 2.0}
    assert result.dropped == {"nan": 1, "inf": 3}


def test_malformed_json_fails_every_metric_and_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    src = make(lambda r: httpx.Response(200, content=b'{"results": [{"name": "n1", "co'), itemsPath="results",
               nodeKey="name", fields={"a": "a", "b": "b"})
    result = src.poll(NODES)
    assert result is not None and samples_of(result) == [] and result.dropped == {"malformed": 1}
    assert set(result.errors) == {"a", "b"} and "malformed JSON" in result.errors["a"]
    assert src.health.consecutive_failures == 1 and not src.health.up
    assert src.health.breaker is not None and src.health.breaker.consecutive_failures == 1


def test_timestamp_path_rfc3339_or_unix_seconds() -> None:
    rows = [{"name": "n1", "v": 1, "ts": "2024-05-01T10:00:00Z"}, {"name": "n2", "v": 2, "ts": 1714557600.5},
            {"name": "n3", "v": 3, "ts": "last tuesday"}, {"name": "n4", "v": 4}]
    result = make(lambda r: httpx.Response(200, json=rows), nodeKey="name", fields={"v": "v"},
                  timestampPath="ts").fetch(NODES)
    assert {s.node: s.observed_at for s in samples_of(result)} == {"n1": 1714557600.0, "n2": 1714557600.5}
    assert result.dropped == {"bad_timestamp": 2}


def test_divide_by_path_and_match_for_opencost_assets_shape() -> None:
    assets = {"code": 200, "data": [{
        "a/Node/n1": {"type": "Node", "properties": {"name": "n1"}, "minutes": 60, "totalCost": 3.0},
        "a/Node/n2": {"type": "Node", "properties": {"name": "n2"}, "minutes": 30, "totalCost": 0.75},
        "a/Node/n3": {"type": "Node", "properties": {"name": "n3"}, "minutes": 0, "totalCost": 0.0},
        "a/Disk/pv-1": {"type": "Disk", "properties": {"name": "pv-1"}, "minutes": 60, "totalCost": 0.1},
    }]}
    recorder = Recorder(lambda r: httpx.Response(200, json=assets))
    src = make(recorder, preset="opencost_assets", url="http://opencost.test:9003/model/assets")
    result = src.fetch(NODES)
    assert recorder.urls == ["http://opencost.test:9003/model/assets?window=1h"]
    assert values(result) == {("node_hourly_cost", "n1"): 3.0, ("node_hourly_cost", "n2"): 1.5}
    assert result.dropped == {"bad_divisor": 1} and result.unmatched_series == 0


# -- presets against the emulator ------------------------------------------------------------------


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[tuple[EmulatorServer, EmulatorControl]]:
    server = serve("127.0.0.1", 0, seed=7, cmdb_token=TOKEN).start()
    control = EmulatorControl(server.url, timeout=10)
    control.register_nodes([{"name": f"n{i}", "ip": f"10.0.0.{i}", "gpus": 2 if i == 1 else 0}
                            for i in range(1, 4)] + [{"name": "not-a-k8s-node", "ip": "10.0.1.1"}])
    try:
        yield server, control
    finally:
        control.close()
        server.close()


def test_netbox_preset_against_the_emulator(emulator: tuple[EmulatorServer, EmulatorControl],
                                            tmp_path: Path) -> None:
    server, control = emulator
    control.set_values("n2", maintenance=True)
    spec = {"preset": "netbox", "url": f"{server.url}/api/dcim/devices/", "pagination": {"pageSize": 3},
            "auth": {"tokenFile": str(token_file(tmp_path))}}
    src = CmdbSource("netbox", parse_config(spec, base_dir=tmp_path))
    result = src.fetch(NODES)
    expected = {("hourly_cost", n): control.values(n)["hourly_cost"] for n in ("n1", "n2", "n3")}
    expected |= {("maintenance", "n1"): 0.0, ("maintenance", "n2"): 1.0, ("maintenance", "n3"): 0.0}
    assert values(result) == expected
    assert result.queries == 2 and result.unmatched_series == 1 and result.dropped == {"unknown_node": 1}
    src.close()


def test_netbox_preset_sees_emulator_faults(emulator: tuple[EmulatorServer, EmulatorControl],
                                            tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server, control = emulator
    caplog.set_level(logging.DEBUG)
    spec = {"preset": "netbox", "url": f"{server.url}/api/dcim/devices/", "retries": 1,
            "auth": {"tokenFile": str(token_file(tmp_path))}}
    src = CmdbSource("netbox", parse_config(spec, base_dir=tmp_path), sleep=lambda s: None)

    control.set_fault("cmdb", nan=True)
    result = src.fetch(NODES)  # a partial result: still a success for the circuit breaker
    assert result.dropped == {"nan": 3, "unknown_node": 1}
    assert {s.metric for s in samples_of(result)} == {"maintenance"}

    control.set_fault("cmdb", malformed=True)
    malformed = src.poll(NODES)
    assert malformed is not None and malformed.dropped == {"malformed": 1}

    control.set_fault("cmdb", bad_auth=True)
    result = src.poll(NODES)
    assert result is not None
    assert result.errors["hourly_cost"].startswith(f"GET {server.url}/api/dcim/devices/?limit=1000: HTTP 401")

    control.set_fault("cmdb", status=503)
    with pytest.raises(SourceError, match=r"HTTP 503 \(2 attempts\)"):
        src.fetch(NODES)
    assert src.poll(NODES) is None and "HTTP 503 (2 attempts)" in src.health.last_error
    assert src.health.breaker is not None and src.health.breaker.state == "open"  # three failed refreshes in a row
    assert src.poll(NODES) is None and src.health.errors_by_reason["circuit_open"] == 1
    assert TOKEN not in caplog.text and TOKEN not in json.dumps(src.health.as_dict())


def test_opencost_assets_preset_against_the_emulator(emulator: tuple[EmulatorServer, EmulatorControl]) -> None:
    server, control = emulator
    src = CmdbSource("opencost", parse_config({"preset": "opencost_assets",
                                               "url": f"{server.url}/opencost/model/assets"}, base_dir=Path(".")))
    result = src.fetch(NODES)
    assert values(result) == pytest.approx(
        {("node_hourly_cost", n): control.values(n)["hourly_cost"] for n in ("n1", "n2", "n3")})
    src.close()


# -- retries, circuit breaker ----------------------------------------------------------------------


def test_5xx_is_retried_with_backoff_then_succeeds() -> None:
    replies = iter([httpx.Response(500), httpx.Response(502), httpx.Response(200, json=[{"name": "n1", "v": 7}])])
    recorder = Recorder(lambda r: next(replies))
    sleeps: list[float] = []
    src = make(recorder, sleeps=sleeps, nodeKey="name", fields={"v": "v"})
    assert values(src.fetch(NODES)) == {("v", "n1"): 7.0}
    assert len(recorder.requests) == 3
    assert len(sleeps) == 2 and all(0 < s <= 2.25 for s in sleeps)


def test_timeouts_are_retried_a_bounded_number_of_times_then_the_source_is_down() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    recorder = Recorder(hang)
    src = make(recorder, nodeKey="name", fields={"v": "v"}, retries=3)
    assert src.poll(NODES) is None
    assert len(recorder.requests) == 4
    assert "ReadTimeout" in src.health.last_error and "4 attempts" in src.health.last_error
    assert src.health.consecutive_failures == 1 and src.health.errors_by_reason == {"Unreachable": 1}


def test_4xx_is_not_retried() -> None:
    recorder = Recorder(lambda r: httpx.Response(404, json={"detail": "Not found."}))
    result = make(recorder, nodeKey="name", fields={"v": "v"}).fetch(NODES)
    assert len(recorder.requests) == 1
    assert result.errors == {"v": 'GET https://cmdb.test/api/items: HTTP 404: {"detail":"Not found."}'}


def test_redirects_are_not_followed() -> None:
    recorder = Recorder(lambda r: httpx.Response(301, headers={"Location": "https://elsewhere.test/api/items"}))
    result = make(recorder, nodeKey="name", fields={"v": "v"}).fetch(NODES)
    assert len(recorder.requests) == 1 and "redirect to https://elsewhere.test/api/items" in result.errors["v"]


def test_circuit_opens_after_three_failed_refreshes_and_closes_after_a_good_probe() -> None:
    clock = Clock()
    healthy = {"ok": False}

    def handler(request: httpx.Request) -> httpx.Response:
        if healthy["ok"]:
            return httpx.Response(200, json=[{"name": "n1", "v": 1}])
        return httpx.Response(503)

    recorder = Recorder(handler)
    src = make(recorder, clock=clock, nodeKey="name", fields={"v": "v"}, retries=0)
    for _ in range(3):
        assert src.poll(NODES) is None
    breaker = src.health.breaker
    assert breaker is not None and breaker.state == "open"
    assert breaker.reopens_at == T_FETCH + 30  # in wall time, for /sources
    assert src.next_delay() == pytest.approx(30)  # the refresh loop waits for the cool-down
    assert src.health.as_dict(now=T_FETCH + 10)["breaker"]["reopens_in"] == 20
    assert src.poll(NODES) is None
    assert len(recorder.requests) == 3  # no request while open

    clock.t += 30  # cool-down over: one probe, which fails, so it re-opens for twice as long
    assert src.poll(NODES) is None
    assert src.health.breaker == BreakerStatus(state="open", consecutive_failures=4, cool_down=60.0, opened=2,
                                               reopens_at=T_FETCH + 60)
    clock.t += 59
    assert src.poll(NODES) is None
    assert len(recorder.requests) == 4

    clock.t += 1
    healthy["ok"] = True
    polled = src.poll(NODES)
    assert polled is not None and values(polled) == {("v", "n1"): 1.0}
    circuit = src.health.as_dict()["breaker"]
    assert circuit["state"] == "closed" and circuit["cool_down"] == 30.0 and circuit["opened"] == 2
    assert circuit["reopens_at"] is None
    assert src.health.consecutive_failures == 0 and src.health.up


def test_breaker_cool_down_doubles_up_to_the_maximum() -> None:
    clock = Clock(0.0)
    breaker = CircuitBreaker(failure_threshold=1, cool_down=30, max_cool_down=100, clock=clock)
    breaker.record_failure()
    cool_downs = []
    for _ in range(4):
        clock.t += 1000
        assert breaker.allow() and breaker.state == "half_open"
        breaker.record_failure()
        cool_downs.append(breaker.status(0.0).cool_down)
    assert cool_downs == [60, 100, 100, 100]


# -- secrets ---------------------------------------------------------------------------------------


def test_the_token_never_reaches_errors_logs_health_or_reprs(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    def echo(request: httpx.Request) -> httpx.Response:
        header = request.headers["Authorization"]
        return httpx.Response(401, json={"detail": f"Invalid token: {header}", "raw": TOKEN})

    src = make(echo, tmp_path, nodeKey="name", fields={"v": "v"}, auth={"tokenFile": str(token_file(tmp_path))})
    result = src.fetch(NODES)

    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"failed with Authorization: Bearer {TOKEN}", request=request)

    down = make(boom, tmp_path, nodeKey="name", fields={"v": "v"}, auth={"tokenFile": str(token_file(tmp_path))},
                retries=0)
    with pytest.raises(SourceError) as info:
        down.fetch(NODES)
    src.poll(NODES)
    down.poll(NODES)
    texts = [result.errors["v"], str(info.value), repr(info.value), caplog.text, json.dumps(src.health.as_dict()),
             json.dumps(down.health.as_dict()), repr(src), repr(src.config)]
    assert "<redacted>" in result.errors["v"]
    for text in texts:
        assert TOKEN not in text


def test_basic_auth_from_a_password_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("pa55-w0rd-long-enough")
    recorder = Recorder(lambda r: httpx.Response(200, json=[]))
    src = make(recorder, tmp_path, nodeKey="name", fields={"v": "v"},
               auth={"basicAuth": {"username": "sched", "passwordFile": "pw"}})
    src.fetch(NODES)
    assert recorder.requests[0].headers["Authorization"] == "Basic c2NoZWQ6cGE1NS13MHJkLWxvbmctZW5vdWdo"


def test_a_rotated_token_file_is_picked_up(tmp_path: Path) -> None:
    clock = Clock(0.0)
    path = tmp_path / "token"
    path.write_text("first-token")
    secret = SecretFile(path, max_age=60, clock=clock)
    credentials = Credentials(kind="token", scheme="Bearer", token=secret)
    path.write_text("second-token")
    assert credentials.authorization() == "Bearer first-token"
    clock.t = 60
    assert credentials.authorization() == "Bearer second-token"
    path.unlink()  # a failed re-read keeps the last good value
    clock.t = 120
    assert credentials.authorization() == "Bearer second-token"
    assert "second-token" not in repr(secret) and "second-token" not in repr(credentials)


# -- config ----------------------------------------------------------------------------------------


def test_netbox_preset_defaults_and_overrides(tmp_path: Path) -> None:
    config = parse_config({"preset": "netbox", "url": "https://netbox.test/api/dcim/devices/",
                           "auth": {"tokenFile": str(token_file(tmp_path))},
                           "fields": {"gpu_cost": "custom_fields.gpu_hourly_cost"},
                           "pagination": {"pageSize": 1000}}, base_dir=tmp_path)
    assert set(config.fields) == {"hourly_cost", "maintenance", "gpu_cost"}
    assert (config.pagination.type, config.pagination.page_size, config.pagination.limit_param) == ("next", 1000,
                                                                                                     "limit")
    assert config.credentials is not None and config.credentials.scheme == "Token"
    assert (config.interval, config.timeout, config.retries, config.max_pages) == (60.0, 2.0, 3, 100)
    assert (config.breaker.failure_threshold, config.breaker.cool_down, config.breaker.max_cool_down) == \
        (3, 30.0, 300.0)


@pytest.mark.parametrize(("spec", "field"), [
    ({"nodeKey": "name", "fields": {"v": "v"}}, "url"),
    ({"url": "https://c.test", "fields": {"v": "v"}}, "nodeKey"),
    ({"url": "https://c.test", "nodeKey": "name"}, "fields"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {}}, "fields"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": {"path": "v", "scale": -1}}}, "fields.v.scale"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": {"paht": "v"}}}, "fields.v.paht"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "pagination": {"type": "cursor"}},
     "pagination.type"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "itemsMode": "dict"}, "itemsMode"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "timeout": 3}, "timeout"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "retries": 10}, "retries"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "maxPages": 0}, "maxPages"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "tls": {"insecure": True}}, "tls.insecure"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}, "verify": False}, "verify"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"},
      "auth": {"tokenFile": "/nonexistent", "scheme": "Token"}}, "auth.tokenFile"),
    ({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"},
      "circuitBreaker": {"coolDown": "5m", "maxCoolDown": "1m"}}, "circuitBreaker.maxCoolDown"),
    ({"preset": "servicenow", "url": "https://c.test"}, "preset"),
    ({"preset": "netbox", "url": "https://c.test", "fields": ["hourly_cost"]}, "fields"),
])
def test_config_errors_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(spec, base_dir=Path("."))
    assert info.value.field == field


def test_a_private_ca_is_loaded_for_https_and_refused_for_http(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path / "pki")
    spec = {"url": "https://cmdb.test/api", "nodeKey": "name", "fields": {"v": "v"}, "tls": {"caFile": "pki/ca.crt"}}
    assert pki.ca_cert == tmp_path / "pki" / "ca.crt"
    config = parse_config(spec, base_dir=tmp_path)
    assert config.ca_file == pki.ca_cert
    CmdbSource("cmdb", config).close()  # builds a verifying SSL context from the file
    with pytest.raises(ConfigError) as info:
        parse_config({**spec, "url": "http://cmdb.test/api"}, base_dir=tmp_path)
    assert info.value.field == "tls.caFile"
    (tmp_path / "not-a-ca.pem").write_text("hello")
    with pytest.raises(ConfigError) as info:
        parse_config({**spec, "tls": {"caFile": "not-a-ca.pem"}}, base_dir=tmp_path)
    assert info.value.field == "tls.caFile" and "no usable PEM" in info.value.message


def test_auth_scheme_must_be_token_or_bearer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"},
                      "auth": {"tokenFile": str(token_file(tmp_path)), "scheme": "Basic"}}, base_dir=tmp_path)
    assert info.value.field == "auth.scheme"
