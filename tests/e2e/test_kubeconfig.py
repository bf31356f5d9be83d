"""Credentials through the `kubernetes` package's loaders, against the dev API server: an exec plugin whose token
expires and is fetched again, KUBECONFIG with two files, tls-server-name, and in-cluster token rotation.

Identities are checked with SelfSubjectReview (who the API server says the request came from), and the tokens
are real ServiceAccount tokens from the TokenRequest API."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.kube_config_bridge import LibraryCredentials, load, load_in_cluster
from devcluster import DevCluster
from devcluster.kubeapi import Credentials, KubeAPI
from metrics_sched.ports import ApiError
from tests.e2e import kube

pytestmark = pytest.mark.e2e

EXEC_API = "client.authentication.k8s.io/v1"
# Prints the token in $PLUGIN_DIR/token, valid for $PLUGIN_DIR/ttl seconds, and counts its runs.
PLUGIN = """#!{python}
import datetime, json, os, pathlib
d = pathlib.Path(os.environ["PLUGIN_DIR"])
with open(d / "calls", "a") as f:
    f.write("run\\n")
ttl = float((d / "ttl").read_text())
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
print(json.dumps({{"apiVersion": "{api}", "kind": "ExecCredential",
                  "status": {{"token": (d / "token").read_text().strip(),
                             "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
"""


def service_account_token(api: KubeAPI, namespace: str, name: str) -> str:
    api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
    review = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    token: str = review["status"]["token"]
    return token


def whoami(client: KubeClient) -> str:
    review = client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return str(review["status"]["userInfo"]["username"])


def review_sent(client: KubeClient) -> int:
    """The same review as a write whose reply is not read: it goes through the client's WriteLane (binds,
    events), whose TLS and credentials are its own code, not httpx's."""
    return client.send("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                       {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})


def kubeconfig(cluster: dict[str, Any] | None, user: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if cluster is not None:
        doc["clusters"] = [{"name": "dev", "cluster": cluster}]
        doc["contexts"] = [{"name": "dev", "context": {"cluster": "dev", "user": "me"}}]
        doc["current-context"] = "dev"
    if user is not None:
        doc["users"] = [{"name": "me", "user": user}]
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@pytest.fixture
def dev(cluster: DevCluster) -> Credentials:
    return Credentials.from_kubeconfig(cluster.kubeconfig)


def test_an_exec_plugin_token_reaches_the_server_and_is_fetched_again_after_expiry(
    api: KubeAPI, namespace: str, dev: Credentials, tmp_path: Path
) -> None:
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "token").write_text(service_account_token(api, namespace, "exec-first"))
    (plugin_dir / "ttl").write_text("3")
    script = plugin_dir / "plugin.py"
    script.write_text(PLUGIN.format(python=sys.executable, api=EXEC_API))
    script.chmod(0o700)
    path = write(tmp_path / "kubeconfig", kubeconfig(
        {"server": dev.server, "certificate-authority": str(dev.ca_file)},
        {"exec": {"apiVersion": EXEC_API, "command": str(script),
                  "env": [{"name": "PLUGIN_DIR", "value": str(plugin_dir)}]}}))

    def calls() -> int:
        return len((plugin_dir / "calls").read_text().splitlines())

    config = load(path)
    assert isinstance(config.token, LibraryCredentials)
    assert calls() == 1
    with KubeClient(config) as client:
        assert whoami(client) == f"system:serviceaccount:{namespace}:exec-first"
        # The plugin now hands out another identity; the cached token is used until it expires.
        (plugin_dir / "token").write_text(service_account_token(api, namespace, "exec-second"))
        expiry = config.token.expiry()
        assert expiry is not None
        kube.poll(lambda: datetime.now(UTC) > expiry, 30, "the exec credential's expirationTimestamp to pass")
        before = calls()
        assert whoami(client) == f"system:serviceaccount:{namespace}:exec-second"
        assert calls() == before + 1


def test_kubeconfig_with_two_files_cluster_in_one_user_in_the_other(
    api: KubeAPI, namespace: str, dev: Credentials, tmp_path: Path
) -> None:
    (tmp_path / "clusters").mkdir()
    (tmp_path / "users").mkdir()
    shutil.copy(dev.ca_file, tmp_path / "clusters" / "ca.crt")
    (tmp_path / "users" / "token").write_text(service_account_token(api, namespace, "merged"))
    clusters = write(tmp_path / "clusters" / "config", kubeconfig(
        {"server": dev.server, "certificate-authority": "ca.crt"}, None))  # relative to its own file
    users = write(tmp_path / "users" / "config", kubeconfig(None, {"tokenFile": "token"}))
    config = load(None, environ={"KUBECONFIG": f"{clusters}:{users}"})
    with KubeClient(config) as client:
        assert whoami(client) == f"system:serviceaccount:{namespace}:merged"


def test_tls_server_name_is_the_name_verified_in_the_servers_certificate(
    api: KubeAPI, namespace: str, dev: Credentials, tmp_path: Path
) -> None:
    assert dev.server.startswith("https://127.0.0.1:")  # connect by IP, verify as "localhost" (a SAN of the cert)
    token = service_account_token(api, namespace, "sni")
    good = write(tmp_path / "good", kubeconfig(
        {"server": dev.server, "certificate-authority": str(dev.ca_file), "tls-server-name": "localhost"},
        {"token": token}))
    with KubeClient(load(good)) as client:
        assert whoami(client) == f"system:serviceaccount:{namespace}:sni"
        assert review_sent(client) == 201
    # A name the certificate does not have fails verification: the name really is the one checked.
    wrong = write(tmp_path / "wrong", kubeconfig(
        {"server": dev.server, "certificate-authority": str(dev.ca_file), "tls-server-name": "elsewhere.example"},
        {"token": token}))
    with KubeClient(load(wrong)) as client, pytest.raises(ApiError) as info:
        whoami(client)
    assert "elsewhere.example" in str(info.value) or "CERTIFICATE_VERIFY_FAILED" in str(info.value)
    with KubeClient(load(wrong)) as client, pytest.raises(ApiError) as info:
        review_sent(client)
    assert "elsewhere.example" in str(info.value) or "CERTIFICATE_VERIFY_FAILED" in str(info.value)


def test_in_cluster_token_rotation_is_picked_up(api: KubeAPI, namespace: str, dev: Credentials,
                                                tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    shutil.copy(dev.ca_file, account / "ca.crt")
    (account / "namespace").write_text(namespace)
    (account / "token").write_text(service_account_token(api, namespace, "rotated-from"))
    host, port = dev.server.removeprefix("https://").rsplit(":", 1)
    config = load_in_cluster(environ={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
                             service_account_dir=account)
    assert config.namespace == namespace
    with KubeClient(config) as client:
        assert whoami(client) == f"system:serviceaccount:{namespace}:rotated-from"
        # The kubelet rewrites the projected file; the old token then stops working (its account is deleted).
        new = service_account_token(api, namespace, "rotated-to")
        (account / "token.tmp").write_text(new)
        (account / "token.tmp").replace(account / "token")
        api.delete(f"/api/v1/namespaces/{namespace}/serviceaccounts/rotated-from")

        def rotated() -> bool:
            try:
                return whoami(client) == f"system:serviceaccount:{namespace}:rotated-to"
            except ApiError as exc:
                if exc.status != 401:
                    raise
                return False  # refused before the refresh throttle let the file be re-read

        kube.poll(rotated, 30, "a request made with the rotated token")
        assert json.dumps(repr(config)).find(new) == -1
