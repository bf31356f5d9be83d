"""Property test (issue 44, "Bad input, tried systematically"): whatever a kubeconfig file holds, loading it
gives a KubeConfig or a one-line KubeConfigError, never another exception (the CLI turns KubeConfigError into
its exit-2 line; anything else would be a traceback). Exec plugins are faked: no process is started."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.config import kube_config

from adapters.kubernetes.config import KubeConfigError
from adapters.kubernetes.kube_config_bridge import load_kubeconfig

pytestmark = pytest.mark.unit


class FakeExec:
    """Stands in for kubernetes.config.exec_provider.ExecProvider (no process), answering a token."""

    def __init__(self, exec_config: Any, cwd: Any, cluster: Any = None) -> None:
        self.command = exec_config["command"]

    def run(self, previous_response: Any = None) -> dict[str, Any]:
        return {"token": "t0ken"}


LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10),
                   st.sampled_from(["https://127.0.0.1:6443", "http://x", "", "-", "ca.crt", "/nonexistent",
                                    "not base64!", base64.b64encode(b"junk").decode(), "2024-05-01T10:00:00Z"]))
WRONG = st.one_of(LEAVES, st.lists(LEAVES, max_size=2), st.dictionaries(st.text(max_size=4), LEAVES, max_size=2))


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(value, value, value, WRONG)


def optional_fields(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in fields.items()})


CLUSTER = optional_fields({
    "server": st.sampled_from(["https://127.0.0.1:6443", "https://[::1]:6443", "http://127.0.0.1", "https://"]),
    "certificate-authority-data": st.sampled_from([base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode(),
                                                   "%%%"]),
    "certificate-authority": st.sampled_from(["ca.crt", "/nonexistent/ca.crt"]),
    "insecure-skip-tls-verify": st.booleans(),
    "tls-server-name": st.text(max_size=8),
    "proxy-url": st.sampled_from(["http://proxy:3128", "socks5://p:1080", "::", "http://[::1"]),
})
USER = optional_fields({
    "token": st.text(max_size=8),
    "tokenFile": st.sampled_from(["token", "/nonexistent/token", ""]),
    "client-certificate-data": st.sampled_from(["Zm9v", "%%%"]),
    "client-key-data": st.sampled_from(["Zm9v", "%%%"]),
    "client-certificate": st.just("c.crt"), "client-key": st.just("c.key"),
    "username": st.text(max_size=3), "as": st.text(max_size=3),
    "exec": optional_fields({"command": st.just("get-token"),
                             "apiVersion": st.just("client.authentication.k8s.io/v1"),
                             "args": st.lists(st.text(max_size=3), max_size=2),
                             "env": st.lists(st.fixed_dictionaries({"name": maybe(st.text(max_size=3)),
                                                                    "value": maybe(st.text(max_size=3))}),
                                             max_size=2)}),
    "auth-provider": optional_fields({"name": st.sampled_from(["oidc", "gcp"]),
                                      "config": optional_fields({"id-token": st.text(max_size=8),
                                                                 "client-id": st.just("c"),
                                                                 "refresh-token": st.just("r"),
                                                                 "idp-issuer-url": st.just("https://127.0.0.1:1"),
                                                                 "idp-certificate-authority-data": st.just("%%")})}),
})
NAMES = st.sampled_from(["ctx", "c", "u", "other", ""])


@st.composite
def kubeconfigs(draw: st.DrawFn) -> Any:
    def named(key: str, body: st.SearchStrategy[Any]) -> Any:
        return draw(maybe(st.lists(optional_fields({"name": NAMES, key: body}), max_size=2)))
    context = optional_fields({"cluster": NAMES, "user": NAMES, "namespace": st.text(max_size=5)})
    return draw(optional_fields({"apiVersion": st.just("v1"), "kind": st.just("Config"),
                                 "current-context": NAMES}) | st.just({})) | {
        "clusters": named("cluster", CLUSTER), "users": named("user", USER), "contexts": named("context", context)}


# YAML that is valid but that PyYAML cannot build into Python values, or that is not a kubeconfig at all.
AWKWARD_YAML = st.sampled_from([
    "current-context: 2024-13-45\n", "clusters: " + "9" * 5000 + "\n", "[" * 3000 + "]" * 3000 + "\n",
    "a: &x [*x]\n", "? [a, b]\n: c\n", "!!python/object:os.system x\n", "- 1\n- 2\n", "\t\x00\n", "key: !!binary ~~\n",
])
TEXTS = st.one_of(kubeconfigs().map(lambda doc: yaml.safe_dump(doc).encode()),
                  kubeconfigs().map(lambda doc: yaml.safe_dump(doc).encode()),
                  kubeconfigs().map(lambda doc: yaml.safe_dump(doc).encode()),
                  AWKWARD_YAML.map(str.encode), st.binary(max_size=40), st.text(max_size=40).map(str.encode),
                  kubeconfigs().map(lambda doc: yaml.safe_dump(doc).encode()[:-7] + b"\xff\xfe"))


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kubeconfigs")
    (path / "token").write_text("t0ken\n")
    (path / "ca.crt").write_text("not a certificate\n")
    return path


@pytest.fixture
def no_exec(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(kube_config, "ExecProvider", FakeExec)
    yield


_names = itertools.count()
TRIED = 50


@settings(max_examples=TRIED, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=TEXTS, context=st.none() | NAMES)
def test_any_kubeconfig_loads_or_is_a_kube_config_error(directory: Path, no_exec: None, text: bytes,
                                                        context: str | None) -> None:
    path = directory / f"kubeconfig-{next(_names)}"
    path.write_bytes(text)
    try:
        config = load_kubeconfig(path, context=context)
    except KubeConfigError as exc:
        message = str(exc)
        assert message.strip() and "\n" not in message  # the CLI's one line
        return
    assert config.server.startswith("https://")
