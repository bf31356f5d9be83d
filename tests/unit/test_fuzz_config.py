"""Property test (issue 44, "Bad input, tried systematically"): any file given to `metrics-sched check-config`
(the loader, the telemetry sources it builds, the schema check) exits 0, or 2 with one line naming the file
and, for a document that parsed, the field; never another exception. The documents are drawn from the
config's own JSON Schema (metrics_sched.config.schema), each value sometimes of a wrong type, out of range,
non-finite, huge, or an unknown key, plus sources of every type with fuzzed fields; then some are cut short,
given non-UTF-8 bytes or YAML that PyYAML cannot build."""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from metrics_sched.app.cli import main
from metrics_sched.config.schema import json_schema

pytestmark = pytest.mark.unit

NUMBERS = st.sampled_from([0, 1, -1, 3, 100, 101, 0.5, -0.0, 2**63, -(2**63) - 1, 10**30, 1e308, float("nan"),
                           float("inf"), float("-inf")])
STRINGS = st.sampled_from(["", "1s", "1m30s", "-1s", "10", "nan", "1e400s", "999999999h", "metrics-sched",
                           "default-scheduler", "https://127.0.0.1:9090", "http://p", "x" * 300, "a/b", "\u00e9",
                           "prometheus", "metrics-server", "custom-metrics", "cmdb", "one", "all", "NodeAffinity",
                           "GPUTemperature", "DefaultPreemption", "*", "1Gi", "2024-05-01T10:00:00Z"])
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS, st.text(max_size=6))
WRONG = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                     st.dictionaries(st.text(max_size=5), inner, max_size=2)),
                     max_leaves=6)


def from_schema(node: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for a schema node: mostly of its shape (enums, ranges' edges), sometimes anything at all."""
    if depth > 6:
        return LEAVES
    options: list[st.SearchStrategy[Any]] = []
    for alternative in node.get("anyOf", []) + node.get("oneOf", []):
        options.append(from_schema(alternative, depth + 1))
    if "enum" in node:
        options.append(st.sampled_from(node["enum"]))
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if "properties" in node or "object" in types:
        properties = node.get("properties", {})
        fields = {k: from_schema(v, depth + 1) for k, v in properties.items()}
        extra = node.get("additionalProperties")
        values = (st.dictionaries(st.text(max_size=6), from_schema(extra, depth + 1), max_size=2)
                  if isinstance(extra, dict) else st.just({}))
        options.append(st.tuples(values, st.fixed_dictionaries({}, optional=fields)).map(lambda t: {**t[0], **t[1]}))
    if "array" in types or "items" in node:
        options.append(st.lists(from_schema(node.get("items", {}), depth + 1), max_size=2))
    if "integer" in types or "number" in types:
        edges = [node[k] for k in ("minimum", "maximum", "exclusiveMinimum") if k in node]
        options.append(st.one_of(NUMBERS, st.sampled_from(edges or [0])))
    if "string" in types:
        options.append(STRINGS)
    if "boolean" in types:
        options.append(st.booleans())
    if "null" in types:
        options.append(st.none())
    shaped = st.one_of(*options) if options else WRONG
    return st.one_of(shaped, shaped, shaped, shaped, WRONG)


SOURCE_FIELDS = {
    "url": STRINGS, "interval": STRINGS, "timeout": st.one_of(NUMBERS, STRINGS), "maxResponseBytes": NUMBERS,
    "metrics": st.lists(st.fixed_dictionaries({}, optional={"name": STRINGS, "query": STRINGS, "preset": STRINGS,
                                                             "scale": NUMBERS}), max_size=2),
    "nodeMetrics": st.lists(st.fixed_dictionaries({}, optional={"name": STRINGS, "metric": STRINGS,
                                                                 "selector": STRINGS}), max_size=2),
    "nodeKey": STRINGS, "fields": st.dictionaries(STRINGS, st.one_of(STRINGS, WRONG), max_size=2),
    "pagination": WRONG, "auth": WRONG, "tls": WRONG, "preset": STRINGS,
}
SOURCES = st.lists(st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "a"]),
     "type": st.sampled_from(["prometheus", "metrics-server", "custom-metrics", "cmdb", "nope"])},
    optional={k: st.one_of(v, WRONG) for k, v in SOURCE_FIELDS.items()}), max_size=2)
DOCUMENTS = st.one_of(from_schema(json_schema()),
                      st.tuples(from_schema(json_schema()), SOURCES).map(
                          lambda t: {**t[0], "sources": t[1]} if isinstance(t[0], dict) else t[0]))
# YAML that PyYAML cannot build, that aliases itself, or that is not YAML at all.
AWKWARD = st.sampled_from([
    b"podMaxBackoffSeconds: 2024-13-45\n", b"bindWorkers: " + b"9" * 5000 + b"\n", b"profiles: " + b"[" * 3000,
    b"metrics: &x {a: *x}\n", b"profiles: &p [*p]\n", b"? [a]\n: b\n", b"!!python/name:os.system\n", b"\t:\n",
    b"profiles:\n- schedulerName: caf\xe9\n", b"\xff\xfe\x00", b"%YAML 9.9\n---\n", b"a: !!binary ~\n",
])


def as_yaml(document: Any) -> bytes:
    return yaml.safe_dump(document, allow_unicode=True).encode()


FILES = st.one_of(DOCUMENTS.map(as_yaml), DOCUMENTS.map(as_yaml), DOCUMENTS.map(as_yaml), AWKWARD,
                  st.tuples(DOCUMENTS.map(as_yaml), st.integers(min_value=0, max_value=300)).map(lambda t: t[0][:t[1]]),
                  st.tuples(DOCUMENTS.map(as_yaml), st.integers(min_value=0, max_value=300)).map(
                      lambda t: t[0][:t[1]] + b"\x80" + t[0][t[1]:]),
                  st.binary(max_size=40))


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("configs")


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    # check-config logs nothing it prints; the sources it builds and closes may log: not this test's subject.
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


_names = itertools.count()
TRIED = 120


@settings(max_examples=TRIED, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(text=FILES)
def test_check_config_exits_0_or_2_naming_the_field(directory: Path, quiet_logs: None, text: bytes) -> None:
    path = directory / f"config-{next(_names)}.yaml"
    path.write_bytes(text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code: object = main(["check-config", str(path)])
        except SystemExit as exc:
            code = exc.code
    message = err.getvalue()
    event(f"exit {code}")
    if code == 0:
        assert message == ""
        return
    assert code == 2, message
    [line] = message.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"invalid config {path}: ")
    assert line.removeprefix(f"invalid config {path}: ").strip()
