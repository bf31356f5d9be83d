"""A pod's ResourceClaims as kube-scheduler resolves them (resourceclaim.Name and foreachPodResourceClaim).

Each `spec.resourceClaims[]` entry names a claim directly (`resourceClaimName`) or through a template, whose claim
the resource-claim controller creates and names in `status.resourceClaimStatuses`. The messages are upstream's:
they are the PodScheduled condition's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.framework import KubeObject, PodInfo

from .index import DraIndex

__all__ = ["ClaimMissing", "PodClaim", "is_allocated", "is_reserved_for", "owned_by", "resolve_claims"]


@dataclass(frozen=True)
class PodClaim:
    entry: str  # the pod's name for it (spec.resourceClaims[].name)
    claim: KubeObject
    from_template: bool

    @property
    def namespace(self) -> str:
        return str((self.claim.get("metadata") or {}).get("namespace", ""))

    @property
    def name(self) -> str:
        return str((self.claim.get("metadata") or {}).get("name", ""))

    @property
    def uid(self) -> str:
        return str((self.claim.get("metadata") or {}).get("uid", ""))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClaimMissing:
    """Why the pod's claims cannot all be resolved; `waiting_for` is the claim whose creation would help."""

    reason: str
    waiting_for: str | None = None


def owned_by(claim: Mapping[str, Any], pod: PodInfo) -> bool:
    """metav1.IsControlledBy: the claim's controller owner reference is the pod."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid") == pod.uid:
            return True
    return False


def is_allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def is_reserved_for(claim: Mapping[str, Any], pod: PodInfo) -> bool:
    return any(ref.get("uid") == pod.uid and ref.get("resource", "pods") == "pods"
               for ref in (claim.get("status") or {}).get("reservedFor") or ())


def resolve_claims(pod: PodInfo, index: DraIndex) -> tuple[PodClaim, ...] | ClaimMissing:
    """The pod's claims in spec order, or why one is not there (yet)."""
    spec = pod.raw.get("spec") or {}
    statuses = {s.get("name"): s for s in (pod.raw.get("status") or {}).get("resourceClaimStatuses") or ()}
    found: list[PodClaim] = []
    for entry in spec.get("resourceClaims") or ():
        entry_name = str(entry.get("name", ""))
        name = entry.get("resourceClaimName")
        from_template = False
        if not name:
            if not entry.get("resourceClaimTemplateName"):
                return ClaimMissing(f'pod "{pod.key}": claim "{entry_name}": no resourceClaimName and no '
                                    "resourceClaimTemplateName")
            status = statuses.get(entry_name)
            if status is None:
                return ClaimMissing(f'pod "{pod.key}": ResourceClaim not created yet')
            name = status.get("resourceClaimName")
            if not name:
                continue  # the controller decided the pod needs no claim for this entry
            from_template = True
        claim = index.claim(pod.namespace, str(name))
        if claim is None:
            return ClaimMissing(f'resourceclaim.resource.k8s.io "{name}" not found', str(name))
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            return ClaimMissing(f'resourceclaim "{name}" is being deleted')
        if from_template and not owned_by(claim, pod):
            return ClaimMissing(f"ResourceClaim {pod.namespace}/{name} was not created for Pod {pod.key} "
                                "(Pod is not owner)")
        found.append(PodClaim(entry_name, claim, from_template))
    return tuple(found)
