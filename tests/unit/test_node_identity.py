"""Node identity across exporters: each resolution rule with real label sets (tests/unit/data/exporters),
the order of the rules, ports and IPv6, short name vs FQDN both ways, and the unmatched-series report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.prometheus.config import MetricSpec
from adapters.prometheus.node_names import BUILT_IN_LABELS, IndexCache, NodeIndex, strip_port
from adapters.prometheus.series import PART_LABEL, UNMATCHED_EXAMPLES, reduce_result
from metrics_sched.app.cli.sources import render_series_matching
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry.health import SourceHealth

DATA = Path(__file__).parent / "data" / "exporters"
EXPORTERS = ("dcgm_exporter", "node_exporter_kube_prometheus_stack", "opencost")


def _cluster() -> NodeDirectory:
    nodes = json.loads((DATA / "nodes.json").read_text())["nodes"]
    return NodeDirectory(
        names=frozenset(n["name"] for n in nodes),
        by_internal_ip={n["internalIP"]: n["name"] for n in nodes},
        cpu_allocatable={}, memory_allocatable={},
        hostnames={n["hostname"]: n["name"] for n in nodes},
    )


CLUSTER = _cluster()
INDEX = NodeIndex(CLUSTER)


def _cases() -> list[Any]:
    out = []
    for exporter in EXPORTERS:
        for case in json.loads((DATA / f"{exporter}.json").read_text())["series"]:
            out.append(pytest.param(case, id=f"{exporter}: {case['about'][:60]}"))
    return out


@pytest.mark.parametrize("case", _cases())
def test_real_exporter_series_resolve_by_the_expected_rule(case: dict[str, Any]) -> None:
    match = INDEX.resolve(case["labels"], tuple(case.get("configured", ())))
    assert (match.node, match.rule) == (case["node"], case["rule"])


def test_the_test_data_exercise_every_rule() -> None:
    rules = {c.values[0]["rule"] for c in _cases()}
    kinds = {rule.partition("/")[2] for rule in rules}
    assert {"internal_ip", "hostname_label", "short_name", "fqdn"} <= kinds
    assert {"kubernetes_node", "nodename", "Hostname", "instance", "node", "exported_node"} <= rules
    assert "" in rules  # unmatched series too


def directory(*nodes: tuple[str, str, str]) -> NodeDirectory:
    """(name, InternalIP, kubernetes.io/hostname label) per node."""
    return NodeDirectory(names=frozenset(n for n, _, _ in nodes), by_internal_ip={ip: n for n, ip, _ in nodes if ip},
                         cpu_allocatable={}, memory_allocatable={}, hostnames={h: n for n, _, h in nodes if h})


TWO = NodeIndex(directory(("n1", "10.0.0.1", "n1"), ("n2", "10.0.0.2", "n2"), ("n3", "10.0.0.3", "n3")))


@pytest.mark.parametrize(("labels", "node", "rule"), [
    # The built-in label order, each label beating every later one (all naming different nodes).
    ({"node": "n1", "kubernetes_node": "n2"}, "n1", "node"),
    ({"node": "n1", "instance": "10.0.0.2:9100"}, "n1", "node"),  # node wins over instance
    ({"instance": "n2:9100", "node": "n1"}, "n1", "node"),
    ({"kubernetes_node": "n2", "nodename": "n3"}, "n2", "kubernetes_node"),
    ({"nodename": "n3", "hostname": "n1"}, "n3", "nodename"),
    ({"hostname": "n1", "Hostname": "n2"}, "n1", "hostname"),
    ({"Hostname": "n2", "instance": "n3:9100"}, "n2", "Hostname"),
    ({"instance": "n3:9100", "exported_node": "n1"}, "n3", "instance"),
    ({"exported_node": "n1", "exported_instance": "n2"}, "n1", "exported_node"),
    ({"exported_instance": "n2:9100"}, "n2", "exported_instance"),
    # Any name match beats any InternalIP match, which beats host-name matching.
    ({"node": "10.0.0.1", "exported_instance": "n2"}, "n2", "exported_instance"),
    ({"hostname": "n1.example.com", "instance": "10.0.0.3:9100"}, "n3", "instance/internal_ip"),
    # A value that names nothing does not stop the search (DCGM's Hostname = its pod's name).
    ({"Hostname": "nvidia-dcgm-exporter-xpn6b", "instance": "10.0.0.2:9400"}, "n2", "instance/internal_ip"),
    ({"job": "node-exporter"}, None, ""),
])
def test_rule_order(labels: dict[str, str], node: str | None, rule: str) -> None:
    match = TWO.resolve(labels)
    assert (match.node, match.rule) == (node, rule)


def test_configured_labels_come_first_with_every_kind_of_match() -> None:
    labels = {"node": "n1", "gpu_host": "10.0.0.2:9400", "rack_host": "n3.lab.example.org"}
    assert TWO.resolve(labels).node == "n1"
    assert (TWO.resolve(labels, ("gpu_host",)).node, TWO.resolve(labels, ("gpu_host",)).rule) == \
        ("n2", "gpu_host/internal_ip")
    assert TWO.resolve(labels, ("rack_host",)).rule == "rack_host/fqdn"
    # A configured label that names nothing falls back to the built-in chain.
    assert TWO.resolve({"node": "n1", "gpu_host": "elsewhere"}, ("gpu_host",)).rule == "node"
    assert TWO.resolve({"gpu_host": "elsewhere"}, ("gpu_host",)).had_label


@pytest.mark.parametrize(("instance", "host"), [
    ("10.0.0.1:9100", "10.0.0.1"), ("node-a:9100", "node-a"), ("[fd00::6]:9100", "fd00::6"),
    ("fd00::6", "fd00::6"), ("node-a", "node-a"), ("node-a:metrics", "node-a:metrics"), ("[fd00::6]", "fd00::6"),
])
def test_strip_port(instance: str, host: str) -> None:
    assert strip_port(instance) == host


def test_ports_and_ipv6_spellings() -> None:
    index = NodeIndex(directory(("v6", "fd00:10:0:1::5", ""), ("v4", "10.0.0.9", "")))
    assert index.resolve({"instance": "[fd00:10:0:1::5]:9100"}).node == "v6"
    assert index.resolve({"instance": "[fd00:10:0:1:0:0:0:5]:9100"}).node == "v6"  # same address, long form
    assert index.resolve({"instance": "fd00:10:0:1::5"}).node == "v6"  # bare IPv6: no port to strip
    assert index.resolve({"exported_instance": "10.0.0.9:9100"}).rule == "exported_instance/internal_ip"
    assert index.resolve({"instance": "10.0.0.9"}).rule == "instance/internal_ip"
    assert index.resolve({"instance": "10.0.0.10:9100"}).node is None


def test_short_name_and_fqdn_both_ways() -> None:
    index = NodeIndex(directory(
        ("ip-10-0-1-5.ec2.internal", "10.0.1.5", "ip-10-0-1-5.ec2.internal"),  # EKS: FQDN node
        ("gpu-07", "192.168.10.7", "gpu-07"),  # on-prem: short node
        ("worker-1", "", "worker-1.lab.example.org"),  # hostname label holds the FQDN
    ))
    assert (index.resolve({"Hostname": "ip-10-0-1-5"}).node, index.resolve({"Hostname": "ip-10-0-1-5"}).rule) == \
        ("ip-10-0-1-5.ec2.internal", "Hostname/short_name")
    assert (index.resolve({"nodename": "gpu-07.dc1.example.com"}).node,
            index.resolve({"nodename": "gpu-07.dc1.example.com"}).rule) == ("gpu-07", "nodename/fqdn")
    assert index.resolve({"hostname": "worker-1.lab.example.org"}).rule == "hostname/hostname_label"
    assert index.resolve({"hostname": "worker-1.other.example.org"}).rule == "hostname/fqdn"
    # Two FQDNs of different domains are different hosts; an IPv4 address is no FQDN.
    assert index.resolve({"hostname": "ip-10-0-1-5.us-west-2.compute.internal"}).node is None
    assert index.resolve({"instance": "192.168.10.8:9100"}).node is None


def test_an_ambiguous_short_name_matches_no_node() -> None:
    index = NodeIndex(directory(("a.zone1.internal", "", ""), ("a.zone2.internal", "", ""),
                                ("b.zone1.internal", "", "")))
    assert index.resolve({"Hostname": "a"}).node is None
    assert index.resolve({"Hostname": "b"}).node == "b.zone1.internal"
    assert index.resolve({"Hostname": "a.zone2.internal"}).rule == "Hostname"


def test_the_index_is_rebuilt_only_when_node_identities_change() -> None:
    cache = IndexCache()
    first = cache.index(CLUSTER)
    same = NodeDirectory(names=frozenset(CLUSTER.names), by_internal_ip=dict(CLUSTER.by_internal_ip),
                         cpu_allocatable={"gpu-07": 8.0}, memory_allocatable={}, hostnames=dict(CLUSTER.hostnames))
    assert cache.index(CLUSTER) is first and cache.index(same) is first
    moved = NodeDirectory(names=CLUSTER.names, by_internal_ip={**CLUSTER.by_internal_ip, "10.9.9.9": "gpu-07"},
                          cpu_allocatable={}, memory_allocatable={}, hostnames=CLUSTER.hostnames)
    rebuilt = cache.index(moved)
    assert rebuilt is not first and rebuilt.resolve({"instance": "10.9.9.9:9100"}).node == "gpu-07"


def test_resolution_is_fast_for_5000_nodes_and_many_series() -> None:
    n = 5000
    names = [f"ip-10-{i // 250}-{i % 250}-1.ec2.internal" for i in range(n)]
    nodes = NodeDirectory(names=frozenset(names),
                          by_internal_ip={f"10.{i // 250}.{i % 250}.1": names[i] for i in range(n)},
                          cpu_allocatable={}, memory_allocatable={}, hostnames={name: name for name in names})
    started = time.perf_counter()
    index = NodeIndex(nodes)
    series = [{"Hostname": f"nvidia-dcgm-exporter-{i}", "instance": f"10.{i // 250}.{i % 250}.1:9400", "gpu": str(g)}
              for i in range(n) for g in range(2)]
    assert all(index.resolve(labels).rule == "instance/internal_ip" for labels in series)
    # A generous bound for a shared 2-core machine; a per-series scan over the nodes would take minutes.
    assert time.perf_counter() - started < 5.0


# -- the coverage report -----------------------------------------------------------------------------


def _metric(configured: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec(name="gpu_temp", query="DCGM_FI_DEV_GPU_TEMP", timestamp_query="timestamp(DCGM_FI_DEV_GPU_TEMP)",
                      aggregation="max", node_labels=configured)


def _answer(labels_list: list[dict[str, str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for labels in labels_list:
        value: dict[str, str] = {**labels, PART_LABEL: "v"}
        stamp: dict[str, str] = {**labels, PART_LABEL: "t"}
        out += [{"metric": value, "value": [1000.0, "61"]}, {"metric": stamp, "value": [1000.0, "999.5"]}]
    return out


def test_reduce_counts_matches_per_rule_and_keeps_unmatched_label_sets() -> None:
    dcgm = [c.values[0]["labels"] for c in _cases() if c.values[0]["labels"]["__name__"].startswith("DCGM")]
    strays = [{"Hostname": f"i-0stray{i}", "instance": f"10.99.0.{i}:9400"} for i in range(UNMATCHED_EXAMPLES + 3)]
    reduced = reduce_result(_metric(), _answer(dcgm + strays + [{"job": "x"}]), INDEX)
    matching = reduced.matching()
    assert matching.matched == {"kubernetes_node": 1, "Hostname": 1, "instance/internal_ip": 1, "Hostname/fqdn": 1,
                                "Hostname/short_name": 1, "Hostname/hostname_label": 1}
    assert matching.unmatched == 1 + len(strays) + 1 == reduced.unmatched
    assert len(matching.unmatched_examples) == UNMATCHED_EXAMPLES
    assert matching.unmatched_examples[0]["Hostname"] == "i-030791dc5a37cd257"
    assert all(PART_LABEL not in labels for labels in matching.unmatched_examples)
    assert reduced.dropped == {"unknown_node": len(strays) + 1, "no_node_label": 1}


def test_sources_shows_matching_per_metric_and_the_unmatched_series() -> None:
    health = SourceHealth(name="prom", interval=10.0, metrics=["gpu_temp", "cost"])
    reduced = reduce_result(_metric(), _answer([{"node": "gpu-07"}, {"instance": "10.0.1.5:9400"},
                                                {"Hostname": "i-030791dc5a37cd257"}]), INDEX)
    health.record_result(1000.0, FetchResult(samples=[], dropped={}, errors={},
                                             series_matching={"gpu_temp": reduced.matching()}))
    body = json.loads(json.dumps({"prom": health.as_dict(1001.0)}))
    assert body["prom"]["series_matching"] == {"gpu_temp": {
        "matched": {"node": 1, "instance/internal_ip": 1}, "unmatched": 1,
        "unmatched_examples": [{"Hostname": "i-030791dc5a37cd257"}]}}
    # A later refresh in which this metric's query failed keeps its last report.
    health.record_result(1010.0, FetchResult(samples=[], dropped={}, errors={"gpu_temp": "HTTP 503"}))
    assert "gpu_temp" in health.series_matching
    text = render_series_matching(body)
    assert "prom/gpu_temp: 2 series matched (" in text and "1 unmatched" in text
    assert 'unmatched {Hostname="i-030791dc5a37cd257"}' in text


def test_built_in_label_order_is_the_documented_one() -> None:
    assert BUILT_IN_LABELS == ("node", "kubernetes_node", "nodename", "hostname", "Hostname", "instance",
                               "exported_node", "exported_instance")
