"""Results: per check, per capability, per subject; and the capability table."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._capabilities import Capability

__all__ = ["CapabilityResult", "CheckResult", "Outcome", "Report", "capability_table"]


class Outcome(str, enum.Enum):
    """How a subject did on one capability."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_OFFERED = "not offered"
    NOT_CHECKED = "not checked"


@dataclass(frozen=True)
class CheckResult:
    """One check: ``passed`` is ``None`` when it did not run (``detail`` says why);
    when it failed, ``detail`` is the traceback."""

    name: str
    passed: bool | None
    detail: str | None = None
    error: str | None = None
    """``ExceptionType: message`` of a failure (first line)."""


@dataclass(frozen=True)
class CapabilityResult:
    """One capability of one subject."""

    capability: Capability
    outcome: Outcome
    reason: str | None = None
    """Why it is not offered or not checked."""
    checks: tuple[CheckResult, ...] = ()

    @property
    def first_failure(self) -> CheckResult | None:
        return next((c for c in self.checks if c.passed is False), None)


@dataclass(frozen=True)
class Report:
    """What :func:`~sessions.testing.run_conformance` found for one subject."""

    subject: str
    results: Mapping[Capability, CapabilityResult]
    description: str = ""

    @property
    def ok(self) -> bool:
        """No capability failed, and every base capability that was run passed."""
        return not self.failures()

    def failures(self) -> list[CapabilityResult]:
        return [r for r in self.results.values() if r.outcome is Outcome.FAILED]

    def outcomes(self) -> dict[Capability, Outcome]:
        """``{capability: outcome}``: handy to compare with what a test expects."""
        return {cap: result.outcome for cap, result in self.results.items()}

    def render(self, *, tracebacks: bool = True) -> str:
        """A plain-text report: one line per capability, then every failed check."""
        lines = [f"Conformance of {self.subject}"]
        for result in self.results.values():
            kind = "base" if result.capability.base else "extended"
            ran = [c for c in result.checks if c.passed is not None]
            line = f"  {result.capability.value:<16} {kind:<8} {result.outcome.value}"
            if ran:
                line += f" ({sum(bool(c.passed) for c in ran)}/{len(ran)} checks)"
            if result.reason:
                line += f": {result.reason}"
            lines.append(line)
        for result in self.failures():
            for failed in (c for c in result.checks if c.passed is False):
                lines.append(f"\nFAILED {result.capability.value} :: {failed.name}")
                lines.append((failed.detail if tracebacks else failed.error) or "")
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        """Raise ``AssertionError`` with the whole report if any capability failed."""
        if not self.ok:
            raise AssertionError(self.render())


_MARK = {
    Outcome.PASSED: "✅ passed",
    Outcome.FAILED: "❌ failed",
    Outcome.NOT_OFFERED: "— not offered",
    Outcome.NOT_CHECKED: "⚠️ not checked",
}
_HEX = re.compile(r"[0-9a-f]{32}")


def _note(result: CapabilityResult) -> str | None:
    failure = result.first_failure
    if failure is not None:
        error = _HEX.sub("…", (failure.error or "")[:300])
        return f"`{failure.name}`: {error}"
    return result.reason


def capability_table(reports: Sequence[Report]) -> str:
    """A Markdown table: a row per capability, a column per subject, notes below."""
    header = "| capability | " + " | ".join(f"`{r.subject}`" for r in reports) + " |"
    lines = [header, "|---|" + "---|" * len(reports)]
    notes: dict[str, int] = {}
    for cap in Capability:
        cells = []
        for report in reports:
            result = report.results.get(cap)
            if result is None:
                cells.append("")
                continue
            cell = _MARK[result.outcome]
            note = _note(result)
            if note is not None:
                cell += f" [{notes.setdefault(note, len(notes) + 1)}]"
            cells.append(cell)
        kind = "" if cap.base else " (extended)"
        lines.append(f"| `{cap.value}`{kind} | " + " | ".join(cells) + " |")
    lines.append("")
    for cap in Capability:
        lines.append(f"- `{cap.value}`: {cap.description}.")
    lines.append("")
    for report in reports:
        if report.description:
            lines.append(f"- `{report.subject}`: {report.description}")
    lines.append("")
    for note, number in notes.items():
        lines.append(f"[{number}] {note}  ")
    return "\n".join(lines).rstrip() + "\n"
