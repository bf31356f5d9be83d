"""Which node a series belongs to, from its labels, and by which rule.

Exporters disagree on where the node is: OpenCost and kube-state-metrics say `node`, the GPU operator's
scrape config adds `kubernetes_node`, kube-prometheus-stack relabels node-exporter's pod node into
`nodename`, DCGM exporter writes `Hostname` (the node with NODE_NAME set, else its own pod's name),
node-exporter behind kube-prometheus-stack is `instance="<node IP>:9100"` (host network), and a
ServiceMonitor without honorLabels renames an exporter's own `node`/`instance` to `exported_*`. So a
series is resolved, in order, through:

1. the configured labels (`nodeLabels`, per source or per metric), each by node name, InternalIP,
   `kubernetes.io/hostname` label and short name/FQDN: the operator knows best;
2. `node`, `kubernetes_node`, `nodename`, `hostname`, `Hostname`, `instance`, `exported_node`,
   `exported_instance` by node name;
3. the same labels by the node's InternalIP;
4. the same labels by the node's `kubernetes.io/hostname` label, then short name vs FQDN both ways
   (`ip-10-0-1-5` names the node `ip-10-0-1-5.ec2.internal` and the other way round) when unambiguous.

Every value loses its `:port` first (`[v6]:port` its brackets): a node name never holds a colon.
The lookup dicts are built once per node set (`NodeIndex`), so a series costs a few dict lookups,
never a scan over the nodes; `resolve_cached` remembers each outcome by the values of the labels the
chain reads, so the next refreshes (the same series again) cost one dict lookup per series.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from metrics_sched.ports import NodeDirectory

BUILT_IN_LABELS = ("node", "kubernetes_node", "nodename", "hostname", "Hostname", "instance", "exported_node",
                   "exported_instance")
# How a label's value named the node, as the coverage report shows it ("<label>" alone: the node's name).
BY_INTERNAL_IP = "internal_ip"
BY_HOSTNAME_LABEL = "hostname_label"
BY_SHORT_NAME = "short_name"  # the value is a short name, the node's name (or hostname label) its FQDN
BY_FQDN = "fqdn"  # the value is an FQDN whose first label is the node's short name
# Outcomes remembered per node set: a few per node and metric label layout; past this (series churning
# through ever new node-label values) the memo starts over rather than grow.
RESOLVED_LIMIT = 200_000


def strip_port(instance: str) -> str:
    """"10.0.0.1:9100" -> "10.0.0.1", "[fe80::1]:9100" -> "fe80::1"; a bare IPv6 address is left alone."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    host, sep, port = instance.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host
    return instance


def _canonical_ip(value: str) -> str:
    """IPv6 in one spelling (`fd00:0::6` and `fd00::6` are one address); anything else as given."""
    if ":" not in value:
        return value
    try:
        return ipaddress.ip_address(value).compressed
    except ValueError:
        return value


def _is_dns_name(value: str) -> bool:
    """A dotted value that is a host name, not an IPv4 address (a top-level label is never all digits)."""
    return "." in value and ":" not in value and not value.rpartition(".")[2].isdigit()


def _unique(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """key -> node for keys naming exactly one node: an ambiguous short name matches nothing."""
    seen: dict[str, str | None] = {}
    for key, node in pairs:
        if key in seen and seen[key] != node:
            seen[key] = None
        else:
            seen[key] = node
    return {key: node for key, node in seen.items() if node is not None}


@dataclass(frozen=True)
class Match:
    node: str | None
    rule: str  # "<label>" or "<label>/<how>" (BY_*); "" when unmatched
    had_label: bool  # some label of the chain was present (unmatched: "unknown_node", else "no_node_label")


class NodeIndex:
    """The lookup dicts of one node set: built once per node-directory generation (see `IndexCache`)."""

    def __init__(self, nodes: NodeDirectory) -> None:
        self.directory = nodes
        self.names = nodes.names
        self.by_ip = {_canonical_ip(ip): node for ip, node in nodes.by_internal_ip.items()}
        self.by_hostname_label = _unique((host, node) for host, node in nodes.hostnames.items())
        identities = [(node, node) for node in nodes.names] + [(h, n) for h, n in nodes.hostnames.items()]
        # Value short, node FQDN: the FQDN's first label -> node. Value FQDN, node short: the short names.
        self.by_short_of_fqdn = _unique((key.partition(".")[0], node) for key, node in identities
                                        if _is_dns_name(key))
        self.by_short = _unique((key, node) for key, node in identities if "." not in key)
        self._chains: dict[tuple[str, ...], tuple[str, ...]] = {}
        # (configured labels, value of each label of the chain...) -> outcome
        self._resolved: dict[tuple[object, ...], Match] = {}

    def resolve_cached(self, labels: Mapping[str, str], configured: tuple[str, ...] = ()) -> Match:
        """`resolve`, remembered by the values of the labels it reads (the configured ones and the built-in
        chain): the same outcome for the same values, whatever the series' other labels."""
        chain = self._chains.get(configured)
        if chain is None:
            chain = self._chains[configured] = configured + tuple(x for x in BUILT_IN_LABELS if x not in configured)
        key = (configured, *map(labels.get, chain))
        match = self._resolved.get(key)
        if match is None:
            if len(self._resolved) >= RESOLVED_LIMIT:
                self._resolved.clear()
            match = self._resolved[key] = self.resolve(labels, configured)
        return match

    def resolve(self, labels: Mapping[str, str], configured: Sequence[str] = ()) -> Match:
        """The series' node and the rule that found it (see the module docstring for the order)."""
        for label in configured:
            value = labels.get(label)
            if value:
                host = strip_port(value)
                if host in self.names:
                    return Match(host, label, True)
                node, how = self._by_address(host)
                if node is None:
                    node, how = self._by_host_name(host)
                if node is not None:
                    return Match(node, f"{label}/{how}", True)
        present = [(label, strip_port(value)) for label in BUILT_IN_LABELS
                   if label not in configured and (value := labels.get(label))]
        for label, host in present:
            if host in self.names:
                return Match(host, label, True)
        for label, host in present:
            node, how = self._by_address(host)
            if node is not None:
                return Match(node, f"{label}/{how}", True)
        for label, host in present:
            node, how = self._by_host_name(host)
            if node is not None:
                return Match(node, f"{label}/{how}", True)
        return Match(None, "", bool(present) or any(labels.get(label) for label in configured))

    def _by_address(self, host: str) -> tuple[str | None, str]:
        return self.by_ip.get(_canonical_ip(host)), BY_INTERNAL_IP

    def _by_host_name(self, host: str) -> tuple[str | None, str]:
        node = self.by_hostname_label.get(host)
        if node is not None:
            return node, BY_HOSTNAME_LABEL
        if _is_dns_name(host):
            return self.by_short.get(host.partition(".")[0]), BY_FQDN
        if ":" not in host:
            return self.by_short_of_fqdn.get(host), BY_SHORT_NAME
        return None, ""


class IndexCache:
    """Keeps the NodeIndex while the node identities (names, InternalIPs, hostname labels) stay the same:
    comparing them is a C-speed equality check, rebuilding is a Python loop over every node."""

    def __init__(self) -> None:
        self._index: NodeIndex | None = None

    def index(self, nodes: NodeDirectory) -> NodeIndex:
        current = self._index
        if current is not None:
            seen = current.directory
            if seen is nodes or (seen.names == nodes.names and seen.by_internal_ip == nodes.by_internal_ip
                                 and seen.hostnames == nodes.hostnames):
                return current
        current = self._index = NodeIndex(nodes)
        return current
