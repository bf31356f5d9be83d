"""The bridge from the `kubernetes` package's loaders to the httpx client: exec credentials (token and client
certificate), throttled refresh under a lock, 401 retry once, merged KUBECONFIG, tls-server-name (SNI),
proxy-url, in-cluster rotation, and 429 Retry-After on writes.

Exec plugins are replaced by a fake ExecProvider (unit tests start no processes); tests/e2e/test_kubeconfig.py
runs a real plugin against the dev API server."""

from __future__ import annotations

import base64
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes.client import Configuration
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from adapters.kubernetes.client import Fenced, KubeClient, WriteFence
from adapters.kubernetes.config import ContextRegistry, KubeConfig, KubeConfigError
from adapters.kubernetes.evictor import KubeEvictor
from adapters.kubernetes.kube_config_bridge import LibraryCredentials, load, load_kubeconfig
from adapters.kubernetes.tokens import StaticToken
from devcluster.certs import ClusterPKI, generate_pki
from metrics_sched.ports import ApiError

pytestmark = pytest.mark.unit

EXEC_API = "client.authentication.k8s.io/v1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPKI:
    return generate_pki(tmp_path_factory.mktemp("pki"))


class FakeExec:
    """Stands in for kubernetes.config.exec_provider.ExecProvider: `statuses` makes each run's status."""

    calls = 0
    status: Callable[[int], dict[str, Any]] = staticmethod(lambda n: {"token": f"token-{n}"})

    def __init__(self, exec_config: Any, cwd: Any, cluster: Any = None) -> None:
        self.command = exec_config["command"]

    def run(self, previous_response: Any = None) -> dict[str, Any]:
        FakeExec.calls += 1
        return FakeExec.status(FakeExec.calls)


@pytest.fixture
def fake_exec(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeExec]]:
    FakeExec.calls = 0
    FakeExec.status = staticmethod(lambda n: {"token": f"token-{n}"})
    monkeypatch.setattr(kube_config, "ExecProvider", FakeExec)
    yield FakeExec


def kubeconfig_doc(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "ctx",
            "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Clocks:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = datetime.now(UTC)

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)


def exec_credentials(tmp_path: Path, clocks: Clocks, contexts: ContextRegistry | None = None,
                     ) -> tuple[LibraryCredentials, Configuration]:
    """LibraryCredentials over the library's real KubeConfigLoader, with test clocks."""
    doc = kubeconfig_doc({"server": "https://kube.test"}, {"exec": {"apiVersion": EXEC_API, "command": "plugin"}})
    return with_clocks(library_loaders(write(tmp_path / "kc", doc)), clocks, contexts or ContextRegistry())


def library_loaders(path: Path) -> Callable[[], Any]:
    """Makes fresh library KubeConfigLoaders over the kubeconfig at `path` (what the bridge re-creates on refresh)."""
    node = kube_config.KubeConfigMerger(str(path)).config  # type: ignore[no-untyped-call]

    def new_loader() -> Any:
        return kube_config.KubeConfigLoader(config_dict=node, config_base_path=None)  # type: ignore[no-untyped-call]

    return new_loader


def recording() -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport answering 200 {} to every request, and the requests it saw."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    return httpx.MockTransport(handler), seen


def with_clocks(new_loader: Callable[[], Any], clocks: Clocks, contexts: ContextRegistry,
                ) -> tuple[LibraryCredentials, Configuration]:
    configuration = Configuration(proxy="", no_proxy="")
    loader = new_loader()
    loader.load_and_set(configuration)
    return LibraryCredentials(configuration, loader, new_loader, "test", contexts, clock=lambda: clocks.mono,
                              wall_clock=lambda: clocks.wall), configuration


def test_an_exec_token_is_reused_until_it_expires_then_refreshed_once(tmp_path: Path,
                                                                      fake_exec: type[FakeExec]) -> None:
    # Within the library's 5-minute skew: every hook call would re-run the plugin; only the bridge throttles.
    fake_exec.status = staticmethod(lambda n: {
        "token": f"token-{n}", "expirationTimestamp": rfc3339(datetime.now(UTC) + timedelta(seconds=30))})
    clocks = Clocks()
    credentials, _ = exec_credentials(tmp_path, clocks)
    assert fake_exec.calls == 1 and credentials.token() == "token-1"
    for _ in range(20):
        clocks.advance(1.0)
        assert credentials.token() == "token-1"  # 20 s < 30 s expiry: the hook is not even consulted
    assert fake_exec.calls == 1
    clocks.advance(11.0)  # past the expiry
    assert credentials.token() == "token-2"
    for _ in range(100):
        assert credentials.token() == "token-2"  # throttled: at most one refresh a second
    assert fake_exec.calls == 2

    # Concurrent requests on an expired credential start one plugin, not one each.
    clocks.advance(31.0)
    barrier = threading.Barrier(8)
    seen: list[str] = []

    def request() -> None:
        barrier.wait()
        seen.append(credentials.token())

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fake_exec.calls == 3 and seen == ["token-3"] * 8


