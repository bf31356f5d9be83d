"""Plugins outside the metrics_sched package, registered only through the `metrics_sched.plugins` entry points."""
