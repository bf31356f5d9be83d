"""Every user error of `metrics-sched` is one line on stderr and exit 2, never a traceback; `--version`; and the
Lease namespace default (the pod's own namespace in a cluster, kube-system outside one)."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.kubernetes import KubeConfig, StaticToken
from devcluster.certs import ClusterPKI, generate_pki
from metrics_sched import __version__
from metrics_sched.app import cli
from metrics_sched.app.api_probe import check_api_server
from metrics_sched.app.errors import UserError
from metrics_sched.app.lease_namespace import default_lease_namespace, resolve_lease_namespace
from metrics_sched.config import ConfigError
from metrics_sched.config.loader import parse_config
from metrics_sched.config.model import LeaderElectionConfig
from metrics_sched.plugins import in_tree_registry
from tests.local_http import QuietHandler, serving

pytestmark = pytest.mark.unit

CATALOG = in_tree_registry(third_party=False).catalog()
CONFIG = {"apiVersion": "metrics-sched.io/v1alpha1", "kind": "MetricsSchedulerConfiguration",
          "profiles": [{"schedulerName": "t"}], "server": {"bindAddress": "127.0.0.1"}}


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    # `run` installs its own root handler (on the captured stderr): put the test runner's back afterwards.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def kubeconfig(path: Path, server: str = "https://127.0.0.1:1", **user: Any) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
           "clusters": [{"name": "c", "cluster": {"server": server}}],
           "users": [{"name": "u", "user": user or {"token": "t0ken"}}]}
    path.write_text(yaml.safe_dump(doc))
    return path


def closed_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there (connection refused)
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def one_line_error(capsys: pytest.CaptureFixture[str], code: object, expected: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert expected in lines[0], err
    return lines[0]


def run_main(argv: list[str]) -> object:
    """main()'s exit code, whether it returns it or argparse raises SystemExit."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"metrics-sched {version('metrics-sched')}"
    assert __version__ == version("metrics-sched")


@pytest.mark.parametrize(("argv", "expected"), [
    ([], "the following arguments are required: COMMAND"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    (["run", "--config", "c.yaml", "--port", "abc"], "argument --port/--secure-port: 'abc' is not a port number"),
    (["run", "--config", "c.yaml", "--port", "70000"], "argument --port/--secure-port: must be 0..65535, got 70000"),
    (["run", "--config", "c.yaml", "--log-level", "loud"], "argument --log-level: 'loud' is not one of"),
    (["run", "--config", "c.yaml", "--startup-timeout", "-1"], "argument --startup-timeout: must be a finite"),
    (["run"], "the following arguments are required: --config"),
    (["rebalance", "--config", "c.yaml", "--log-level", "x"], "argument --log-level: 'x' is not one of"),
])
def test_a_bad_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                           expected: str) -> None:
    line = one_line_error(capsys, run_main(argv), expected)
    assert line.startswith("metrics-sched") and line.endswith("--help)")  # the usage block is --help's job


def test_a_missing_config_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one_line_error(capsys, run_main(["run", "--config", str(tmp_path / "absent.yaml")]),
                   "cannot read")


@pytest.mark.parametrize(("write", "expected"), [
    (lambda p: p, "cannot read kubeconfig"),  # absent
    (lambda p: (p.write_text(": : [ garbage"), p)[1], "is not valid YAML"),
    (lambda p: (p.write_text("contexts: 5\ncurrent-context: c\n"), p)[1], "contexts is not a list"),
    (lambda p: (p.write_text("- a list\n"), p)[1], "is not a mapping"),
    (lambda p: kubeconfig(p, exec={"command": "/absent-plugin", "apiVersion": "client.authentication.k8s.io/v1"}),
     "/absent-plugin"),
    (lambda p: kubeconfig(p, server="http://127.0.0.1:1"), "is not https://"),
    (lambda p: kubeconfig(p, **{"client-certificate": "/absent.crt", "client-key": "/absent.key"}),
     "client-certificate file /absent.crt does not exist"),
    (lambda p: kubeconfig(p, tokenFile="/absent-token"), "absent-token"),
])
def test_an_unusable_kubeconfig_is_one_line(capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path,
                                            write: Any, expected: str) -> None:
    path = write(tmp_path / "kubeconfig")
    line = one_line_error(capsys, run_main(["run", "--config", str(config), "--kubeconfig", str(path)]), expected)
    assert line.startswith("metrics-sched run: error: ")
    assert "t0ken" not in line


