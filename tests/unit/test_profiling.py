"""The /debug profiling endpoints: the all-threads sampler, its formats, the heap snapshot, the thread dump."""

from __future__ import annotations

import itertools
import json
import threading
import tracemalloc
from collections import Counter
from collections.abc import Iterator

import pytest

from metrics_sched.config import parse_config
from metrics_sched.plugins import in_tree_registry
from metrics_sched.profiling import Frame, Profile, ProfilerBusy, SamplingProfiler
from metrics_sched.profiling.formats import collapsed, speedscope
from metrics_sched.profiling.sampler import sample
from metrics_sched.serving.debug import MAX_SECONDS, DebugEndpoints
from metrics_sched.serving.route import BadRequest
from tests.polling import poll

CATALOG = in_tree_registry(third_party=False).catalog()


def parked_in_a_known_function(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait(30)


@pytest.fixture
def parked() -> Iterator[threading.Thread]:
    """A named thread waiting inside parked_in_a_known_function until the test ends."""
    ready, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=parked_in_a_known_function, args=(ready, release), name="parked-worker")
    thread.start()
    assert ready.wait(10)
    try:
        yield thread
    finally:
        release.set()
        thread.join(10)


def test_sampler_records_every_other_thread_by_name_root_first(parked: threading.Thread) -> None:
    # A clock that moves 1 ms per reading: 0.1 s of it is ~20 ticks however long a tick really takes (on a busy
    # machine the first tick alone outlasted a real 0.1 s, and the profile ended after one).
    readings = itertools.count()
    profile = sample(0.1, 200, clock=lambda: next(readings) / 1000)
    assert profile.ticks >= 2 and profile.interval == pytest.approx(0.005)
    stacks = [stack for (thread, stack), _ in profile.samples.items() if thread == "parked-worker"]
    assert stacks, f"no sample of the parked thread in {sorted({t for t, _ in profile.samples})}"
    names = [f.name for f in stacks[0]]
    assert names[0] == "Thread._bootstrap"  # root first ...
    assert names.index("parked_in_a_known_function") < len(names) - 1  # ... leaf (the wait) last
    frame = next(f for f in stacks[0] if f.name == "parked_in_a_known_function")
    assert frame.file == "tests/unit/test_profiling.py"
    # The sampling (calling) thread is left out: it would only show itself sampling.
    assert threading.current_thread().name not in {t for t, _ in profile.samples}
    # Every tick sees the parked thread once.
    assert sum(n for (t, _), n in profile.samples.items() if t == "parked-worker") == profile.ticks


def test_sampler_stops_early_when_told() -> None:
    stop = threading.Event()
    stop.set()
    profile = sample(30, 100, stop=stop)
    assert profile.ticks == 1 and profile.duration < 5


def test_sampler_refuses_a_rate_out_of_range() -> None:
    with pytest.raises(ValueError, match="hz"):
        sample(1, 0)


def test_one_profile_at_a_time(parked: threading.Thread) -> None:
    profiler = SamplingProfiler()
    first = threading.Thread(target=profiler.profile, args=(30, 10))
    first.start()
    try:
        poll(lambda: profiler._lock.locked(), 10, "the first profile running")
        with pytest.raises(ProfilerBusy):
            profiler.profile(1, 10)
    finally:
        profiler.stop.set()
        first.join(10)
    assert not profiler._lock.locked()


def handmade() -> Profile:
    a, b, c = Frame("main", "app.py", 1), Frame("loop", "app.py", 10), Frame("odd;name", "x.py", 3)
    return Profile(interval=0.01, duration=0.05, ticks=5,
                   samples=Counter({("loop thread", (a, b)): 3, ("loop thread", (a,)): 1, ("other", (c,)): 1}))


def test_collapsed_stacks_one_line_per_stack_most_first_separators_escaped() -> None:
    assert collapsed(handmade()).splitlines() == [
        "loop thread;main (app.py:1);loop (app.py:10) 3",
        "loop thread;main (app.py:1) 1",
        "other;odd:name (x.py:3) 1",
    ]


def test_speedscope_one_sampled_profile_per_thread_with_shared_frames() -> None:
    doc = speedscope(handmade())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    assert [f["name"] for f in frames] == ["main", "loop", "odd;name"]
    loop, other = doc["profiles"]
    assert loop["name"] == "loop thread" and loop["type"] == "sampled" and loop["unit"] == "seconds"
    assert loop["samples"] == [[0, 1], [0]] and loop["weights"] == pytest.approx([0.03, 0.01])
    assert loop["endValue"] == pytest.approx(0.04)
    assert other["samples"] == [[2]]
    json.dumps(doc)  # serialisable as is


