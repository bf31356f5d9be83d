"""What KWOK does to stand in for each node's kubelet heartbeats: a node Lease it renews, and a status update.

A kubelet (1.36 defaults) renews its node's Lease every quarter of `nodeLeaseDurationSeconds` (40 s: every
10 s) and posts the node's status when it changes or, unchanged, every `nodeStatusReportFrequency` (5 min).
On a real 5,000-node cluster that is 500 Lease updates/s on the API server (nobody but node lifecycle watches
Leases) and ~17 node status updates/s, which every scheduler's node watch receives.

KWOK's counterparts: `nodeLeaseDurationSeconds` in its KwokConfiguration (its Lease controller renews at a
quarter of it with 4 % jitter, as the kubelet does), and a Node Stage that rewrites the node's conditions'
heartbeat times after a delay (its `node-heartbeat-with-lease` stage, whose stock delay is 10 min). The delay
here is drawn uniformly from [report/2, report*3/2]: a mean period of `status_report_seconds`, and nodes that
were all created at once spread over the period within the first round instead of updating in one burst.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class NodeHeartbeats:
    lease_duration_seconds: int = 40  # the kubelet's nodeLeaseDurationSeconds; KWOK renews at a quarter of it
    status_report_seconds: float = 300.0  # the kubelet's nodeStatusReportFrequency
    lease_parallelism: int = 16  # KWOK's renewal workers (its own default is 4: too few for 500 renewals/s)

    def __post_init__(self) -> None:
        if self.lease_duration_seconds < 4:
            raise ValueError("lease_duration_seconds must be at least 4 (KWOK renews every quarter of it)")
        if self.status_report_seconds <= 0:
            raise ValueError("status_report_seconds must be positive")
        if self.lease_parallelism < 1:
            raise ValueError("lease_parallelism must be at least 1")

    @property
    def lease_renewals_per_node_per_second(self) -> float:
        return 4.0 / self.lease_duration_seconds

    def status_stage(self) -> str:
        """The KWOK Stage (YAML) that posts every Ready node's status about every `status_report_seconds`."""
        mean_ms = int(self.status_report_seconds * 1000)
        stage = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
            "metadata": {"name": "node-status-report"},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Node"},
                "selector": {"matchExpressions": [
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "In",
                     "values": ["True"]},
                ]},
                # KWOK draws the delay uniformly between the two (its StageDelay).
                "delay": {"durationMilliseconds": mean_ms // 2, "jitterDurationMilliseconds": mean_ms * 3 // 2},
                "next": {"statusTemplate": STATUS_TEMPLATE},
            },
        }
        return yaml.safe_dump(stage, sort_keys=False)


# The conditions part of KWOK's own node-heartbeat-with-lease stage: each condition as it is, with a new
# heartbeat time (what a kubelet's periodic report changes).
STATUS_TEMPLATE = """{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""
