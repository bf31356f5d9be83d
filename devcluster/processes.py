"""Starts, watches and stops the dev cluster's processes.

Every child gets METRICS_SCHED_DEVCLUSTER=<run dir> in its environment, so `leftovers()` can find any
process a run started (children of children included) by scanning /proc, not just the pids we kept.
Attached groups also ask the kernel to kill the children if this Python process dies (PR_SET_PDEATHSIG):
a crashed test session leaves nothing running. Detached groups (`devcluster up`) outlive the CLI and
are stopped by `devcluster down` from the pid file.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER_ENV = "METRICS_SCHED_DEVCLUSTER"
PIDS_FILE = "pids.json"
_PR_SET_PDEATHSIG = 1


class ProcessError(RuntimeError):
    pass


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Managed:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def describe_exit(self) -> str:
        return f"{self.name} exited with code {self.popen.returncode}; last log lines ({self.log}):\n{tail(self.log)}"


class ProcessGroup:
    def __init__(self, run_dir: Path, *, detach: bool = False) -> None:
        self.run_dir = run_dir
        self.detach = detach
        self.log_dir = run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, Managed] = {}

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Managed:
        if name in self.processes and self.processes[name].alive():
            raise ProcessError(f"{name} is already running (pid {self.processes[name].pid})")
        child_env = dict(os.environ if env is None else env)
        child_env[MARKER_ENV] = str(self.run_dir)
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as log_file:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=cwd,
                start_new_session=True,  # Ctrl-C reaches us, and we stop children in order
                preexec_fn=None if self.detach else _die_with_parent,
            )
        managed = Managed(name=name, argv=list(argv), log=log, popen=popen)
        self.processes[name] = managed
        self._write_pids()
        return managed

    def check(self, name: str) -> None:
        managed = self.processes[name]
        if not managed.alive():
            raise ProcessError(managed.describe_exit())

    def stop(self, name: str, timeout: float = 10.0) -> None:
        managed = self.processes.pop(name, None)
        if managed is not None:
            _terminate(managed.popen, timeout)
            self._write_pids()

    def stop_all(self, timeout: float = 10.0) -> None:
        for name in reversed(list(self.processes)):
            self.stop(name, timeout)

    def _write_pids(self) -> None:
        data = [{"name": m.name, "pid": m.pid, "argv0": m.argv[0], "log": str(m.log)}
                for m in self.processes.values()]
        tmp = self.run_dir / (PIDS_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.run_dir / PIDS_FILE)


def _terminate(popen: subprocess.Popen[bytes], timeout: float) -> None:
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(5)
    # The session may hold grandchildren that ignored SIGTERM.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)


def leftovers(run_dir: Path) -> list[tuple[int, str]]:
    """Processes still alive whose environment says a run in run_dir started them."""
    marker = f"{MARKER_ENV}={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if marker not in environ.split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie is dead; its parent has yet to reap it
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        found.append((int(entry.name), cmdline.strip()))
    return found


def kill_leftovers(run_dir: Path, timeout: float = 10.0) -> list[tuple[int, str]]:
    """Stops every process of a run (used by `devcluster down` and as the last resort of a teardown)."""
    procs = leftovers(run_dir)
    for pid, _ in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and leftovers(run_dir):
        time.sleep(0.1)
    for pid, _ in leftovers(run_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and leftovers(run_dir):
        time.sleep(0.05)
    return procs
