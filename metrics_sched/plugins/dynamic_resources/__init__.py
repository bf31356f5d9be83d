"""DynamicResources: devices through ResourceClaims (Dynamic Resource Allocation), with the structured allocator
(`allocator`) and the Kubernetes CEL environment for device selectors (`cel`)."""

from metrics_sched.plugins.dynamic_resources.plugin import DynamicResources

__all__ = ["DynamicResources"]
