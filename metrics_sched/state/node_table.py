"""Per-node state as numpy columns, so filters return masks and scores return vectors.

Rows are stable for a node's lifetime (a deleted node's row is marked absent and reused later);
`generation` increases on any change, which lets callers cache derived arrays. Labels and taints are
strings: they stay in Python lists, but filters read them through cached per-key columns and
taint-set ids, so a selector over all nodes is one numpy call, not a loop over nodes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import numpy.typing as npt

from metrics_sched.model.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources, node_allocatable

BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
POD_LOG = 256  # recent pod changes whose rows NodeTable.rows_changed_since answers from its log

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_NO_ROWS: IntArray = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str


@dataclass(frozen=True)
class NodeImage:
    """One entry of node.status.images: the names it is known by and its size."""

    names: tuple[str, ...]
    size_bytes: int


@dataclass(frozen=True)
class NodeRecord:
    name: str
    allocatable: Resources
    ready: bool
    unschedulable: bool
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    addresses: Mapping[str, str]
    images: tuple[NodeImage, ...] = ()


@dataclass
class Topology:
    """A label key as a topology: each row's value as an integer code (-1 where the node lacks the key), so
    per-domain sums are one np.bincount. Codes are stable while the column lives; `values[code]` is the value."""

    codes: IntArray
    index: dict[str, int]
    values: list[str]

    @property
    def size(self) -> int:
        return len(self.values)

    def code(self, value: str) -> int:
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.values)
            self.values.append(value)
        return found


@dataclass
class ImageState:
    """An image name across the cluster, as kube-scheduler's cache keeps it (ImageStateSummary): the size
    reported by the first node that had it, and the rows of the nodes that have it now."""

    size: int
    rows: set[int]
    _rows_array: IntArray | None = None

    def row_array(self) -> IntArray:
        """The rows as an array (cached until the set changes)."""
        if self._rows_array is None:
            self._rows_array = np.fromiter(self.rows, dtype=np.int64, count=len(self.rows))
        return self._rows_array

    def add(self, row: int) -> None:
        if row not in self.rows:
            self.rows.add(row)
            self._rows_array = None

    def discard(self, row: int) -> None:
        if row in self.rows:
            self.rows.discard(row)
            self._rows_array = None


def _parse_images(status: Mapping[str, Any]) -> tuple[NodeImage, ...]:
    images = []
    for image in status.get("images") or []:
        if not isinstance(image, Mapping):
            continue
        names = tuple(n for n in image.get("names") or [] if isinstance(n, str) and n)
        try:
            size = int(image.get("sizeBytes") or 0)
        except (TypeError, ValueError):
            size = 0
        if names:
            images.append(NodeImage(names, size))
    return tuple(images)


def parse_node(node: Mapping[str, Any]) -> NodeRecord:
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    taints = tuple(Taint(t.get("key", ""), t.get("value"), t.get("effect", "")) for t in spec.get("taints") or [])
    addresses = {a.get("type", ""): a.get("address", "") for a in status.get("addresses") or []}
    try:
        allocatable = node_allocatable(node)
    except ValueError:
        allocatable = {}  # a node we cannot read offers nothing; it is still tracked
    return NodeRecord(
        name=metadata.get("name", ""),
        allocatable=allocatable,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        labels=dict(metadata.get("labels") or {}),
        taints=taints,
        addresses=addresses,
        images=_parse_images(status),
    )


class NodeTable:
    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.size = 0  # rows ever used (present or not)
        self.names: list[str | None] = []
        self.index: dict[str, int] = {}
        self.records: list[NodeRecord | None] = []
        self._free: list[int] = []
        self.resources: list[str] = list(BASE_RESOURCES)
        self.resource_index: dict[str, int] = {name: i for i, name in enumerate(self.resources)}
        self.present: BoolArray = np.zeros(capacity, dtype=bool)
        self.ready: BoolArray = np.zeros(capacity, dtype=bool)
        self.unschedulable: BoolArray = np.zeros(capacity, dtype=bool)
        self.allocatable: IntArray = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        self.requested: IntArray = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        # cpu and memory as kube-scheduler scores them (containers without requests count a default).
        self.nonzero_requested: IntArray = np.zeros((capacity, 2), dtype=np.int64)
        # The same, one contiguous array per resource (resource x row), kept in step with the above: the
        # filters and scores read a resource over every node, which on the row-major arrays is a strided
        # gather per resource and per cycle. free = allocatable - requested.
        self.free_by_resource: IntArray = np.zeros((len(self.resources), capacity), dtype=np.int64)
        self.requested_by_resource: IntArray = np.zeros((len(self.resources), capacity), dtype=np.int64)
        self.allocatable_by_resource: FloatArray = np.zeros((len(self.resources), capacity))
        self.nonzero_by_resource: IntArray = np.zeros((2, capacity), dtype=np.int64)
        # Each row's taint set as an id into `taint_sets`, so a taint filter checks each distinct set once.
        # Sets are reference-counted by the rows holding them and their ids reused, then compacted: nodes
        # whose taints carry timestamps (autoscalers) must not leave a set behind per taint ever seen.
        self.taint_set: npt.NDArray[np.int32] = np.zeros(capacity, dtype=np.int32)
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_set_ids: dict[tuple[Taint, ...], int] = {(): 0}
        self._taint_set_rows: list[int] = [0]  # rows holding each id (id 0, no taints, is never freed)
        self._free_taint_ids: list[int] = []
        self._label_columns: dict[str, npt.NDArray[np.object_]] = {}
        self._topologies: dict[str, Topology] = {}
        self.generation = 0
        self.labels_generation = 0
        self.rows_generation = 0  # changes only when a node takes or leaves a row
        self.taints_generation = 0  # changes when a row's taint set does (or the rows grow)
        # Opportunistic batching's dirty tracking: `nodes_generation` changes when a node is added, removed or
        # changes (not on an identical update), `pod_stamp` counts changes of the pods counted on a row, and
        # `row_pod_stamp[row]` is the count at that row's last one, so the rows changed since a cycle are one compare.
        self.nodes_generation = 0
        self.pod_stamp = 0
        self.row_pod_stamp: IntArray = np.zeros(capacity, dtype=np.int64)
        # The rows of the last POD_LOG pod changes, in stamp order (stamp i is entry i - pod_stamp - 1 from the end):
        # the rows changed since a recent stamp without a compare over every row (rows_changed_since).
        self._pod_log: deque[int] = deque(maxlen=POD_LOG)
        # image name -> size and the rows holding it (node.status.images), for ImageLocality.
        self.images: dict[str, ImageState] = {}
        self.images_generation = 0

    # -- shape -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.index)

    def _grow(self, capacity: int) -> None:
        def grow(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
            shape = (capacity, *array.shape[1:])
            bigger = np.zeros(shape, dtype=array.dtype)
            bigger[: self.capacity] = array[: self.capacity]
            return bigger

        self.present, self.ready, self.unschedulable = grow(self.present), grow(self.ready), grow(self.unschedulable)
        self.allocatable, self.requested = grow(self.allocatable), grow(self.requested)
        self.nonzero_requested, self.taint_set = grow(self.nonzero_requested), grow(self.taint_set)
        self.row_pod_stamp = grow(self.row_pod_stamp)
        self.capacity = capacity
        self.taints_generation += 1
        self._transpose()
        self._label_columns.clear()
        self._topologies.clear()

    def resource_column(self, name: str) -> int:
        """The column of a resource, added on first sight (e.g. a new extended resource)."""
        col = self.resource_index.get(name)
        if col is None:
            col = len(self.resources)
            self.resources.append(name)
            self.resource_index[name] = col
            pad = np.zeros((self.capacity, 1), dtype=np.int64)
            self.allocatable = np.hstack([self.allocatable, pad])
            self.requested = np.hstack([self.requested, pad.copy()])
            self._transpose()
        return col

    def _transpose(self) -> None:
        """Rebuilds the per-resource arrays from the per-row ones (on growth, rare)."""
        self.free_by_resource = np.ascontiguousarray((self.allocatable - self.requested).T)
        self.requested_by_resource = np.ascontiguousarray(self.requested.T)
        self.allocatable_by_resource = np.ascontiguousarray(self.allocatable.T, dtype=np.float64)
        self.nonzero_by_resource = np.ascontiguousarray(self.nonzero_requested.T)

    def _sync_row(self, row: int) -> None:
        self.free_by_resource[:, row] = self.allocatable[row] - self.requested[row]
        self.requested_by_resource[:, row] = self.requested[row]
        self.allocatable_by_resource[:, row] = self.allocatable[row]
        self.nonzero_by_resource[:, row] = self.nonzero_requested[row]

    def vector(self, resources: Mapping[str, int]) -> IntArray:
        """A resource dict as a row aligned with the table's columns (adding columns as needed)."""
        for name in resources:
            self.resource_column(name)
        row = np.zeros(len(self.resources), dtype=np.int64)
        for name, amount in resources.items():
            row[self.resource_index[name]] = amount
        return row

    # -- updates ---------------------------------------------------------------------------------
    def upsert(self, record: NodeRecord) -> tuple[int, bool]:
        """Adds or updates a node; returns (row, added)."""
        row = self.index.get(record.name)
        added = row is None
        if row is None:
            if self._free:
                row = self._free.pop()
            else:
                if self.size == self.capacity:
                    self._grow(self.capacity * 2)
                row = self.size
                self.size += 1
                self.names.append(None)
                self.records.append(None)
            self.index[record.name] = row
            self.names[row] = record.name
            self.requested[row] = 0
            self.nonzero_requested[row] = 0
            self.present[row] = True
            self.rows_generation += 1
        previous = self.records[row]
        if added or previous != record:
            self.nodes_generation += 1
        self.records[row] = record
        self.allocatable[row] = 0
        for name, amount in record.allocatable.items():
            col = self.resource_column(name)  # may widen the arrays: look them up after
            self.allocatable[row, col] = amount
        self._sync_row(row)
        self.ready[row] = record.ready
        self.unschedulable[row] = record.unschedulable
        if previous is None or previous.taints != record.taints:
            self._release_taint_set(row)
            self.taint_set[row] = self._hold_taint_set(record.taints)
        if added or previous is None or previous.labels != record.labels:
            self._set_labels(row, record.labels, previous.labels if previous else {})
        if previous is None or previous.images != record.images:
            self._set_images(row, record.images, previous.images if previous else ())
        self.generation += 1
        return row, added

    def remove(self, name: str) -> int | None:
        row = self.index.pop(name, None)
        if row is None:
            return None
        previous = self.records[row]
        self.present[row] = False
        self.ready[row] = False
        self.names[row] = None
        self.records[row] = None
        self.allocatable[row] = 0
        self.requested[row] = 0
        self.nonzero_requested[row] = 0
        self._sync_row(row)
        self._release_taint_set(row)
        if previous:
            self._set_labels(row, {}, previous.labels)
            self._set_images(row, (), previous.images)
        self._free.append(row)
        self.generation += 1
        self.rows_generation += 1
        self.nodes_generation += 1
        return row

    def add_requests(self, row: int, requests: IntArray, nonzero: tuple[int, int], sign: int = 1) -> None:
        width = requests.shape[0]
        delta = requests if sign == 1 else sign * requests  # one product, not three (an assume adds sign 1)
        cpu, memory = sign * nonzero[0], sign * nonzero[1]
        self.requested[row, :width] += delta
        self.nonzero_requested[row, 0] += cpu
        self.nonzero_requested[row, 1] += memory
        self.free_by_resource[:width, row] -= delta
        self.requested_by_resource[:width, row] += delta
        self.nonzero_by_resource[0, row] += cpu
        self.nonzero_by_resource[1, row] += memory
        self.pods_changed(row)

    def pods_changed(self, row: int) -> None:
        """Marks the row's pods changed (rows_changed_since): add_requests does for every pod counted or uncounted,
        and a pod relabelled in place (what it holds unchanged) does on its own."""
        self.generation += 1
        self.pod_stamp += 1
        self.row_pod_stamp[row] = self.pod_stamp
        self._pod_log.append(row)

    def rows_changed_since(self, stamp: int) -> IntArray:
        """The rows whose pods changed after `stamp` (a past pod_stamp), sorted and unique: from the log of recent
        changes when it reaches back that far, else one compare over every row."""
        behind = self.pod_stamp - stamp
        if behind <= 0:
            return _NO_ROWS
        if behind <= len(self._pod_log):
            if behind == 1:
                return np.array([self._pod_log[-1]], dtype=np.int64)
            # sorted(set()) of a few dozen ints: a fraction of np.unique's cost at this size
            return np.array(sorted(set(islice(reversed(self._pod_log), behind))), dtype=np.int64)
        changed: IntArray = np.flatnonzero(self.row_pod_stamp[: self.capacity] > stamp)
        return changed

    def _hold_taint_set(self, taints: tuple[Taint, ...]) -> int:
        taint_id = self._taint_set_ids.get(taints)
        if taint_id is None:
            if self._free_taint_ids:
                taint_id = self._free_taint_ids.pop()
                self.taint_sets[taint_id] = taints
            else:
                taint_id = len(self.taint_sets)
                self.taint_sets.append(taints)
                self._taint_set_rows.append(0)
            self._taint_set_ids[taints] = taint_id
        self._taint_set_rows[taint_id] += 1
        return taint_id

    def _release_taint_set(self, row: int) -> None:
        self.taints_generation += 1
        """The row no longer holds its taint set (it leaves, or its taints change); an unused set is freed."""
        taint_id = int(self.taint_set[row])
        self.taint_set[row] = 0
        if taint_id == 0:
            return
        self._taint_set_rows[taint_id] -= 1
        if self._taint_set_rows[taint_id] == 0:
            del self._taint_set_ids[self.taint_sets[taint_id]]
            self.taint_sets[taint_id] = ()  # a free id reads as "no taints" until reused
            self._free_taint_ids.append(taint_id)
            if len(self._free_taint_ids) > len(self._taint_set_ids):
                self._compact_taint_sets()

    def _compact_taint_sets(self) -> None:
        """Renumbers the sets in use to 0..n-1 once more than half the ids are free, so `taint_sets` (which
        the taint checks loop over) stays within twice the distinct sets the current nodes hold."""
        in_use = [i for i, rows in enumerate(self._taint_set_rows) if rows > 0 or i == 0]
        remap = np.zeros(len(self.taint_sets), dtype=np.int32)
        remap[in_use] = np.arange(len(in_use), dtype=np.int32)
        self.taint_set[: self.capacity] = remap[self.taint_set[: self.capacity]]
        self.taint_sets = [self.taint_sets[i] for i in in_use]
        self._taint_set_rows = [self._taint_set_rows[i] for i in in_use]
        self._taint_set_ids = {taints: i for i, taints in enumerate(self.taint_sets)}
        self._free_taint_ids = []

    def _set_labels(self, row: int, labels: Mapping[str, str], previous: Mapping[str, str]) -> None:
        for key in set(previous) | set(labels):
            column = self._label_columns.get(key)
            if column is not None:
                column[row] = labels.get(key)
            topology = self._topologies.get(key)
            if topology is not None:
                value = labels.get(key)
                topology.codes[row] = -1 if value is None else topology.code(value)
                if topology.size > 2 * self.capacity:  # values come and go: rebuild rather than grow forever
                    del self._topologies[key]
        self.labels_generation += 1

    def _set_images(self, row: int, images: Sequence[NodeImage], previous: Sequence[NodeImage]) -> None:
        """As kube-scheduler's cache: the node's old names are removed (an image no node has any more is
        dropped), then its new names added; a name new to the cluster takes this node's size."""
        if not images and not previous:
            return
        for name in {name for image in previous for name in image.names}:
            state = self.images.get(name)
            if state is not None:
                state.discard(row)
                if not state.rows:
                    del self.images[name]
        for image in images:
            for name in image.names:
                state = self.images.get(name)
                if state is None:
                    self.images[name] = ImageState(image.size_bytes, {row})
                else:
                    state.add(row)
        self.images_generation += 1

    # -- reads -----------------------------------------------------------------------------------
    def label_column(self, key: str) -> npt.NDArray[np.object_]:
        """Each row's value of label `key` (None where absent), kept current incrementally."""
        column = self._label_columns.get(key)
        if column is None or column.shape[0] != self.capacity:
            column = np.full(self.capacity, None, dtype=object)
            for row, record in enumerate(self.records):
                if record is not None:
                    column[row] = record.labels.get(key)
            self._label_columns[key] = column
        return column

    def topology(self, key: str) -> Topology:
        """Label `key` as integer domain codes per row, kept current incrementally as labels change."""
        topology = self._topologies.get(key)
        if topology is None:
            topology = Topology(np.full(self.capacity, -1, dtype=np.int64), {}, [])
            for row, record in enumerate(self.records):
                if record is not None and (value := record.labels.get(key)) is not None:
                    topology.codes[row] = topology.code(value)
            self._topologies[key] = topology
        return topology

    def label_in(self, key: str, values: Iterable[str]) -> BoolArray:
        column = self.label_column(key)
        return np.isin(column, np.array(list(values), dtype=object))

    def label_exists(self, key: str) -> BoolArray:
        # Elementwise on the object column (one numpy call, no Python loop over nodes).
        return np.asarray(self.label_column(key) != None, dtype=bool)  # noqa: E711

    def rows(self) -> IntArray:
        return np.flatnonzero(self.present[: self.capacity])

    def name(self, row: int) -> str:
        name = self.names[row]
        if name is None:
            raise KeyError(f"row {row} holds no node")
        return name

    def names_of(self, rows: Sequence[int] | IntArray) -> list[str]:
        return [self.name(int(r)) for r in rows]
