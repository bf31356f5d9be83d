"""Which node a series belongs to, from its labels.

Installs disagree on where the node name is: kube-prometheus puts it in `instance`, DCGM in `hostname`
(`Hostname` before 4.6), OpenCost in `node`, and kube-prometheus-stack's node-exporter has only
`instance="<node IP>:9100"`. So the labels are tried in a configured order, and a value that is a node's
InternalIP maps to that node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from metrics_sched.ports import NodeDirectory


def strip_port(instance: str) -> str:
    """"10.0.0.1:9100" -> "10.0.0.1", "[fe80::1]:9100" -> "fe80::1"; a bare IPv6 address is left alone."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    host, sep, port = instance.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host
    return instance


def _lookup(value: str, nodes: NodeDirectory) -> str | None:
    if value in nodes.names:
        return value
    return nodes.by_internal_ip.get(value)


def resolve_node(labels: Mapping[str, str], order: Sequence[str], nodes: NodeDirectory) -> tuple[str | None, bool]:
    """(node, had_any_label): the first label in `order` whose value names a known node or its InternalIP.

    A label whose value matches nothing does not stop the search: a DCGM `hostname` that is a pod name
    can still be followed by an `instance` that is the node's IP.
    """
    seen = False
    for label in order:
        value = labels.get(label)
        if not value:
            continue
        seen = True
        node = _lookup(value, nodes)
        if node is None and label == "instance":
            stripped = strip_port(value)
            node = _lookup(stripped, nodes) if stripped != value else None
        if node is not None:
            return node, True
    return None, seen