def test_a_token_without_expiry_is_rechecked_through_the_hook_every_minute(tmp_path: Path,
                                                                          fake_exec: type[FakeExec]) -> None:
    clocks = Clocks()
    credentials, configuration = exec_credentials(tmp_path, clocks)
    hook_calls: list[int] = []
    library_hook = configuration.refresh_api_key_hook
    assert library_hook is not None

    def counting_hook(conf: Configuration) -> None:
        hook_calls.append(1)
        library_hook(conf)

    configuration.refresh_api_key_hook = counting_hook
    clocks.advance(59.0)
    credentials.token()
    assert hook_calls == []
    clocks.advance(1.0)
    assert credentials.token() == "token-1"  # the library keeps an unexpired token
    assert hook_calls == [1] and fake_exec.calls == 1


def test_a_401_refreshes_once_and_retries_once(tmp_path: Path, fake_exec: type[FakeExec]) -> None:
    clocks = Clocks()
    credentials, _ = exec_credentials(tmp_path, clocks)
    valid = {"Bearer token-2"}
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization", ""))
        return httpx.Response(200, json={}) if seen[-1] in valid else httpx.Response(401, json={})

    config = KubeConfig(server="https://kube.test", token=credentials)
    with KubeClient(config, transport=httpx.MockTransport(handler)) as client:
        clocks.advance(1.0)
        assert client.request("GET", "/api/v1/nodes") == {}
        assert seen == ["Bearer token-1", "Bearer token-2"] and fake_exec.calls == 2
        # A credential the server keeps refusing: one refresh, one retry, then the 401 is the caller's.
        valid.clear()
        seen.clear()
        clocks.advance(1.0)
        with pytest.raises(ApiError) as info:
            client.request("GET", "/api/v1/nodes")
        assert info.value.status == 401 and seen == ["Bearer token-2", "Bearer token-3"]
        # A 401 right after a refresh does not start another plugin run.
        seen.clear()
        with pytest.raises(ApiError):
            client.request("GET", "/api/v1/nodes")
        assert seen == ["Bearer token-3"] and fake_exec.calls == 3


def test_an_exec_client_certificate_is_loaded_and_replaced_after_expiry(
    tmp_path: Path, pki: ClusterPKI, fake_exec: type[FakeExec], tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = generate_pki(tmp_path_factory.mktemp("other"))
    pairs = [pki, other]
    fake_exec.status = staticmethod(lambda n: {
        "clientCertificateData": pairs[(n - 1) % 2].serving_cert.read_text(),
        "clientKeyData": pairs[(n - 1) % 2].serving_key.read_text(),
        "expirationTimestamp": rfc3339(datetime.now(UTC) + timedelta(seconds=30))})
    cluster = {"server": "https://kube.test", "certificate-authority": str(pki.ca_cert)}
    config = load_kubeconfig(write(tmp_path / "kc", kubeconfig_doc(
        cluster, {"exec": {"apiVersion": EXEC_API, "command": "plugin"}})))
    assert isinstance(config.token, LibraryCredentials) and config.token.token() == ""
    first = config.client_certificate
    assert first is not None and first.cert.path is not None
    assert first.cert.path.read_text() == pki.serving_cert.read_text()
    config.ssl_context()  # loads the plugin's certificate and key
    transport, seen = recording()
    with KubeClient(config, transport=transport) as client:
        client.request("GET", "/api/v1/nodes")
    assert "Authorization" not in seen[0].headers

    reloaded: list[Path] = []

    class Spy(ContextRegistry):
        def reload(self, pair: Any, origin: str) -> None:
            reloaded.append(pair.cert.path)
            super().reload(pair, origin)

    # The same plugin through credentials with test clocks: past the expiry, the certificate is replaced.
    clocks = Clocks()
    credentials, _ = with_clocks(library_loaders(tmp_path / "kc"), clocks, Spy())
    before = credentials.client_certificate()
    assert before is not None and before.cert.path is not None and reloaded == []
    clocks.advance(31.0)
    pair = credentials.client_certificate()
    assert pair is not None and pair.cert.path is not None
    assert pair.cert.path.read_text() != before.cert.path.read_text()
    assert pair.cert.path.read_text() == pairs[(fake_exec.calls - 1) % 2].serving_cert.read_text()
    assert reloaded == [pair.cert.path]


def test_a_failing_exec_plugin_is_one_clear_line_and_not_logged(tmp_path: Path, fake_exec: type[FakeExec],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    def fail(n: int) -> dict[str, Any]:
        raise ConfigException("exec: process returned 1. token service\nunavailable")

    fake_exec.status = staticmethod(fail)
    path = write(tmp_path / "kc", kubeconfig_doc({"server": "https://kube.test"},
                                                 {"exec": {"apiVersion": EXEC_API, "command": "plugin"}}))
    with caplog.at_level(logging.ERROR), pytest.raises(KubeConfigError) as info:
        load_kubeconfig(path)
    assert str(info.value) == (f"kubeconfig {path} (context 'ctx'): exec: process returned 1. token service "
                               "unavailable")
    assert caplog.records == []


def test_kubeconfig_list_merges_files_and_resolves_paths_per_file(tmp_path: Path, pki: ClusterPKI) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "b" / "token").write_text("file-token\n")
    first = write(tmp_path / "a" / "config", {
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "team"}}]})
    second = write(tmp_path / "b" / "config", {
        "apiVersion": "v1", "kind": "Config", "current-context": "ignored-second",
        "users": [{"name": "u", "user": {"tokenFile": "token"}}]})
    config = load(None, environ={"KUBECONFIG": f"{first}:{tmp_path / 'absent'}:{second}"})
    assert config.server == "https://127.0.0.1:6443" and config.namespace == "team"
    assert config.ca is not None and config.ca.path == tmp_path / "a" / "ca.crt"
    assert config.token is not None and config.token.token() == "file-token"


