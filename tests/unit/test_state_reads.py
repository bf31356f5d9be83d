"""ClusterState's per-pod reads that the pod watch makes for nearly every event (counted_on, record, is_placed)
answer without the state lock: a scheduling cycle holding it must not hold up the watch. Their answers stay those
of the locked versions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.resize import resource_fields
from metrics_sched.state.cluster_state import ClusterState, Placement
from tests.unit.fakes import node, pod

pytestmark = pytest.mark.unit


def labelled(name: str, labels: dict[str, str], **kw: Any) -> dict[str, Any]:
    body = pod(name, **kw)
    body["metadata"]["labels"] = labels
    return body


def _state() -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("n1"))
    state.upsert_node(node("n2"))
    return state


def _while_locked(state: ClusterState, read: Callable[[], Any]) -> Any:
    """`read()` run in a thread of its own while another thread holds the state lock; its answer, or a failure
    if it did not answer while the lock was held."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with state.lock:
            held.set()
            release.wait(30)

    answers: list[Any] = []
    reader = threading.Thread(target=lambda: answers.append(read()))
    locker = threading.Thread(target=holder)
    locker.start()
    try:
        assert held.wait(10)
        reader.start()
        reader.join(10)
        assert not reader.is_alive(), "the read waited for the state lock"
    finally:
        release.set()
        locker.join(10)
        reader.join(10)
    return answers[0]


def test_the_pod_reads_answer_while_a_cycle_holds_the_lock() -> None:
    state = _state()
    body = labelled("p", {"app": "web"}, node_name="n1")
    info = parse_pod(body)
    state.observe_bound_pod(info)
    fields = resource_fields(body)

    assert _while_locked(state, lambda: state.is_placed(info.uid)) is True
    assert _while_locked(state, lambda: state.record(info.uid)) is state.pods[info.uid]
    assert _while_locked(state, lambda: state.counted_on(info.uid, "n1", {"app": "web"}, False, fields)) is True


def test_counted_on_answers_as_the_record_stands() -> None:
    state = _state()
    body = labelled("p", {"app": "web"})
    info = parse_pod(body)
    assert not state.is_placed(info.uid) and state.record(info.uid) is None
    assert not state.counted_on(info.uid, "n1", {"app": "web"})

    state.assume(info, "n1")
    assert state.is_placed(info.uid) and state.record(info.uid) is not None
    assert not state.counted_on(info.uid, "n1", {"app": "web"}), "an assumed pod is not counted as confirmed"

    # The API server adds the node's topology labels to a pod it binds (1.36): a relabel, then counted with them.
    bound = labelled("p", {"app": "web", "topology.kubernetes.io/zone": "z1"}, node_name="n1")
    bound["metadata"]["uid"] = info.uid
    assert state.observe_bound_pod(parse_pod(bound)) is Placement.RELABELLED
    fields = resource_fields(bound)
    labels = {"app": "web", "topology.kubernetes.io/zone": "z1"}
    assert state.counted_on(info.uid, "n1", labels, False, fields)
    assert not state.counted_on(info.uid, "n1", {"app": "web"}, False, fields)
    assert not state.counted_on(info.uid, "n2", labels, False, fields)
    assert not state.counted_on(info.uid, "n1", labels, True, fields)
    assert not state.counted_on(info.uid, "n1", labels, False, b"other fields")

    state.remove_pod(info.uid)
    assert not state.is_placed(info.uid) and state.record(info.uid) is None
    assert not state.counted_on(info.uid, "n1", labels, False, fields)


def test_a_bound_pod_relabelled_in_place_counts_as_released_and_placed_again() -> None:
    """The binding adds the node's topology labels (nearly every bind): the record is relabelled in place, and the
    state is what removing the pod and adding it with its new labels gives (requests, label counts, the record);
    its row is marked changed. A change of anything else it holds or of its owner takes the full path."""
    from metrics_sched.model.selectors import LabelSelector
    from metrics_sched.state.pod_index import PodQuery, QueryTerm

    queries = [PodQuery((QueryTerm(None, LabelSelector.from_set(labels)),))
               for labels in ({"app": "a"}, {"topology.kubernetes.io/zone": "z1"}, {"app": "a", "tier": "x"})]
    def same_pod(labels: dict[str, str], **kw: Any) -> dict[str, Any]:
        body = labelled("p", labels, **kw)
        body["metadata"]["uid"] = "u-p"
        return body

    before = same_pod({"app": "a", "tier": "x"})  # pending, as assumed
    after = same_pod({"app": "a", "topology.kubernetes.io/zone": "z1"}, node_name="n1")
    after["metadata"]["annotations"] = {"metrics-sched.io/evictable": "false"}
    after["status"] = {"startTime": "2026-12-03T10:00:00Z"}

    def fingerprint(state: ClusterState) -> tuple[Any, ...]:
        record = state.record("u-p")
        assert record is not None
        fields = {k: getattr(record, k) for k in record.__slots__ if k not in ("vector", "assumed")}  # type: ignore[attr-defined]
        return (state.table.requested.tobytes(), state.table.nonzero_requested.tobytes(), record.vector.tobytes(),
                tuple(state.pod_counts(q).tobytes() for q in queries), sorted(fields.items(), key=str))

    relabelled = _state()
    for q in queries:
        relabelled.pod_counts(q)  # registered before: kept up to date as pods come and go
    relabelled.assume(parse_pod(before), "n1")
    stamp = relabelled.table.pod_stamp
    kept = relabelled.record("u-p")
    assert relabelled.observe_bound_pod(parse_pod(after)) == Placement.RELABELLED
    assert relabelled.record("u-p") is kept  # in place
    assert relabelled.table.rows_changed_since(stamp).tolist() == [relabelled.table.index["n1"]]

    fresh = _state()
    for q in queries:
        fresh.pod_counts(q)
    fresh.observe_bound_pod(parse_pod(after))
    assert fingerprint(relabelled) == fingerprint(fresh)

    # Its owner changed with its labels: released and placed again (a new record), the same state as fresh.
    owned = same_pod({"app": "b"}, node_name="n1")
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}]
    assert relabelled.observe_bound_pod(parse_pod(owned)) == Placement.RELABELLED
    assert relabelled.record("u-p") is not kept
    other = _state()
    for q in queries:
        other.pod_counts(q)
    other.observe_bound_pod(parse_pod(owned))
    assert fingerprint(relabelled) == fingerprint(other)
