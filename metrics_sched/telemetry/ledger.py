"""The in-flight ledger: load we have just placed that the telemetry cannot show yet.

A pod bound to a node adds its estimated effect (from its requests) to that node's metrics until a
sample measured after the bind covers it. Without this, a burst of pods all see the same "coldest,
idlest" node from the last scrape and herd onto it.

Both sides of "measured after the placement" are on the scheduler's own clock: a placement's time
is this store's clock (the one the MetricCache fetches with), and a sample's measured time is the
cache's, clamped to when it was fetched. A source whose clock runs ahead therefore cannot cover a
placement with a sample fetched before it; one whose clock runs behind only keeps placements counted
longer (until a later sample, its maxAge or the horizon), which errs towards spreading.

Placements are kept per metric in append-only numpy arrays (row, time, delta, alive), so the
adjustment for a decision is a few vector operations whatever the number of placements; removals
only clear the alive flag, and pruning compacts the arrays now and then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable


@dataclass(slots=True)
class _Log:
    """Placements added to a settled adjustment: per row, its entries as (index in the log, delta) in the order they
    came, and how many there are in all. Append-only: a view reads the entries below the size it was given, and a
    row without any reads the settled value."""

    by_row: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    size: int = 0

    def add(self, row: int, delta: float) -> None:
        entry = (self.size, delta)
        self.size += 1
        mine = self.by_row.get(row)
        if mine is None:
            self.by_row[row] = [entry]
        else:
            mine.append(entry)

    def __len__(self) -> int:
        return self.size


@dataclass
class _Column:
    nodes: list[str] = field(default_factory=list)
    rows: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    times: FloatArray = field(default_factory=lambda: np.zeros(0))
    deltas: FloatArray = field(default_factory=lambda: np.zeros(0))
    alive: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    size: int = 0
    rows_generation: int = -1
    # The adjustment last computed (read-only; replaced, never changed in place, since a decision record
    # may hold it) and the sample times it was computed against. A new placement updates its one row;
    # anything else (a removal, new samples, nodes moving rows) recomputes it.
    dense: FloatArray | None = None
    dense_observed: FloatArray | None = None
    # The last step: (the adjustment after it, the one before it, the rows it changed), so a reader holding the
    # older one patches those rows instead of comparing every row (InFlightLedgerStore.last_step).
    step: tuple[FloatArray, FloatArray, tuple[int, ...]] | None = None
    # Placements added to `dense` on its next read, as (row, delta) in order: a copy of the whole adjustment per
    # read, not per placement (a metric no cycle reads in between, e.g. a GPU metric between CPU pods, is copied
    # once for all of them).
    pending: _Log = field(default_factory=_Log)

    def forget_dense(self) -> None:
        self.dense = self.dense_observed = self.step = None
        self.pending = _Log()  # a new log: views (InFlightView) read the one they were given

    def current(self, observed_at: FloatArray, table: NodeTable) -> bool:
        """Whether `dense` (with `pending`) is the adjustment against these sample times over the table's rows."""
        return (self.dense is not None and self.dense_observed is observed_at
                and self.dense.shape[0] == table.capacity)

    def settle(self) -> None:
        """Adds the pending placements to a copy of `dense`, in order: the doubles the full computation gives
        (np.bincount sums each row's deltas in placement order)."""
        dense, pending = self.dense, self.pending
        if dense is None or not pending:
            return
        updated = dense.copy()
        for row, entries in pending.by_row.items():  # each row's deltas in the order they came
            for _, delta in entries:
                updated[row] += delta
        updated.flags.writeable = False
        # Ascending; an array only for the reader that patches from it (most batched cycles read none).
        changed = tuple(sorted(pending.by_row))
        self.pending = _Log()
        self.dense = updated
        self.step = (updated, dense, changed)

    def append(self, node: str, row: int, at: float, delta: float) -> int:
        if self.size == self.rows.shape[0]:
            capacity = max(64, 2 * self.size)
            self.rows = np.resize(self.rows, capacity)
            self.times = np.resize(self.times, capacity)
            self.deltas = np.resize(self.deltas, capacity)
            self.alive = np.resize(self.alive, capacity)
        index = self.size
        self.nodes.append(node)
        self.rows[index], self.times[index], self.deltas[index], self.alive[index] = row, at, delta, True
        self.size += 1
        return index


