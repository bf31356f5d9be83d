"""Kubeconfig and in-cluster loading: credentials, TLS material, token rotation, and secrecy of tokens."""

from __future__ import annotations

import base64
import logging
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.kubernetes.config import KubeConfigError
from adapters.kubernetes.kube_config_bridge import LibraryCredentials, load, load_in_cluster, load_kubeconfig
from adapters.kubernetes.tokens import FileToken, StaticToken
from devcluster.certs import ClusterPKI, generate_pki

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-token-value-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPKI:
    return generate_pki(tmp_path_factory.mktemp("pki"))


def write_kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any], **context: Any) -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "other", "cluster": {"server": "https://wrong.example"}},
                     {"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", **context}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_token_and_ca_file_from_the_current_context(tmp_path: Path, pki: ClusterPKI) -> None:
    path = write_kubeconfig(tmp_path / "kc", {"server": "https://127.0.0.1:6443/", "certificate-authority":
                                              str(pki.ca_cert)}, {"token": SECRET}, namespace="team-a")
    config = load(path)
    assert config.server == "https://127.0.0.1:6443"
    assert config.namespace == "team-a"
    assert isinstance(config.token, StaticToken) and config.token.token() == SECRET
    assert config.ca is not None and config.ca.path == pki.ca_cert
    assert config.ssl_context().verify_mode == ssl.CERT_REQUIRED
    assert config.ssl_context().check_hostname


def test_relative_paths_resolve_against_the_kubeconfig_directory(tmp_path: Path, pki: ClusterPKI) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "conf" / "token").write_text(SECRET + "\n")
    path = write_kubeconfig(tmp_path / "conf" / "kc", {"server": "https://k", "certificate-authority": "ca.crt"},
                            {"tokenFile": "token"})
    config = load_kubeconfig(path)
    assert config.ca is not None and config.ca.path == tmp_path / "conf" / "ca.crt"
    assert config.token is not None and config.token.token() == SECRET


def test_inline_ca_and_client_certificate_data_load_into_the_ssl_context(tmp_path: Path, pki: ClusterPKI) -> None:
    path = write_kubeconfig(
        tmp_path / "kc",
        {"server": "https://k", "certificate-authority-data": b64(pki.ca_cert.read_bytes())},
        {"client-certificate-data": b64(pki.serving_cert.read_bytes()),
         "client-key-data": b64(pki.serving_key.read_bytes())},
    )
    config = load(path)
    assert config.token is None and config.client_certificate is not None
    context = config.ssl_context()
    assert len(context.get_ca_certs()) == 1
    assert "BEGIN" not in repr(config)  # no key material in the repr


def test_client_certificate_files_and_a_key_mismatch_is_a_clear_error(tmp_path: Path, pki: ClusterPKI) -> None:
    good = write_kubeconfig(tmp_path / "good", {"server": "https://k", "certificate-authority": str(pki.ca_cert)},
                            {"client-certificate": str(pki.serving_cert), "client-key": str(pki.serving_key)})
    load(good).ssl_context()
    bad = write_kubeconfig(tmp_path / "bad", {"server": "https://k", "certificate-authority": str(pki.ca_cert)},
                           {"client-certificate": str(pki.serving_cert), "client-key": str(pki.sa_private_key)})
    with pytest.raises(KubeConfigError, match="client certificate/key"):
        load(bad).ssl_context()


