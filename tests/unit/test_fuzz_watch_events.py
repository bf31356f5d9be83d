"""Property test (issue 44, "Bad input, tried systematically"): whatever lines a watch stream carries (bytes
that are not JSON, JSON that is not an event, events whose object or metadata has the wrong shape), the
reflector drops each bad event, counts it (ReflectorStats.dropped_events), and the watch goes on: the
well-formed event sent after them is still delivered, on the same watch, with no error in the loop."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.reflector import Reflector, ReflectorOptions
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.ports import EventType, KubeObject

pytestmark = pytest.mark.unit

PODS = "/api/v1/pods"
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
JSON = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(value, value, JSON)


METADATA = st.fixed_dictionaries({}, optional={
    "name": maybe(st.sampled_from(["p", "q", ""])), "namespace": maybe(st.sampled_from(["ns", ""])),
    "uid": maybe(st.sampled_from(["u1", "u2"])), "resourceVersion": maybe(st.sampled_from(["5", "6", ""])),
    "managedFields": JSON})
EVENTS = st.fixed_dictionaries({"type": maybe(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "X"]))},
                               optional={"object": maybe(st.fixed_dictionaries(
                                   {"kind": maybe(st.just("Pod"))}, optional={"metadata": maybe(METADATA)}))})
LINES = st.one_of(EVENTS.map(lambda e: json.dumps(e).encode()), EVENTS.map(lambda e: json.dumps(e).encode()),
                  JSON.map(lambda v: json.dumps(v).encode()),
                  st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
                  EVENTS.map(lambda e: json.dumps(e).encode()[:-3]))
# The event after the fuzzed ones: delivered only if the watch went on past them.
SENTINEL = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "sentinel", "namespace": "ns",
                                                                     "uid": "s", "resourceVersion": "99"}}}


class Watch:
    """The fake API server: an empty LIST, one watch carrying `body`, then the reflector asked to stop."""

    def __init__(self, body: list[bytes]) -> None:
        self.body = body
        self.watches = 0
        self.reflector: Reflector | None = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") != "true":
            return httpx.Response(200, json={"kind": "PodList", "apiVersion": "v1",
                                             "metadata": {"resourceVersion": "1"}, "items": []})
        self.watches += 1
        if self.watches > 1:
            assert self.reflector is not None
            self.reflector.request_stop()
            return httpx.Response(200, content=b"")
        return httpx.Response(200, content=iter(self.body))


def chunked(lines: list[bytes], cuts: list[int]) -> list[bytes]:
    """The stream as the transport might deliver it: lines joined, then cut anywhere."""
    data = b"\n".join(lines) + b"\n"
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def expected_drops(lines: list[bytes]) -> int | None:
    """How many of `lines` the reflector must drop; None when one is an ERROR event (which ends the watch)."""
    drops = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            event = None
        if not isinstance(event, dict):
            drops += 1
            continue
        obj = event.get("object")
        if event.get("type") == "ERROR" and isinstance(obj, dict):
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            drops += 1
    return drops


TRIED = 150
FAST = ReflectorOptions(backoff_initial=0.001, backoff_max=0.001)


@settings(max_examples=TRIED, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(LINES, max_size=6), cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_bad_watch_events_are_dropped_and_counted_and_the_watch_goes_on(lines: list[bytes],
                                                                        cuts: list[int]) -> None:
    fake = Watch(chunked([*lines, json.dumps(SENTINEL).encode()], cuts))
    delivered: list[tuple[EventType, KubeObject]] = []
    config = KubeConfig(server="https://kube.test", token=StaticToken("t"))
    with KubeClient(config, transport=httpx.MockTransport(fake.handle)) as client:
        reflector = Reflector(client, "pods", PODS, lambda kind, obj: delivered.append((kind, obj)), lambda: None,
                              options=FAST, rng=random.Random(1))
        fake.reflector = reflector
        reflector.run()  # in this thread: returns once the second watch asked it to stop
    stats = reflector.stats()
    drops = expected_drops(lines)
    if drops is None:  # a well-formed ERROR event: the watch rightly ends there (an error, or a relist)
        return
    assert stats.dropped_events == drops
    assert stats.errors == 0, "a bad event ended the watch"
    assert fake.watches == 2 and stats.watch_restarts == 1
    names = [(kind, (obj.get("metadata") or {}).get("name")) for kind, obj in delivered]
    assert ("ADDED", "sentinel") in names
    assert stats.resource_version == "99"


