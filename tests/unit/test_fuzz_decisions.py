"""Property test (issue 44, "Bad input, tried systematically"): whatever query string a client sends to
/decisions, the route answers (200/503) or refuses it with BadRequest (400, a message); any other exception
would be the server's 500. The query is parsed exactly as serving.http_server parses it."""

from __future__ import annotations

import dataclasses
from urllib.parse import parse_qs, quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrics_sched.audit import DecisionRing, build_record
from metrics_sched.serving.decisions import PARAMS, decisions
from metrics_sched.serving.route import BadRequest
from tests.unit.fakes import node, pod
from tests.unit.test_telemetry_scoring import make

pytestmark = pytest.mark.unit

# Values that have broken number parsers elsewhere: non-finite, past float range, past int()'s digit limit,
# underscores, whitespace, signs, NUL, non-ASCII digits.
AWKWARD = st.sampled_from([
    "", "0", "-1", "1", "5", "1000", "1001", "nan", "NaN", "inf", "-inf", "1e309", "-1e309", "1e-400", "9" * 5000,
    "1_000", " 7 ", "+3", "0x10", "\x00", "٣", "1.5", "placement", "eviction", "json", "jsonl", "ns/p", "n",
    "2e9", str(2**63), str(2**64 + 1),
])
KEYS = st.one_of(st.sampled_from(PARAMS), st.text(max_size=8))
VALUES = st.one_of(AWKWARD, st.text(max_size=20))


@st.composite
def query_strings(draw: st.DrawFn) -> str:
    pairs = draw(st.lists(st.tuples(KEYS, VALUES), max_size=5))
    encoded = "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
    return draw(st.one_of(st.just(encoded), st.text(max_size=40)))


@pytest.fixture(scope="module")
def ring() -> DecisionRing:
    scheduler, api, _ = make()
    scheduler.handlers.on_node_event("ADDED", node("n"))
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    record = build_record(result, scheduler.state.table, config_hash="h")
    ring = DecisionRing(20)
    for i in range(12):
        ring.add(dataclasses.replace(record, id=i + 1))
    return ring


TRIED = 120


@settings(max_examples=TRIED, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=query_strings())
def test_any_query_string_answers_or_is_a_400(ring: DecisionRing, query: str) -> None:
    try:
        status, _content_type, body = decisions(ring, parse_qs(query, keep_blank_values=True))
    except BadRequest as exc:
        assert str(exc).strip()  # the 400 says what is wrong
        return
    assert status in (200, 503)
    rendered = body if isinstance(body, bytes) else b"".join(body)  # rendering is part of the answer
    assert rendered