def test_insecure_skip_tls_verify_is_refused(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", {"server": "https://k", "insecure-skip-tls-verify": True},
                            {"token": SECRET})
    with pytest.raises(KubeConfigError, match="insecure-skip-tls-verify") as info:
        load(path)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(("cluster", "user", "match"), [
    ({"server": "http://k"}, {"token": SECRET}, "not https"),
    ({"server": "https://k"}, {"exec": {"command": "aws"}}, "exec plugin needs a command and an apiVersion"),
    ({"server": "https://k"}, {"token": SECRET, "as": "admin"}, "impersonation"),
    ({"server": "https://k"}, {"username": "u", "password": SECRET}, "basic auth"),
    ({"server": "https://k"}, {"auth-provider": {"name": "gcp"}}, "auth-provider 'gcp' is not supported"),
    ({"server": "https://k"}, {"auth-provider": {"name": "oidc", "config": {"refresh-token": SECRET}}},
     "idp-certificate-authority"),
    ({"server": "https://k", "proxy-url": "socks5://p:1080"}, {"token": SECRET}, "socks"),
    ({"server": "https://k"}, {}, "no token"),
    ({"server": "https://k", "certificate-authority": "/nonexistent/ca"}, {"token": SECRET}, "does not exist"),
    ({"server": "https://k", "certificate-authority-data": "%%%"}, {"token": SECRET}, "not valid base64"),
    ({"server": "https://k"}, {"client-certificate": "/etc/hostname"}, "together"),
    ({"server": "https://k"}, {"tokenFile": "/nonexistent/token"}, "cannot read token file"),
])
def test_unusable_kubeconfigs_are_clear_errors_without_the_token(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], match: str
) -> None:
    with pytest.raises(KubeConfigError, match=match) as info:
        load(write_kubeconfig(tmp_path / "kc", cluster, user))
    assert SECRET not in str(info.value)


def test_invalid_yaml_does_not_quote_its_content(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    path.write_text(f"users:\n  - token: {SECRET}\n   bad: [indent\n")
    with pytest.raises(KubeConfigError) as info:
        load(path)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("text", [
    "current-context: 2024-13-45\n",  # a date PyYAML parses but cannot build: ValueError
    "clusters: " + "9" * 5000 + "\n",  # an integer past Python's 4300-digit limit: ValueError
    "[" * 3000 + "]" * 3000 + "\n",  # nesting past the recursion limit: RecursionError
])
def test_yaml_that_cannot_be_built_is_a_kube_config_error(tmp_path: Path, text: str) -> None:
    # Found by tests/unit/test_fuzz_kubeconfig.py: these escaped as tracebacks, not the CLI's exit-2 line.
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(KubeConfigError, match="cannot be read as YAML"):
        load(path)


def test_token_never_appears_in_reprs(tmp_path: Path) -> None:
    config = load(write_kubeconfig(tmp_path / "kc", {"server": "https://k"}, {"token": SECRET}))
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert SECRET not in repr(config.auth())


def test_token_file_is_reread_every_60_seconds_and_a_failed_read_keeps_the_old_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    path = tmp_path / "token"
    path.write_text("first")
    token = FileToken(path, clock=lambda: now[0])
    path.write_text("second")
    now[0] += 59.0
    assert token.token() == "first"
    now[0] += 1.0
    assert token.token() == "second"
    path.unlink()
    now[0] += 60.0
    with caplog.at_level(logging.WARNING):
        assert token.token() == "second"
    assert "keeping the previous token" in caplog.text and "second" not in caplog.text
    path.write_text("third")
    assert token.refresh() is True
    assert token.token() == "third"
    assert token.refresh() is False
    assert "third" not in repr(token)


def test_token_file_wins_over_an_inline_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    config = load(write_kubeconfig(tmp_path / "kc", {"server": "https://k"},
                                   {"token": SECRET, "tokenFile": str(tmp_path / "token")}))
    assert config.token is not None and config.token.token() == "from-file"


def test_in_cluster_uses_the_service_account_files(tmp_path: Path, pki: ClusterPKI) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "token").write_text(SECRET)
    (tmp_path / "namespace").write_text("metrics-sched\n")
    config = load_in_cluster(environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                             service_account_dir=tmp_path)
    assert config.server == "https://10.96.0.1:443"
    assert config.namespace == "metrics-sched"
    assert isinstance(config.token, LibraryCredentials) and config.token.token() == SECRET
    assert SECRET not in repr(config)
    config.ssl_context()
    v6 = load_in_cluster(environ={"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
                         service_account_dir=tmp_path)
    assert v6.server == "https://[fd00::1]:443"


def test_in_cluster_outside_a_cluster_says_so(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="not running in a cluster"):
        load_in_cluster(environ={}, service_account_dir=tmp_path)
