"""The client of a running scheduler's endpoints for `explain`, `sources` and `replay` (app/cli/): where the requests
go and with which credentials.

Over HTTPS (the default) it sends the kubeconfig's bearer token (the scheduler reviews it with the API server) and
verifies the serving certificate with --ca-file, else the kubeconfig cluster's CA. A plain http:// URL (a scheduler
run with `server.insecure` on loopback) gets no credentials. Given the Service (--service, or --url
https://NAME.NAMESPACE.svc:PORT) it asks the replica holding the leader Lease, never a standby
(app/leader_target.py).
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from metrics_sched.app.errors import UserError
from metrics_sched.app.leader_target import find_leader, service_of_host

DEFAULT_URL = os.environ.get("METRICS_SCHED_URL", "https://127.0.0.1:10259")
DEFAULT_LEASE_NAME = "metrics-sched"  # leaderElection.resourceName as shipped (deploy/configmap.yaml)


@dataclass
class Endpoint:
    """Where the requests go and how: the client carries TLS verification and the bearer token."""

    url: str
    client: httpx.Client
    server_name: str | None = None  # checked in the certificate instead of the URL's host (a pod's address)


def _namespaced(value: str, flag: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise UserError(f"{flag}: give NAMESPACE/NAME, got {value!r}")
    return namespace, name


def connect(args: argparse.Namespace) -> Endpoint:
    """The endpoint the flags name: the URL as given, or the leader behind the Service."""
    url = args.url or DEFAULT_URL
    service = _namespaced(args.service, "--service") if args.service else None
    if service is None and args.url:
        service = service_of_host(urlsplit(args.url).hostname or "")
    if urlsplit(url).scheme == "http" and service is None:
        # A scheduler serving plain HTTP (server.insecure, loopback): no credentials to send over it.
        return Endpoint(url, httpx.Client(timeout=5, trust_env=False))
    if urlsplit(url).scheme not in ("http", "https"):
        raise UserError(f"--url: must be an http:// or https:// URL, got {url!r}")
    return _authenticated(args, url, service)


def _authenticated(args: argparse.Namespace, url: str, service: tuple[str, str] | None) -> Endpoint:
    from adapters.kubernetes import KubeClient, KubeConfigError, TokenError, load
    from adapters.kubernetes.tokens import BearerAuth

    try:
        kube = load(args.kubeconfig)
        if kube.token is None:
            raise UserError(f"{kube.origin}: the user has no bearer token to send (the scheduler authenticates "
                            "tokens only, by TokenReview): use a token user, e.g. from `kubectl create token`")
        verify = ssl.create_default_context(cafile=str(args.ca_file)) if args.ca_file else kube.ssl_context()
        server_name = None
        if service is not None:
            namespace, name = service
            lease = _namespaced(args.lease, "--lease") if args.lease else (namespace, DEFAULT_LEASE_NAME)
            with KubeClient(kube, max_connections=2, max_watch_connections=1, request_timeout=10) as client:
                target = find_leader(client, namespace, name, *lease)
            print(f"asking the leader {target.pod} at {target.url}", file=sys.stderr)
            url, server_name = target.url, target.server_name
    except (KubeConfigError, TokenError) as exc:  # their messages never contain a credential
        raise UserError(str(exc)) from None
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"--ca-file {args.ca_file}: cannot load it: {exc}") from None
    http = httpx.Client(verify=verify, auth=BearerAuth(kube.token), timeout=5, trust_env=False)
    return Endpoint(url, http, server_name)


__all__ = ["DEFAULT_LEASE_NAME", "DEFAULT_URL", "Endpoint", "connect"]
