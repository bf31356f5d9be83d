"""The conformance run's table, read from the JUnit report upstream's e2e framework writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster.conformance.build import go_mod, ldflags
from devcluster.conformance.junit import format_table, parse_report
from devcluster.conformance.runner import Selection, e2e_argv, scheduler_config, system_pods
from devcluster.versions import Versions
from metrics_sched.config import parse_config
from metrics_sched.plugins import in_tree_registry

pytestmark = pytest.mark.unit

# The shape of junit_01.xml as test/e2e/framework/internal/junit writes it (ginkgo v2's JUnit reporter with
# OmitFailureMessageAttr and OmitSpecLabels): every spec of the binary, filtered ones "skipped".
REPORT = """<?xml version="1.0" encoding="UTF-8"?>
  <testsuites tests="6" disabled="3" errors="0" failures="1" time="1500.5">
      <testsuite name="Kubernetes e2e suite" package="/work" tests="6" disabled="0" skipped="3" errors="0"
                 failures="1" time="1500.5" timestamp="2026-12-07T22:50:00">
          <testcase name="[It] [sig-scheduling] SchedulerPredicates [Serial] validates NodeSelector [Conformance]"
                    classname="Kubernetes e2e suite" status="passed" time="6.2"></testcase>
          <testcase name="[It] [sig-scheduling] SchedulerPredicates [Serial] verify pod overhead is accounted for"
                    classname="Kubernetes e2e suite" status="failed" time="70.1">
              <failure type="failed">[FAILED] Timed out after 60.000s.
filler pod never ran
In [It] at: predicates.go:290</failure>
          </testcase>
          <testcase name="[It] [sig-scheduling] Multi-AZ Clusters should spread the pods of a service across zones"
                    classname="Kubernetes e2e suite" status="skipped" time="0.01">
              <skipped message="skipped - Only supported for providers [gce gke aws] (not skeleton)"></skipped>
          </testcase>
          <testcase name="[It] [sig-node] Pods should be submitted and removed" classname="Kubernetes e2e suite"
                    status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
          <testcase name="[It] [sig-scheduling] DRA [Feature:DynamicResourceAllocation] works"
                    classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.5">
          </testcase>
          <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite"
                    status="passed" time="0"></testcase>
      </testsuite>
  </testsuites>
"""


def test_the_report_lists_run_specs_and_self_skips_and_counts_filtered_ones() -> None:
    report = parse_report(REPORT)
    assert (report.passed, report.failed, report.skipped, report.filtered) == (1, 1, 1, 2)
    failed = next(r for r in report.results if r.failed)
    assert failed.name == "[sig-scheduling] SchedulerPredicates [Serial] verify pod overhead is accounted for"
    assert failed.detail == "[FAILED] Timed out after 60.000s." and failed.seconds == pytest.approx(70.1)
    skipped = next(r for r in report.results if r.status == "skipped")
    assert skipped.detail == "Only supported for providers [gce gke aws] (not skeleton)"
    assert not report.ok  # one failure fails the run


def test_the_table_puts_failures_first_with_their_reason_then_the_counts() -> None:
    lines = format_table(parse_report(REPORT), width=200).splitlines()
    assert lines[2].startswith("FAIL") and "verify pod overhead" in lines[2]
    assert "[FAILED] Timed out after 60.000s." in lines[3]
    assert lines[4].startswith("SKIP") and lines[6].startswith("PASS") and lines[6].split()[1] == "6.2"
    assert lines[-1] == "1 passed, 1 failed, 1 skipped by the spec itself, 2 not selected"


def test_a_failed_suite_setup_is_listed_and_fails_the_run() -> None:
    xml = REPORT.replace('name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed"',
                         'name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="failed"')
    xml = xml.replace('status="failed" time="70.1"', 'status="passed" time="70.1"')
    report = parse_report(xml)
    assert [r.name for r in report.results if r.failed] == ["[SynchronizedBeforeSuite]"]
    assert not report.ok


def test_a_run_where_nothing_ran_is_not_a_pass() -> None:
    xml = REPORT.replace('status="passed" time="6.2"', 'status="skipped" time="0"').replace(
        'status="failed" time="70.1"', 'status="skipped" time="0"')
    assert not parse_report(xml).ok


def test_all_passing_specs_pass_the_run() -> None:
    assert parse_report(REPORT.replace('status="failed" time="70.1"', 'status="passed" time="70.1"')).ok


def test_the_wrapper_module_pins_the_staging_modules_to_the_dev_clusters_kubernetes() -> None:
    versions = Versions(kubernetes="1.36.3", etcd="3.6.16", kwok="0.8.0", go_toolchain="")
    text = go_mod(versions, ["k8s.io/api", "k8s.io/client-go"])
    assert "require k8s.io/kubernetes v1.36.3" in text
    assert "\tk8s.io/api => k8s.io/api v0.36.3\n" in text and "\tk8s.io/client-go => k8s.io/client-go v0.36.3" in text
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in ldflags(versions)


def test_the_run_selects_sig_scheduling_without_feature_disruptive_or_flaky_specs() -> None:
    argv = e2e_argv(Path("/b/e2e.test"), Path("/k"), Path("/r"), Selection())
    assert r"--ginkgo.focus=\[sig-scheduling\]" in argv
    assert r"--ginkgo.skip=\[Feature:|\[Disruptive\]|\[Flaky\]" in argv
    assert "--kubeconfig=/k" in argv and "--report-dir=/r" in argv


def test_metrics_sched_is_the_default_scheduler_and_the_config_loads() -> None:
    config = scheduler_config(10259)
    parsed = parse_config(config, in_tree_registry(third_party=False).catalog())
    assert [p.scheduler_name for p in parsed.profiles] == ["default-scheduler"]
    assert not parsed.sources  # no telemetry: the placement under test is kube-scheduler's


def test_every_node_gets_the_system_pods_upstreams_node_health_wait_looks_for() -> None:
    pairs = system_pods(["node-000", "node-001"])
    bound = {(pod["metadata"]["name"], binding["target"]["name"]) for pod, binding in pairs}
    # e2enode's requiredPerNodePods regexps: .*kube-proxy.*, .*fluentd-elasticsearch.*, .*node-problem-detector.*
    for node in ("node-000", "node-001"):
        for daemon in ("kube-proxy", "fluentd-elasticsearch", "node-problem-detector"):
            assert (f"{daemon}-{node}", node) in bound
    for pod, binding in pairs:
        assert pod["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kube-system"
        # Bound through the Binding (the API server sets PodScheduled, which WaitForStableCluster requires), not
        # created with spec.nodeName; for no scheduler that runs; requesting nothing.
        assert "nodeName" not in pod["spec"] and pod["spec"]["schedulerName"] != "default-scheduler"
        assert binding["metadata"]["name"] == pod["metadata"]["name"]
        assert all("resources" not in c for c in pod["spec"]["containers"])
