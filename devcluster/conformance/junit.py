"""Reads the e2e run's JUnit report (<report dir>/junit_01.xml, as upstream's framework writes it) into a table.

The framework writes one <testcase> per spec of the binary: run ones with status passed / failed / timedout /
panicked / interrupted / aborted, and skipped ones with <skipped message="skipped[ - reason]">. A spec the focus
and skip expressions left out is "skipped" with no reason: it is counted, not listed. A spec that skipped itself
(e2eskipper: "Only supported for providers [gce]") is listed with its reason. Suite nodes
([SynchronizedBeforeSuite], [ReportAfterSuite], ...) are listed only when they did not pass: a failed suite setup
fails the run even when no spec did.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

PASSED = "passed"
SKIPPED = "skipped"
FILTERED_MESSAGE = "skipped"
SPEC_PREFIX = "[It] "


@dataclass(frozen=True)
class SpecResult:
    name: str
    status: str  # ginkgo's SpecState: passed, failed, skipped, timedout, panicked, interrupted, aborted
    seconds: float
    detail: str = ""  # the skip reason, or the first line of the failure

    @property
    def failed(self) -> bool:
        return self.status not in (PASSED, SKIPPED)


@dataclass(frozen=True)
class RunReport:
    results: tuple[SpecResult, ...]  # the specs that ran or skipped themselves, and suite nodes that failed
    filtered: int  # specs the focus/skip expressions left out

    @property
    def passed(self) -> int:
        return sum(r.status == PASSED for r in self.results)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.results)

    @property
    def skipped(self) -> int:
        return sum(r.status == SKIPPED for r in self.results)

    @property
    def ok(self) -> bool:
        """Every selected spec passed, and at least one ran (an empty selection proves nothing)."""
        return self.failed == 0 and self.passed > 0


def parse_report(xml_text: str) -> RunReport:
    root = ET.fromstring(xml_text)
    results: list[SpecResult] = []
    filtered = 0
    for case in root.iter("testcase"):
        name = case.get("name", "")
        status = case.get("status", "")
        seconds = float(case.get("time") or 0.0)
        is_spec = name.startswith(SPEC_PREFIX)
        skipped = case.find("skipped")
        if status == SKIPPED or skipped is not None:
            message = (skipped.get("message", "") if skipped is not None else "").strip()
            if not is_spec:
                continue  # a suite node skipped along with every spec
            if message in ("", FILTERED_MESSAGE):
                filtered += 1
                continue
            reason = message.removeprefix(FILTERED_MESSAGE).lstrip(" -")
            results.append(SpecResult(name.removeprefix(SPEC_PREFIX), SKIPPED, seconds, reason))
            continue
        if status == PASSED and not is_spec:
            continue
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        detail = ""
        if problem is not None:
            text = (problem.get("message") or problem.text or "").strip()
            detail = next((line.strip() for line in text.splitlines() if line.strip()), "")
        results.append(SpecResult(name.removeprefix(SPEC_PREFIX), status or "unknown", seconds, detail))
    return RunReport(tuple(results), filtered)


def read_report(report_dir: Path) -> RunReport:
    return parse_report((report_dir / "junit_01.xml").read_text())


def format_table(report: RunReport, width: int = 220) -> str:
    """One line per spec (status, seconds, name), failures' and skips' detail indented below, then the counts."""
    lines = [f"{'RESULT':<8} {'SECONDS':>8}  SPEC", f"{'-' * 8} {'-' * 8}  {'-' * 4}"]
    for result in sorted(report.results, key=lambda r: (r.status == PASSED, r.status == SKIPPED, r.name)):
        label = "PASS" if result.status == PASSED else "SKIP" if result.status == SKIPPED else "FAIL"
        lines.append(_clip(f"{label:<8} {result.seconds:>8.1f}  {result.name}", width))
        if result.detail:
            lines.append(_clip(f"{'':<8} {'':>8}    {result.detail}", width))
    lines.append(f"{report.passed} passed, {report.failed} failed, {report.skipped} skipped by the spec itself, "
                 f"{report.filtered} not selected")
    return "\n".join(lines)


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


__all__ = ["RunReport", "SpecResult", "format_table", "parse_report", "read_report"]
