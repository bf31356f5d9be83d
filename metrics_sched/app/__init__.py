"""The composition root: where the core (metrics_sched's other packages) meets the adapters (adapters/), as
kube-scheduler's cmd/kube-scheduler/app sits outside pkg/scheduler.

The only package of metrics_sched that imports adapters (pyproject's import contracts hold the core to that):
it builds the Kubernetes adapter and the scheduler core on it (core.py, after the API server probe of
api_probe.py), the telemetry sources from the `metrics_sched.sources` entry points (sources.py), the HTTPS
endpoint with the API server's reviews (serving_setup.py), the client of a running scheduler with the leader
behind a Service (scheduler_client.py, leader_target.py), and runs the scheduler process with its signals
(scheduler_app.py, signals.py). The command line (cli/, the console script `metrics-sched`) parses the commands
on top of it; the wiring never imports cli/.

Nothing is imported here: a command loads only the wiring it uses.
"""
