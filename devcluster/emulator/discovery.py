"""Discovery documents (APIGroup, APIResourceList) and the Status a missing object gets, as an aggregated API
server writes them; shared by the APIs the emulator serves behind the apiserver's aggregation layer."""

from __future__ import annotations

from typing import Any

from devcluster.emulator.routing import Response

__all__ = ["api_group", "group_entry", "not_found", "resource_list"]


def group_entry(name: str, versions: tuple[str, ...]) -> dict[str, Any]:
    """A group as an APIGroupList lists it; the first version is the preferred one."""
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group(name: str, versions: tuple[str, ...]) -> dict[str, Any]:
    """The APIGroup document (`/apis/<group>`)."""
    return {"kind": "APIGroup", "apiVersion": "v1", **group_entry(name, versions)}


def resource_list(group_version: str, names: list[str], namespaced: bool, kind: str,
                  verbs: list[str]) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": n, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}
                          for n in names]}


def not_found(message: str) -> Response:
    return Response.json({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                          "reason": "NotFound", "code": 404}, 404)
