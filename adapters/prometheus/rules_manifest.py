"""The PrometheusRule manifest of the recording rules (deploy/recording-rules/prometheusrule.yaml), generated:

    python -m adapters.prometheus.rules_manifest > deploy/recording-rules/prometheusrule.yaml

A unit test holds the committed file equal to `manifest_text()`.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from adapters.prometheus.recording_rules import rule_groups

MANIFEST_HEADER = """\
# Recording rules that pre-aggregate the Prometheus presets' inputs per node (GPU series -> one series per
# node; the CPU count behind node_load_per_cpu once a minute). With them installed, set
# `recordingRules: true` on the scheduler's prometheus source: a refresh then reads one precomputed series
# per node and metric instead of making Prometheus aggregate every GPU's series (see
# adapters/prometheus/recording_rules.py). Your Prometheus must select this rule (kube-prometheus-stack:
# its release label, or ruleSelectorNilUsesHelmValues=false). Generated; do not edit by hand:
#   python -m adapters.prometheus.rules_manifest > deploy/recording-rules/prometheusrule.yaml
"""


def manifest() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "metrics-sched-recording",
            "namespace": "metrics-sched",
            "labels": {"app.kubernetes.io/name": "metrics-sched", "app.kubernetes.io/part-of": "metrics-sched"},
        },
        # 15s: dcgm-exporter's and node-exporter's usual scrape interval in kube-prometheus-stack.
        "spec": {"groups": rule_groups("15s")},
    }


def manifest_text() -> str:
    return MANIFEST_HEADER + yaml.safe_dump(manifest(), sort_keys=False, width=200)


if __name__ == "__main__":
    sys.stdout.write(manifest_text())
