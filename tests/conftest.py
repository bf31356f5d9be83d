"""Marks every test by its tier: tests/unit -> unit (no processes), tests/e2e -> e2e (real cluster); under
pytest-xdist spreads the e2e modules over the workers, each worker with a dev cluster of its own; lists the slowest
tests at the end of each run.

Under `make test` (`-n 2`) each e2e module is a unit of work that one worker runs whole against its session's dev
cluster (module fixtures and the module's own order hold), handed to whichever worker is free: the two clusters
share the e2e tier between them, and the unit tests (units of one test each) come last and fill in wherever a
worker is done, so both workers end together. One exception to one-module-one-unit: the modules named
`test_differential*` (two real schedulers over thousands of objects, CPU-bound) are one unit together, so two of
them never run at once on 2 cores (they would only slow each other down); it goes first, being the longest."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
E2E_SCOPE = "tests/e2e/"  # the node ids' prefix, relative to the rootdir
# The CPU-bound e2e modules, by name: one unit of work, run first (see the module's docstring).
CPU_BOUND_PREFIX = f"{E2E_SCOPE}test_differential"
CPU_BOUND_SCOPE = f"{E2E_SCOPE}#cpu-bound"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slowest", type=int, default=15, metavar="N",
                     help="list the N slowest tests (setup + call + teardown) at the end of the run; 0: none")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SlowestTests(config.getoption("slowest")), "slowest-tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(HERE).parts[0]
        if tier in ("unit", "e2e"):
            item.add_marker(getattr(pytest.mark, tier))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist, never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For `-n N` (xdist's default `--dist load`): an e2e module is one unit of work (the CPU-bound ones one
    together), each other test one of its own. xdist hands units out biggest first (by test count; ties in
    collection order, where tests/e2e comes before tests/unit), so the e2e modules go before the unit tests; the
    CPU-bound unit is put at the head. Not xdist_group markers with `--dist loadgroup`: xdist 3.8 tags a grouped
    test by rewriting `item._nodeid`, which pytest 9 no longer reads, so the groups silently split."""
    if config.getvalue("dist") != "load":
        return None  # an explicit --dist choice stands
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class CpuBoundFirst(OrderedDict[str, Any]):
        """xdist's work queue (it pops from the front), with the CPU-bound unit moved to the front as it comes."""

        def __setitem__(self, scope: str, tests: Any) -> None:
            super().__setitem__(scope, tests)
            if scope == CPU_BOUND_SCOPE:
                self.move_to_end(scope, last=False)

    class E2EModulesPerWorker(LoadScopeScheduling):
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.workqueue = CpuBoundFirst()

        def _split_scope(self, nodeid: str) -> str:
            if not nodeid.startswith(E2E_SCOPE):
                return nodeid
            module = nodeid.split("::", 1)[0]
            return CPU_BOUND_SCOPE if module.startswith(CPU_BOUND_PREFIX) else module

    return E2EModulesPerWorker(config, log)


class SlowestTests:
    """Adds up each test's phases as their reports arrive (under xdist, in the controller, from every worker)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.phases: dict[str, dict[str, float]] = defaultdict(dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.phases[report.nodeid][report.when] = report.duration

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.count <= 0 or not self.phases:
            return
        totals = sorted(((sum(p.values()), nodeid) for nodeid, p in self.phases.items()), reverse=True)
        terminalreporter.write_sep("=", f"slowest {min(self.count, len(totals))} tests (setup + call + teardown; "
                                        "a setup includes the fixtures it starts)")
        for total, nodeid in totals[:self.count]:
            p = self.phases[nodeid]
            terminalreporter.write_line(f"{total:8.2f}s  (setup {p.get('setup', 0.0):6.2f}s, call "
                                        f"{p.get('call', 0.0):6.2f}s, teardown {p.get('teardown', 0.0):5.2f}s)  "
                                        f"{nodeid}")
