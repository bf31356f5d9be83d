"""The GPUThermalForecast plugin: its class in plugin.py."""

from metrics_sched.plugins.gpu_thermal_forecast.plugin import GPUThermalForecast

__all__ = ["GPUThermalForecast"]
