"""Debian's Prometheus, started with a generated config that scrapes the emulator and any scheduler."""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from adapters.prometheus.recording_rules import rule_groups

EMULATOR_JOBS = {
    "dcgm-exporter": "/dcgm/metrics",
    "node-exporter": "/node-exporter/metrics",
    "opencost": "/opencost/metrics",
}


class PrometheusNotInstalled(RuntimeError):
    pass


def prometheus_binary() -> str:
    binary = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if not binary:
        raise PrometheusNotInstalled(
            "the `prometheus` binary is missing; `make deps` installs Debian's prometheus package"
        )
    return binary


def write_config(directory: Path, emulator: str, scrape_interval: float,
                 recorded_presets: Collection[str] | None = None) -> Path:
    """Writes prometheus.yml; scheduler targets come later through file_sd (see add_target). With
    `recorded_presets`, also the recording rules the product ships for those presets
    (adapters.prometheus.recording_rules), evaluated at the scrape interval: only those, since every rule
    costs Prometheus an aggregation over every GPU's series at each evaluation."""
    targets = directory / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    interval = f"{int(scrape_interval * 1000)}ms"
    jobs: list[dict[str, Any]] = [
        {
            "job_name": job,
            "metrics_path": path,
            # The emulator speaks for many nodes; keep the `instance` labels it sets, like federation.
            "honor_labels": True,
            "static_configs": [{"targets": [emulator]}],
        }
        for job, path in EMULATOR_JOBS.items()
    ]
    jobs.append({
        "job_name": "metrics-sched",
        "file_sd_configs": [{"files": [str(targets / "*.json")], "refresh_interval": "1s"}],
    })
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": jobs,
    }
    if recorded_presets is not None:
        rules = directory / "recording-rules.yml"
        rules.write_text(yaml.safe_dump({"groups": rule_groups(presets=recorded_presets)}, sort_keys=False,
                                        width=200))
        config["rule_files"] = [str(rules)]
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def add_target(directory: Path, name: str, address: str, labels: dict[str, str] | None = None) -> Path:
    path = directory / "targets" / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [address], "labels": labels or {}}]))
    tmp.replace(path)
    return path


def remove_target(directory: Path, name: str) -> None:
    (directory / "targets" / f"{name}.json").unlink(missing_ok=True)


def argv(directory: Path, listen: str, config: Path) -> list[str]:
    return [
        prometheus_binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        "--storage.tsdb.retention.time=6h",
        f"--web.listen-address={listen}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]