def test_profile_endpoint_answers_collapsed_and_speedscope(parked: threading.Thread) -> None:
    endpoints = DebugEndpoints()
    status, content_type, body = endpoints.profile({"seconds": ["1"], "hz": ["50"]})
    assert status == 200 and content_type.startswith("text/plain") and isinstance(body, bytes)
    assert "parked-worker;" in body.decode() and "parked_in_a_known_function" in body.decode()
    status, content_type, body = endpoints.profile({"seconds": ["1"], "hz": ["20"], "format": ["speedscope"]})
    assert status == 200 and content_type == "application/json" and isinstance(body, bytes)
    assert "parked-worker" in [p["name"] for p in json.loads(body)["profiles"]]


@pytest.mark.parametrize("query, message", [
    ({"seconds": [str(MAX_SECONDS + 1)]}, "seconds"),
    ({"seconds": ["0"]}, "seconds"),
    ({"hz": ["5000"]}, "hz"),
    ({"format": ["pprof"]}, "format"),
    ({"second": ["1"]}, "unknown parameter"),
])
def test_profile_endpoint_refuses_bad_parameters(query: dict[str, list[str]], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        DebugEndpoints().profile(query)


def test_a_second_concurrent_profile_is_answered_429(parked: threading.Thread) -> None:
    endpoints = DebugEndpoints()
    first = threading.Thread(target=endpoints.profile, args=({"seconds": ["20"], "hz": ["10"]},))
    first.start()
    try:
        poll(lambda: endpoints.profiler._lock.locked(), 10, "the first profile running")
        status, _, _ = endpoints.profile({"seconds": ["1"]})
        assert status == 429
    finally:
        endpoints.profiler.stop.set()
        first.join(10)


def allocate_here() -> list[bytes]:
    return [bytes(1000) + bytes([i % 256]) for i in range(2000)]


def test_heap_snapshot_only_on_demand_and_shows_what_grew() -> None:
    assert not tracemalloc.is_tracing()
    endpoints = DebugEndpoints()
    assert endpoints.heap({})[0] == 409  # never traces by itself
    try:
        status, _, body = endpoints.heap({"start": ["1"]})
        assert status == 200 and tracemalloc.is_tracing()
        kept = allocate_here()
        status, _, body = endpoints.heap({"top": ["5"]})
        assert isinstance(body, bytes)
        report = body.decode()
        assert status == 200 and "by growth since ?start=1" in report
        assert "tests/unit/test_profiling.py" in report.splitlines()[2], report
        status, _, body = endpoints.heap({"diff": ["0"], "key": ["filename"]})
        assert status == 200 and isinstance(body, bytes) and "live allocation sites" in body.decode()
        assert len(kept) == 2000
        with pytest.raises(BadRequest, match="key"):
            endpoints.heap({"key": ["size"]})
    finally:
        assert endpoints.heap({"stop": ["1"]})[0] == 200
    assert not tracemalloc.is_tracing()


def test_thread_dump_names_every_thread_with_its_stack(parked: threading.Thread) -> None:
    status, _, body = DebugEndpoints().threads({})
    assert status == 200 and isinstance(body, bytes)
    dump = body.decode()
    assert f"{threading.active_count()} threads" in dump
    assert "Thread 'parked-worker'" in dump and "in parked_in_a_known_function" in dump
    assert "Thread 'MainThread'" in dump


@pytest.mark.parametrize("value, expected", [(None, False), (True, True), (False, False)])
def test_enable_profiling_is_read_from_the_config(value: bool | None, expected: bool) -> None:
    data = {} if value is None else {"enableProfiling": value}
    assert parse_config(data, CATALOG).enable_profiling is expected


def test_flame_graph_renders_collapsed_stacks_as_svg() -> None:
    from xml.etree import ElementTree

    from bench.flame import build_tree, parse_collapsed, render_svg

    stacks = parse_collapsed(collapsed(handmade()).splitlines())
    assert stacks[0] == (["loop thread", "main (app.py:1)", "loop (app.py:10)"], 3)
    tree = build_tree(stacks)
    assert tree.count == 5 and tree.children["loop thread"].children["main (app.py:1)"].count == 4
    svg = ElementTree.fromstring(render_svg(stacks, "a <test>"))
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text or "" for t in svg.iter(f"{ns}title")]
    assert len(titles) == 6  # all, two threads, main, loop, odd:name
    assert "loop (app.py:10): 3 samples (60.00%)" in titles