def test_the_default_kubeconfig_is_home_dot_kube_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".kube").mkdir()
    write(tmp_path / ".kube" / "config", kubeconfig_doc({"server": "https://home.test"}, {"token": "t0ken-home"}))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load(None, environ={}).server == "https://home.test"
    monkeypatch.setenv("HOME", str(tmp_path / "nowhere"))
    with pytest.raises(KubeConfigError, match=r"not running in a cluster.*KUBECONFIG is not set"):
        load(None, environ={})


def test_tls_server_name_is_sent_as_sni_on_every_request(tmp_path: Path) -> None:
    config = load_kubeconfig(write(tmp_path / "kc", kubeconfig_doc(
        {"server": "https://127.0.0.1:6443", "tls-server-name": "kubernetes.default"}, {"token": "t0ken-value"})))
    assert config.tls_server_name == "kubernetes.default"
    transport, seen = recording()
    with KubeClient(config, transport=transport) as client:
        client.request("GET", "/api/v1/nodes")
        client.list("/api/v1/pods", {"limit": "1"})
    assert [r.extensions.get("sni_hostname") for r in seen] == ["kubernetes.default"] * 2
    # Without a token the auth flow still sets SNI (a client-certificate user).
    auth = KubeConfig(server="https://k", tls_server_name="kubernetes.default").auth()
    assert auth is not None


def test_proxy_url_routes_requests_through_the_proxy(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    lines: list[str] = []

    def proxy() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            lines.append(data.split(b"\r\n")[0].decode())
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    thread = threading.Thread(target=proxy, daemon=True)
    thread.start()
    config = load_kubeconfig(write(tmp_path / "kc", kubeconfig_doc(
        {"server": "https://kube.test:6443", "proxy-url": f"http://127.0.0.1:{port}"}, {"token": "t0ken-value"})))
    assert config.proxy == f"http://127.0.0.1:{port}"
    assert config.http_options()["proxy"] == config.proxy
    with KubeClient(config) as client, pytest.raises(ApiError):
        client.request("GET", "/api/v1/nodes")
    thread.join(timeout=10)
    listener.close()
    assert lines == ["CONNECT kube.test:6443 HTTP/1.1"]


def test_insecure_skip_tls_verify_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", kubeconfig_doc({"server": "https://k", "insecure-skip-tls-verify": True},
                                                 {"token": "t0ken-value"}))
    with pytest.raises(KubeConfigError, match="insecure-skip-tls-verify") as info:
        load_kubeconfig(path)
    assert "\n" not in str(info.value) and "t0ken-value" not in str(info.value)


def test_an_oidc_id_token_is_used_as_the_bearer_token(tmp_path: Path) -> None:
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(yaml.safe_dump(doc).encode()).decode().rstrip("=")

    import json

    claims = base64.urlsafe_b64encode(json.dumps({"exp": int((datetime.now(UTC) + timedelta(hours=1)).timestamp())})
                                      .encode()).decode().rstrip("=")
    id_token = f"{part({'alg': 'none'})}.{claims}.c2ln"
    config = load_kubeconfig(write(tmp_path / "kc", kubeconfig_doc(
        {"server": "https://k"}, {"auth-provider": {"name": "oidc", "config": {
            "id-token": id_token, "client-id": "c", "idp-issuer-url": "https://idp.test"}}})))
    assert isinstance(config.token, LibraryCredentials) and config.token.token() == id_token
    assert id_token not in repr(config)


