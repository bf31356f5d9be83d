"""Where the dev cluster finds the repository's files and keeps its build cache."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The checkout this package runs from (the dev cluster is a developer tool, run from the repo)."""
    env = os.environ.get("METRICS_SCHED_REPO")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "deploy" / "local" / "versions.toml").is_file():
            return parent
    raise FileNotFoundError(f"deploy/local/versions.toml not found above {here}; set METRICS_SCHED_REPO")


def cache_dir() -> Path:
    env = os.environ.get("METRICS_SCHED_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "metrics-sched"
