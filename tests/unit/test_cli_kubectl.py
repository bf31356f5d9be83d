"""`kubectl metrics-sched`: the plugin entry point's defaults, the way through the API server's pod proxy (the
scheduler's token in its own header), `-o json|yaml`, and the `decisions` listing."""

from __future__ import annotations

import argparse
import json
from collections.abc import Generator
from typing import Any

import httpx
import pytest
import yaml

from metrics_sched.app import cli
from metrics_sched.app.cli.decisions_cmd import rows
from metrics_sched.app.cli.output import print_as
from metrics_sched.app.errors import UserError
from metrics_sched.app.leader_target import LeaderTarget
from metrics_sched.app.scheduler_client import Endpoint, ThroughTheApiServer, proxy_url

pytestmark = pytest.mark.unit

PLACED = {"id": 7, "time": 1_700_000_000.0, "kind": "placement", "pod": "team/a", "result": "scheduled",
          "node": "gpu-1", "message": ""}
REFUSED = {"id": 8, "time": 1_700_000_001.0, "kind": "placement", "pod": "team/b", "result": "unschedulable",
           "node": None, "message": "0/3 nodes are available:\n 3 Insufficient cpu."}
EVICTED = {"id": 9, "time": 1_700_000_002.0, "kind": "eviction", "pod": "team/c", "verdict": "evicted",
           "node": "gpu-2", "rule": "hot", "reason": "gpu_temperature_max 91 > 85 for 300s"}


def test_the_kubectl_plugin_parses_as_kubectl_metrics_sched_with_a_default_service() -> None:
    parser = cli.build_parser((), prog=cli.KUBECTL_PROG, default_service="ops/metrics-sched")
    args = parser.parse_args(["explain", "team/a", "-o", "yaml"])
    assert (args.default_service, args.service, args.url, args.output, args.direct) == (
        "ops/metrics-sched", None, None, "yaml", False)
    assert parser.prog == "kubectl metrics-sched"
    # The plain command has no default Service: its default is the URL, as before.
    assert cli.build_parser(()).parse_args(["sources"]).default_service is None


def test_the_kubectl_plugin_asks_the_default_service_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[argparse.Namespace] = []

    def connect(args: argparse.Namespace) -> Endpoint:
        seen.append(args)
        raise UserError("stop here")

    monkeypatch.setattr("metrics_sched.app.cli.explain_cmd.connect", connect)
    monkeypatch.setattr("sys.argv", ["kubectl-metrics_sched", "sources"])  # what kubectl runs
    monkeypatch.setenv("METRICS_SCHED_SERVICE", "ops/ms")
    assert cli.kubectl_main() == 2
    assert "kubectl metrics-sched sources: error: stop here" in capsys.readouterr().err
    monkeypatch.delenv("METRICS_SCHED_SERVICE")
    assert cli.kubectl_main() == 2
    assert [a.default_service for a in seen] == ["ops/ms", cli.DEFAULT_SERVICE]


def test_the_scheduler_client_takes_the_default_service_only_without_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    from metrics_sched.app import scheduler_client

    taken: list[Any] = []
    monkeypatch.setattr(scheduler_client, "_authenticated", lambda args, url, service: taken.append(service))
    monkeypatch.delenv("METRICS_SCHED_URL", raising=False)
    scheduler_client.connect(argparse.Namespace(url=None, service=None, default_service="ops/ms"))
    scheduler_client.connect(argparse.Namespace(url=None, service="a/b", default_service="ops/ms"))
    monkeypatch.setenv("METRICS_SCHED_URL", "https://10.1.2.3:10259")
    scheduler_client.connect(argparse.Namespace(url=None, service=None, default_service="ops/ms"))
    assert taken == [("ops", "ms"), ("a", "b"), None]


def test_the_pod_proxy_url_names_the_leader_pod_and_its_port() -> None:
    target = LeaderTarget(url="https://10.0.0.5:10259", server_name="ms.ops.svc", pod="ms-7f9-abc", holder="h",
                          port=10259)
    assert proxy_url("https://api.example:6443/", "ops", target) == \
        "https://api.example:6443/api/v1/namespaces/ops/pods/https:ms-7f9-abc:10259/proxy"


class FakeApiAuth(httpx.Auth):
    """The kubeconfig's auth for the API server: its own Authorization, and a retry after a 401."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = "Bearer api-credential"
        response = yield request
        if response.status_code == 401:
            request.headers["Authorization"] = "Bearer refreshed"
            yield request


def test_through_the_api_server_the_scheduler_token_rides_in_its_own_header() -> None:
    seen: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.headers))
        return httpx.Response(401 if len(seen) == 1 else 200, json={})

    auth = ThroughTheApiServer(FakeApiAuth(), "reader-token")
    with httpx.Client(transport=httpx.MockTransport(handler), auth=auth) as http:
        assert http.get("https://api.example/api/v1/namespaces/ops/pods/https:p:1/proxy/sources").status_code == 200
    assert [(h["authorization"], h["x-metrics-sched-authorization"]) for h in seen] == [
        ("Bearer api-credential", "Bearer reader-token"), ("Bearer refreshed", "Bearer reader-token")]
    assert "reader-token" not in repr(auth)
    # A client-certificate user: nothing for the API server in the header, the token for the scheduler still.
    seen.clear()
    with httpx.Client(transport=httpx.MockTransport(handler), auth=ThroughTheApiServer(None, "t")) as http:
        http.get("https://api.example/x")
    assert "authorization" not in seen[0] and seen[0]["x-metrics-sched-authorization"] == "Bearer t"


def test_output_json_and_yaml_are_the_records_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    body = {"count": 2, "decisions": [REFUSED, PLACED]}
    print_as("json", body)
    assert json.loads(capsys.readouterr().out) == body
    print_as("yaml", body)
    assert yaml.safe_load(capsys.readouterr().out) == body
    with pytest.raises(ValueError):
        print_as("text", body)


def test_decisions_rows_one_line_each_with_why() -> None:
    assert rows([EVICTED, REFUSED, PLACED]) == [
        ["9", rows([EVICTED])[0][1], "eviction", "team/c", "evicted", "gpu-2",
         "rule hot: gpu_temperature_max 91 > 85 for 300s"],
        ["8", rows([REFUSED])[0][1], "placement", "team/b", "unschedulable", "-",
         "0/3 nodes are available: 3 Insufficient cpu."],
        ["7", rows([PLACED])[0][1], "placement", "team/a", "scheduled", "gpu-1", ""],
    ]
