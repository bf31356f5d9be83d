"""`metrics-sched demo --once`: every demo pod bound, the table printed, nothing left running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devcluster.processes import leftovers


def test_demo_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "demo", "--once", "--dir", str(run_dir)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "why this node" in out.stdout
    assert "30/30 pods placed; on nodes above 85°C: 0" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("train-")]
    assert len(rows) == 30 and all("gpu-node-" in row for row in rows)
    assert any(word in out.stdout for word in ("cold", "cheap", "lightly loaded"))
    # The DRA scene: one GPU through a claim on the node whose other GPUs are hot, its coolest.
    [dra] = [line for line in out.stdout.splitlines() if line.startswith("DRA: dra-claim")]
    assert "-> gpu-node-000, GPU 5 (31°C)" in dra, dra
    assert not leftovers(run_dir.resolve()), "the demo left processes behind"