class InFlightView:
    """One metric's adjustment as it was when taken, without copying it: the last settled adjustment (read-only)
    and the placements added since (the column's log, append-only, and how many of its entries counted then).
    A row's value adds them in order to the settled one: the doubles settle() gives (the same additions in the
    same order). What a batched cycle reads (a few rows, and its evidence): a copy of the whole adjustment per
    placement was the largest part of re-scoring a placement's row."""

    __slots__ = ("base", "log", "size")

    def __init__(self, base: FloatArray, log: _Log, size: int) -> None:
        self.base, self.log, self.size = base, log, size

    def item(self, row: int) -> float:
        value: float = self.base.item(row)
        mine = self.log.by_row.get(row)
        if mine is not None:
            size = self.size
            for index, delta in mine:  # in the log's order
                if index >= size:
                    break
                value += delta
        return value

    def take(self, rows: IntArray) -> FloatArray:
        values: FloatArray = self.base.take(rows)
        size, by_row = self.size, self.log.by_row
        if not size:
            return values
        for position, row in enumerate(rows.tolist()):
            mine = by_row.get(row)
            if mine is not None and mine[0][0] < size:
                value = values.item(position)
                for index, delta in mine:  # in the log's order: the additions settle() makes
                    if index >= size:
                        break
                    value += delta
                values[position] = value
        return values


# Placements a view adds to its settled adjustment at most; beyond, the adjustment is settled first (a copy).
_VIEW_LOG = 32


@dataclass(frozen=True, slots=True)  # one per pod placed within the horizon (tens of thousands): no __dict__
class _Placement:
    node: str
    at: float
    slots: dict[str, int]  # metric -> index in that metric's column


_MIN_DEAD = 64  # below this many removed slots a column is left as it is


