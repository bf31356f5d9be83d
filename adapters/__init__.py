"""Edges that implement the core's protocols: Kubernetes API, Prometheus, Metrics Server, CMDB."""
