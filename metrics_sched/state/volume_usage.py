"""VolumeUsage: which claims and in-line disks the placed (and assumed) pods use, per node row.

VolumeRestrictions reads it (a ReadWriteOncePod claim already in use; an in-line disk another pod holds
read-write on a node), NodeVolumeLimits counts a node's attached volumes per CSI driver from it. It is kept by
ClusterState as pods are accounted on and off rows, so its size follows the pods placed now.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from metrics_sched.model.volumes import InlineDisk, PodVolumes, claim_key

__all__ = ["DiskUse", "VolumeUsage", "disks_conflict"]


def disks_conflict(wanted: InlineDisk, held: InlineDisk) -> bool:
    """Whether a pod mounting `wanted` conflicts with a pod on the same node mounting `held` (kube-scheduler's
    volumerestrictions isVolumeConflict): the same GCE PD or iSCSI IQN unless both are read-only, the same EBS
    volume always, the same RBD pool/image with a monitor in common unless both are read-only."""
    if wanted.kind != held.kind or wanted.identity != held.identity:
        return False
    both_read_only = wanted.read_only and held.read_only
    if wanted.kind in ("gcePersistentDisk", "iscsi"):
        return not both_read_only
    if wanted.kind == "awsElasticBlockStore":
        return True
    if wanted.kind == "rbd":
        return bool(wanted.monitors & held.monitors) and not both_read_only
    return False  # other kinds (if the model ever records them) have no mount restriction


@dataclass
class DiskUse:
    """Pods holding one in-line disk on one row, per way they mount it (read-only flag, RBD monitors)."""

    holders: dict[InlineDisk, int] = field(default_factory=dict)

    @property
    def read_write(self) -> int:
        return sum(n for disk, n in self.holders.items() if not disk.read_only)

    @property
    def read_only(self) -> int:
        return sum(n for disk, n in self.holders.items() if disk.read_only)


class VolumeUsage:
    """Not locked itself: ClusterState calls it under its lock, and readers hold that lock (ClusterState.lock)."""

    def __init__(self) -> None:
        self._claims: dict[str, dict[int, int]] = {}  # claim key -> row -> claim volumes of pods placed there
        # claim key -> persistentVolumeClaim volumes (not generic ephemeral ones) of placed pods, on any row:
        # kube-scheduler's snapshot usedPVCSet, which ReadWriteOncePod conflicts are checked against.
        self._referenced: dict[str, int] = {}
        self._disks: dict[tuple[str, tuple[str, ...]], dict[int, DiskUse]] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        """Bumped whenever a pod with volumes is accounted on or off a row."""
        return self._generation

    def account(self, namespace: str, volumes: PodVolumes, row: int, sign: int) -> None:
        if not volumes:
            return
        self._generation += 1
        for claim in volumes.claims:
            key = claim_key(namespace, claim.claim)
            rows = self._claims.setdefault(key, {})
            count = rows.get(row, 0) + sign
            if count > 0:
                rows[row] = count
            else:
                rows.pop(row, None)
                if not rows:
                    del self._claims[key]
            if not claim.ephemeral:
                refs = self._referenced.get(key, 0) + sign
                if refs > 0:
                    self._referenced[key] = refs
                else:
                    self._referenced.pop(key, None)
        for disk in volumes.disks:
            self._account_disk(disk, row, sign)

    def _account_disk(self, disk: InlineDisk, row: int, sign: int) -> None:
        key = (disk.kind, disk.identity)
        rows = self._disks.setdefault(key, {})
        use = rows.setdefault(row, DiskUse())
        count = use.holders.get(disk, 0) + sign
        if count > 0:
            use.holders[disk] = count
        else:
            use.holders.pop(disk, None)
        if not use.holders:
            del rows[row]
            if not rows:
                del self._disks[key]

    def claim_referenced(self, key: str) -> bool:
        """Some placed pod names the claim in a persistentVolumeClaim volume (generic ephemeral ones excluded)."""
        return key in self._referenced

    def claims(self) -> Iterator[tuple[str, dict[int, int]]]:
        """Every claim in use, with its rows (live views: do not keep them past the lock)."""
        return iter(self._claims.items())

    def conflicting_rows(self, disk: InlineDisk) -> list[int]:
        """Rows where a placed pod holds a disk that `disk` conflicts with (disks_conflict)."""
        rows = self._disks.get((disk.kind, disk.identity))
        if not rows:
            return []
        return [row for row, use in rows.items() if any(disks_conflict(disk, held) for held in use.holders)]

    def disks(self) -> Iterator[tuple[tuple[str, tuple[str, ...]], Mapping[int, DiskUse]]]:
        """((kind, identity), row -> use) of every in-line disk in use (live views: do not keep them past the lock)."""
        return iter(self._disks.items())

    def __len__(self) -> int:
        return len(self._claims) + len(self._disks)