class InFlightLedgerStore:
    def __init__(self, *, horizon: float = 600.0, clock: Callable[[], float] = time.time) -> None:
        self.horizon = horizon
        self._clock = clock
        self._lock = threading.Lock()
        self._placements: dict[str, _Placement] = {}
        self._columns: dict[str, _Column] = {}
        self._table: NodeTable | None = None
        # Placements forgotten so far (removed, replaced or aged out): a change on rows no assume touched,
        # which ends opportunistic batches (an addition comes with an assume, on its own row).
        self.removals = 0
        self.appended: dict[str, int] = {}  # metric -> placements ever added for it (a batch reading it re-scores)
        # Placements ever added on a row of the bound table, and per row the count at its last one: what a reader
        # keeping per-row values checks (last_adds), since an addition (Reserve) comes after its assume, and another
        # thread may read in between.
        self.adds = 0
        self._row_adds: IntArray = np.zeros(0, dtype=np.int64)

    def bind_table(self, table: NodeTable) -> None:
        """The table whose rows placements refer to (set by the first adjustment otherwise)."""
        self._table = table

    def add(self, uid: str, node: str, deltas: Mapping[str, float], at: float | None = None) -> None:
        when = self._clock() if at is None else at
        with self._lock:
            self._remove(uid)
            row = self._table.index.get(node, -1) if self._table is not None else -1
            slots = {}
            columns, appended = self._columns, self.appended
            for metric, delta in deltas.items():
                column = columns.get(metric)
                if column is None:  # not setdefault(): its default, four arrays, would be built on every call
                    column = columns[metric] = _Column()
                slots[metric] = column.append(node, row, when, delta)
                self._add_to_dense(column, row, when, delta)
                appended[metric] = appended.get(metric, 0) + 1
            self._placements[uid] = _Placement(node, when, slots)
            if row >= 0 and deltas:
                self.adds += 1
                if row >= self._row_adds.shape[0]:
                    grown = np.zeros(max(row + 1, 2 * self._row_adds.shape[0]), dtype=np.int64)
                    grown[: self._row_adds.shape[0]] = self._row_adds
                    self._row_adds = grown
                self._row_adds[row] = self.adds

    def last_adds(self, rows: IntArray) -> IntArray:
        """Per row: `adds` as its last placement left it (0: none on it)."""
        with self._lock:
            row_adds = self._row_adds
            if rows.size and int(rows.max()) < row_adds.shape[0]:
                found: IntArray = row_adds[rows]
                return found
            out = np.zeros(rows.shape[0], dtype=np.int64)
            inside = rows < row_adds.shape[0]
            out[inside] = row_adds[rows[inside]]
            return out

    def _add_to_dense(self, column: _Column, row: int, when: float, delta: float) -> None:
        """The new placement's delta on its row, as the full computation would add it (last, in order), when the
        adjustment is next read."""
        dense, observed = column.dense, column.dense_observed
        if dense is None or observed is None:
            return
        if self._table is None or column.rows_generation != self._table.rows_generation:
            column.forget_dense()
            return
        if row < 0 or when < observed[row]:
            return  # not a node, or already covered by its sample
        column.pending.add(row, delta)

    def _remove(self, uid: str) -> None:
        placement = self._placements.pop(uid, None)
        if placement is not None:
            self.removals += 1
            for metric, index in placement.slots.items():
                column = self._columns[metric]
                column.alive[index] = False
                column.forget_dense()  # subtracting would not give the sum without it, bit for bit

    def remove(self, uid: str) -> None:
        with self._lock:
            self._remove(uid)

    def prune(self) -> int:
        """Forgets placements older than the horizon (every sample has covered them by then), and those the
        latest sample of each of their metrics already covers: they count no more, and samples only get newer
        (were a node's sample to turn older, a source failing over to one that lags, such a placement would not
        count again: as if that telemetry had shown it). Kept until the horizon, they were as many as the pods
        bound in it: 36,000 at 60 pods/s, ~0.5 KB each. Returns how many were forgotten."""
        cutoff = self._clock() - self.horizon
        with self._lock:
            old = [uid for uid, p in self._placements.items() if p.at < cutoff]
            for uid in old:
                self._remove(uid)
            covered = self._covered()
            for uid in covered:
                # Not counted in any kept adjustment (nor pending for it): each stays what it is, bit for bit.
                for metric, index in self._placements.pop(uid).slots.items():
                    self._columns[metric].alive[index] = False
            # Compacting rebuilds every slot map (Python work per live placement): only once the removed slots
            # are at least as many as the live ones, so its cost stays proportional to what it frees.
            for column in self._columns.values():
                dead = column.size - int(np.count_nonzero(column.alive[: column.size]))
                if dead >= max(_MIN_DEAD, column.size - dead):
                    self._compact()
                    break
            return len(old) + len(covered)

    def _covered(self) -> list[str]:
        """The placements whose every slot the samples of its metric's last read cover (time before the row's
        sample time). A metric not read since its adjustment was last dropped covers none of its slots."""
        masks: dict[str, BoolArray] = {}
        for metric, column in self._columns.items():
            observed = column.dense_observed
            if observed is None:
                continue
            rows = column.rows[: column.size]
            known = rows >= 0
            mask = np.zeros(column.size, dtype=bool)
            mask[known] = column.times[: column.size][known] < observed[rows[known]]
            masks[metric] = mask
        if not masks:
            return []
        return [uid for uid, placement in self._placements.items() if placement.slots
                and all(metric in masks and masks[metric][index] for metric, index in placement.slots.items())]

    def _compact(self) -> None:
        keep_by_metric = {}
        for metric, column in self._columns.items():
            keep = np.flatnonzero(column.alive[: column.size])
            remap = {int(old): new for new, old in enumerate(keep)}
            keep_by_metric[metric] = remap
            self._columns[metric] = _Column(
                nodes=[column.nodes[i] for i in keep], rows=column.rows[keep].copy(),
                times=column.times[keep].copy(), deltas=column.deltas[keep].copy(),
                alive=np.ones(keep.size, dtype=bool), size=int(keep.size), rows_generation=column.rows_generation)
        for uid, placement in list(self._placements.items()):
            slots = {m: keep_by_metric[m][i] for m, i in placement.slots.items()}
            self._placements[uid] = _Placement(placement.node, placement.at, slots)

    def __len__(self) -> int:
        # No lock: len() of a dict is one atomic read under the GIL, and stale the moment it returns either way.
        return len(self._placements)

    def by_node(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for placement in self._placements.values():
                counts[placement.node] = counts.get(placement.node, 0) + 1
            return counts

    def recent_counts(self, metric: str, table: NodeTable, observed_at: FloatArray, window: float) -> IntArray:
        """Per row: how many live placements of `metric`'s column were made in the last `window` seconds and are not
        covered yet by the row's sample (made at or after `observed_at`): the pods a node received that its
        telemetry cannot show yet (HotValue). A pass over the column's arrays, no loop over placements or nodes."""
        since = self._clock() - window
        with self._lock:
            column = self._column(metric, table)
            rows = column.rows[: column.size]
            times = column.times[: column.size]
            live = column.alive[: column.size] & (rows >= 0) & (times >= since)
            rows, times = rows[live], times[live]
            if rows.size == 0:
                return np.zeros(table.capacity, dtype=np.int64)
            uncovered = times >= observed_at[rows]
            counts: IntArray = np.bincount(rows[uncovered], minlength=table.capacity)[: table.capacity]
            return counts

    def last_step(self, metric: str) -> tuple[FloatArray, FloatArray, tuple[int, ...]] | None:
        """The metric's last step as (the adjustment after it, the adjustment before it, the rows it changed,
        ascending): the
        placements since the adjustment was last read. None after anything else (a removal, new samples, rows
        moving). One attribute read: no lock."""
        column = self._columns.get(metric)
        return column.step if column is not None else None

    def view(self, metric: str, table: NodeTable, observed_at: FloatArray) -> InFlightView:
        """adjustment() as an InFlightView: the placements since it was last settled are not added to a copy of it
        (up to _VIEW_LOG of them), so reading a few rows costs a few additions."""
        with self._lock:
            column = self._column(metric, table)
            dense = column.dense
            if dense is not None and column.current(observed_at, table) and len(column.pending) <= _VIEW_LOG:
                return InFlightView(dense, column.pending, len(column.pending))
        return InFlightView(self.adjustment(metric, table, observed_at), _Log(), 0)

    def _column(self, metric: str, table: NodeTable) -> _Column:
        """The metric's column, its rows those of `table` (under the lock)."""
        if self._table is not table:
            self._table = table
            for each in self._columns.values():
                each.rows_generation = -1
                each.forget_dense()
        column = self._columns.get(metric)
        if column is None:
            column = self._columns[metric] = _Column()
        if column.rows_generation != table.rows_generation:
            # Nodes came or went since: look the rows up again (rare).
            column.rows[: column.size] = [table.index.get(n, -1) for n in column.nodes]
            column.rows_generation = table.rows_generation
            column.forget_dense()
        return column

    def adjustment(self, metric: str, table: NodeTable, observed_at: FloatArray) -> FloatArray:
        """Per row: the summed deltas of placements made after that row's sample was measured (read-only;
        the same array until a placement, a removal or new samples change it)."""
        with self._lock:
            column = self._column(metric, table)
            if column.dense is not None and column.current(observed_at, table):
                column.settle()
                return column.dense
            rows = column.rows[: column.size]
            live = column.alive[: column.size] & (rows >= 0)
            rows = rows[live]
            times = column.times[: column.size][live]
            deltas = column.deltas[: column.size][live]
            if rows.size == 0:
                adjusted: FloatArray = np.zeros(table.capacity)
            else:
                # a sample taken at the bind instant cannot show it yet
                uncovered = times >= observed_at[rows]
                adjusted = np.bincount(rows[uncovered], weights=deltas[uncovered], minlength=table.capacity)[
                    : table.capacity].astype(np.float64)
            adjusted.flags.writeable = False
            column.dense, column.dense_observed = adjusted, observed_at
            column.pending = _Log()  # counted in the sums above
            return adjusted
