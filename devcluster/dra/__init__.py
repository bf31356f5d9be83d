"""A fake DRA driver for the dev cluster's GPU nodes, modelled on NVIDIA's k8s-dra-driver-gpu.

A real driver's kubelet plugin discovers the GPUs of its node through NVML and publishes them as ResourceSlices
(driver `gpu.nvidia.com`, one pool per node). KWOK nodes have no kubelet and no GPUs: this package publishes, for
each node the dev cluster creates with GPUs, the slices that plugin would, from the same seeded profile the
telemetry emulator serves DCGM series for (so a device's `uuid` attribute is the `UUID` label of its series). It
publishes once, when the node is created, through the API server (which validates every slice), and never again:
no periodic work. The DeviceClasses are what the driver's Helm chart installs, plus one that maps the extended
resource `nvidia.com/gpu` onto DRA (DRAExtendedResource).
"""

from devcluster.dra.catalogue import HARDWARE, GpuHardware, MigProfile
from devcluster.dra.classes import DEVICE_CLASSES, EXTENDED_RESOURCE_CLASS, GPU_CLASS, MIG_CLASS
from devcluster.dra.driver import install_device_classes, node_gpus, publish, unpublish
from devcluster.dra.slices import DRIVER, NodeGpus, resource_slices

__all__ = [
    "DEVICE_CLASSES", "DRIVER", "EXTENDED_RESOURCE_CLASS", "GPU_CLASS", "HARDWARE", "MIG_CLASS", "GpuHardware",
    "MigProfile", "NodeGpus", "install_device_classes", "node_gpus", "publish", "resource_slices", "unpublish",
]