def test_outside_a_cluster_without_a_kubeconfig_is_one_line(capsys: pytest.CaptureFixture[str], config: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    one_line_error(capsys, run_main(["run", "--config", str(config)]), "pass --kubeconfig FILE")


def test_an_unreachable_api_server_is_one_line_after_the_startup_timeout(
        capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    path = kubeconfig(tmp_path / "kubeconfig", server=server)
    code = run_main(["run", "--config", str(config), "--kubeconfig", str(path), "--startup-timeout", "0.3",
                     "--log-level", "error"])  # the "retrying" warning is a log line, not the error
    line = one_line_error(capsys, code, f"API server {server} (kubeconfig {path}")
    assert "not reachable within 0.3s" in line and "ConnectError" in line


def test_the_rebalance_command_fails_the_same_way(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    rules = [{"name": "load", "metric": "node_load_per_cpu", "above": 1.5}]
    path.write_text(yaml.safe_dump({**CONFIG, "rebalance": {"rules": rules}}))
    code = run_main(["rebalance", "--config", str(path), "--kubeconfig", str(tmp_path / "absent")])
    one_line_error(capsys, code, f"metrics-sched rebalance: error: cannot read kubeconfig {tmp_path / 'absent'}")


def test_explain_and_replay_fail_with_one_line(capsys: pytest.CaptureFixture[str], config: Path,
                                               tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    one_line_error(capsys, run_main(["explain", "ns/pod", "--url", url]), f"cannot read /decisions from {url}")
    one_line_error(capsys, run_main(["sources", "--url", url]), f"cannot read /sources from {url}")
    one_line_error(capsys, run_main(["replay", "--decisions", str(tmp_path / "absent.jsonl"), "--config",
                                     str(config)]), "cannot read")


KUBE = KubeConfig(server="https://api.example", token=StaticToken("t0ken"), origin="kubeconfig k (context 'c')")


def probe(*responses: httpx.Response | Exception, timeout: float = 5.0) -> list[httpx.Request]:
    seen: list[httpx.Request] = []
    answers = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    check_api_server(KUBE, timeout, retry_interval=0.01, transport=httpx.MockTransport(handler))
    return seen


def test_the_probe_lists_nodes_with_the_credentials() -> None:
    seen = probe(httpx.Response(200, json={"items": []}))
    assert [(r.url.path, r.url.params["limit"], r.headers["Authorization"]) for r in seen] == [
        ("/api/v1/nodes", "1", "Bearer t0ken")]


def test_the_probe_retries_an_api_server_that_is_starting() -> None:
    seen = probe(httpx.ConnectError("refused"), httpx.Response(503, json={"message": "starting"}),
                 httpx.Response(200, json={"items": []}))
    assert len(seen) == 3


@pytest.mark.parametrize(("answer", "expected"), [
    (httpx.Response(401, json={"message": "Unauthorized"}), "the credentials were rejected (401 Unauthorized)"),
    (httpx.Response(403, json={"message": 'nodes is forbidden: User "x" cannot list resource "nodes"'}),
     'forbidden to list nodes (403): nodes is forbidden: User "x" cannot list'),
])
def test_refused_credentials_fail_at_once(answer: httpx.Response, expected: str) -> None:
    with pytest.raises(UserError, match=r"API server https://api\.example \(kubeconfig k") as err:
        probe(answer, timeout=60)  # not retried: the test would take a minute
    assert expected in str(err.value) and "t0ken" not in str(err.value)


def test_a_tls_verification_failure_fails_at_once() -> None:
    failure = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    failure.__context__ = ssl.SSLCertVerificationError("certificate verify failed")
    with pytest.raises(UserError, match="TLS failed"):
        probe(failure, timeout=60)


# The Lease namespace: the pod's own in a cluster (where deploy/'s Role is), kube-system outside one.

def test_the_lease_namespace_is_unset_unless_configured() -> None:
    assert parse_config({}, CATALOG).leader_election.resource_namespace == ""
    given = parse_config({"leaderElection": {"resourceNamespace": " ops "}}, CATALOG)
    assert given.leader_election.resource_namespace == "ops"
    with pytest.raises(ConfigError, match=r"leaderElection\.resourceNamespace"):
        parse_config({"leaderElection": {"resourceNamespace": ""}}, CATALOG)


def test_the_default_lease_namespace_is_the_pods_own_in_a_cluster(tmp_path: Path) -> None:
    ns_file = tmp_path / "namespace"
    assert default_lease_namespace(environ={}, namespace_file=ns_file) == (
        "kube-system", "not in a cluster (no POD_NAMESPACE, no service account namespace file)")
    ns_file.write_text("metrics-sched\n")
    assert default_lease_namespace(environ={}, namespace_file=ns_file)[0] == "metrics-sched"
    # The downward API wins over the file, as in client-go.
    assert default_lease_namespace(environ={"POD_NAMESPACE": "ops"}, namespace_file=ns_file) == (
        "ops", "the pod's namespace (POD_NAMESPACE)")


def test_a_configured_lease_namespace_wins_and_the_choice_is_logged(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    ns_file = tmp_path / "namespace"
    ns_file.write_text("metrics-sched")
    caplog.set_level(logging.INFO, logger="metrics_sched.leader")
    configured = LeaderElectionConfig(resource_namespace="ops")
    assert resolve_lease_namespace(configured, environ={}, namespace_file=ns_file) is configured
    unset = parse_config({}, CATALOG).leader_election
    resolved = resolve_lease_namespace(unset, environ={}, namespace_file=ns_file)
    assert resolved == LeaderElectionConfig(resource_namespace="metrics-sched")
    assert [r.getMessage() for r in caplog.records] == [
        "lease ops/metrics-sched: namespace from leaderElection.resourceNamespace",
        f"lease metrics-sched/metrics-sched: leaderElection.resourceNamespace not set; using the pod's namespace "
        f"(service account, {ns_file})",
    ]


def test_a_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("metrics_sched.app.core.check_api_server", lambda *_, **__: None)  # no API server here
    path = kubeconfig(tmp_path / "kubeconfig")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = run_main(["run", "--config", str(config), "--kubeconfig", str(path), "--port", str(port),
                         "--log-level", "error"])
    one_line_error(capsys, code, f"cannot serve on 127.0.0.1:{port}: Address already in use")


class Unauthorized(QuietHandler):
    def do_GET(self) -> None:
        self.reply(401, b'{"kind":"Status","code":401,"message":"Unauthorized"}')


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, ClusterPKI]]:
    """An HTTPS server with the dev PKI's serving certificate that answers 401 to everything."""
    pki = generate_pki(tmp_path / "pki")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.serving_cert), str(pki.serving_key))
    with serving(Unauthorized, context) as url:
        yield url, pki


def test_an_unknown_ca_and_refused_credentials_fail_at_once_on_a_real_server(
        capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path,
        https_server: tuple[str, ClusterPKI]) -> None:
    server, pki = https_server
    argv = ["run", "--config", str(config), "--startup-timeout", "60", "--log-level", "error", "--kubeconfig"]
    # Without its CA the server's certificate is not trusted (the system store does not know the dev CA).
    line = one_line_error(capsys, run_main([*argv, str(kubeconfig(tmp_path / "no-ca", server=server))]),
                          "TLS failed")
    assert "CERTIFICATE_VERIFY_FAILED" in line
    with_ca = tmp_path / "with-ca"
    kubeconfig(with_ca, server=server)
    doc = yaml.safe_load(with_ca.read_text())
    doc["clusters"][0]["cluster"]["certificate-authority"] = str(pki.ca_cert)
    with_ca.write_text(yaml.safe_dump(doc))
    one_line_error(capsys, run_main([*argv, str(with_ca)]), "the credentials were rejected (401 Unauthorized)")