def test_in_cluster_token_rotation_reaches_requests_after_a_401(tmp_path: Path, pki: ClusterPKI) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "token").write_text("sa-token-1\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}

    def new_loader() -> Any:
        return InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(tmp_path / "token"), cert_filename=str(tmp_path / "ca.crt"), environ=env)

    clocks = Clocks()
    credentials, _ = with_clocks(new_loader, clocks, ContextRegistry())
    assert credentials.token() == "sa-token-1"
    (tmp_path / "token").write_text("sa-token-2\n")  # the kubelet rotates the projected token
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return httpx.Response(200, json={}) if seen[-1] == "Bearer sa-token-2" else httpx.Response(401, json={})

    clocks.advance(2.0)
    with KubeClient(KubeConfig(server="https://k", token=credentials), transport=httpx.MockTransport(handler)) as c:
        c.request("GET", "/api/v1/nodes")
    assert seen == ["Bearer sa-token-1", "Bearer sa-token-2"]
    # A token file that disappears mid-rotation keeps the previous token.
    (tmp_path / "token").unlink()
    clocks.advance(2.0)
    assert credentials.refresh() is False and credentials.token() == "sa-token-2"


# -- 429 Retry-After on writes ------------------------------------------------------------------------------


def throttling(responses: list[httpx.Response]) -> tuple[Callable[[httpx.Request], httpx.Response], list[str]]:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        return responses.pop(0) if responses else httpx.Response(201, json={"kind": "Binding"})

    return handler, seen


def too_many(retry_after: str | None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(429, headers=headers, json={"kind": "Status", "reason": "TooManyRequests",
                                                       "message": "too many requests"})


def client_for(handler: Callable[[httpx.Request], httpx.Response], sleeps: list[float], **kwargs: Any) -> KubeClient:
    return KubeClient(KubeConfig(server="https://k", token=StaticToken("t0ken-value")),
                      transport=httpx.MockTransport(handler), sleep=sleeps.append, **kwargs)


def test_a_write_refused_with_429_waits_retry_after_and_is_sent_again() -> None:
    handler, seen = throttling([too_many("2"), too_many("100")])
    sleeps: list[float] = []
    with client_for(handler, sleeps) as client:
        assert client.send("POST", "/api/v1/namespaces/ns/pods/p/binding", {"kind": "Binding"}) == 201
    assert seen == ["POST"] * 3 and sleeps == [2.0, 10.0]  # the second wait capped
    assert client.retried_after_429 == 2


@pytest.mark.parametrize(("method", "responses", "rate_limited", "sent"), [
    ("POST", [too_many(None)], True, 1),           # no Retry-After: the server did not say when
    ("GET", [too_many("1")], True, 1),             # reads are retried by their callers (reflector, lister)
    ("PUT", [too_many("1")], False, 1),            # a lease renewal keeps its own cadence
    ("PATCH", [too_many("1")] * 4, True, 4),       # bounded: 3 retries, then the 429 is the caller's
])
def test_429s_that_are_not_retried(method: str, responses: list[httpx.Response], rate_limited: bool,
                                   sent: int) -> None:
    handler, seen = throttling(list(responses))
    sleeps: list[float] = []
    with client_for(handler, sleeps) as client, pytest.raises(ApiError) as info:
        client.send(method, "/x", {} if method != "GET" else None, rate_limited=rate_limited)
    assert info.value.status == 429 and len(seen) == sent and len(sleeps) == sent - 1


def test_an_eviction_refused_by_a_disruption_budget_is_the_callers_at_once() -> None:
    handler, seen = throttling([too_many("10")])  # the API server's answer when a PDB forbids it now
    sleeps: list[float] = []
    with client_for(handler, sleeps) as client, pytest.raises(ApiError) as info:
        KubeEvictor(client).evict("ns", "p", "uid-1")
    assert info.value.status == 429 and seen == ["POST"] and sleeps == []


def test_a_write_fence_closing_during_the_retry_wait_stops_the_retry() -> None:
    handler, seen = throttling([too_many("1")])
    is_open = [True]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        is_open[0] = False  # leadership is going while the bind waits

    with KubeClient(KubeConfig(server="https://k", token=StaticToken("t0ken-value")),
                    transport=httpx.MockTransport(handler), sleep=sleep,
                    write_fence=WriteFence(lambda: is_open[0], 5.0)) as client, pytest.raises(Fenced):
        client.send("POST", "/api/v1/namespaces/ns/pods/p/binding", {})
    assert seen == ["POST"] and sleeps == [1.0]
