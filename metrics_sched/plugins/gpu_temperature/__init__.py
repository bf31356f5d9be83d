"""The GPUTemperature plugin: its class in plugin.py."""

from metrics_sched.plugins.gpu_temperature.plugin import GPUTemperature

__all__ = ["GPUTemperature"]
