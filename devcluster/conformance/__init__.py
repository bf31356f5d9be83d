"""`make test-conformance`: Kubernetes' own test/e2e/scheduling specs against metrics-sched as the only scheduler.

build: the upstream e2e binary (only the scheduling package) from the dev cluster's k8s.io/kubernetes module;
runner: a dev cluster fit for the specs, metrics-sched as `default-scheduler`, the run and its table;
junit: reading the run's JUnit report into that table.
"""

__all__: list[str] = []
