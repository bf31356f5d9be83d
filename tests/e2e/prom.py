"""A minimal Prometheus HTTP API client for assertions in e2e tests."""

from __future__ import annotations

from typing import Any

import httpx


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=10)
    resp.raise_for_status()
    body = resp.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
