"""The DeviceClasses of the fake driver: NVIDIA's chart's `gpu.nvidia.com` and `mig.nvidia.com`, and one more that
backs the extended resource `nvidia.com/gpu` with DRA (DRAExtendedResource, beta and on in 1.36): a pod asking for
`nvidia.com/gpu` on a node without device-plugin capacity for it gets a whole GPU through a claim the scheduler
makes for it."""

from __future__ import annotations

from typing import Any

from devcluster.dra.slices import DRIVER

__all__ = ["DEVICE_CLASSES", "EXTENDED_RESOURCE", "EXTENDED_RESOURCE_CLASS", "GPU_CLASS", "MIG_CLASS",
           "device_class"]

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
EXTENDED_RESOURCE_CLASS = "gpu-extended-resource.nvidia.com"
EXTENDED_RESOURCE = "nvidia.com/gpu"


def _of_type(device_type: str) -> str:
    return f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"


def device_class(name: str, expression: str, extended_resource: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource is not None:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


DEVICE_CLASSES: tuple[dict[str, Any], ...] = (
    device_class(GPU_CLASS, _of_type("gpu")),
    device_class(MIG_CLASS, _of_type("mig")),
    device_class(EXTENDED_RESOURCE_CLASS, _of_type("gpu"), EXTENDED_RESOURCE),
)
