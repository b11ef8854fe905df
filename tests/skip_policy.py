"""Under ``CI``, a skipped test is a failed test unless its reason is allowed here.

A skip hides whatever the test would have found: a missing driver, a server that is
down, a tool that is not installed, an SDK feature that vanished. Outside CI a skip
with its reason is a courtesy to someone without PostgreSQL or Redis at hand; in CI,
where ``.ci/run`` sets all of that up, it must not pass silently. So when ``CI`` is set
(and is not ``0``/``false``/``no``), every skip — at collection (``importorskip`` at
module level), in setup (``skipif``, a fixture's ``pytest.skip``) or in the test — and
every ``xfail`` is turned into a failure whose message gives the original reason,
unless that reason starts with one of the ``ALLOWED`` prefixes below, each with why it
may fire in CI. The allowed ones are listed at the end of the run.

``tests/conftest.py`` imports the hooks; ``pytest -p tests.skip_policy`` loads them on
their own (as ``tests/meta/test_skip_policy.py`` does).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

#: Reason prefix -> why this skip may fire in CI. Keep it short.
ALLOWED: dict[str, str] = {
    "needs openai-agents >= ": (
        "the matrix runs the sdk_flow tests on SDK releases older than some features; "
        "tests.sdk.need_sdk gives this reason only when the installed release predates "
        "the feature, and fails the test when a release that should have it does not"
    ),
    "needs the temporal extra": (
        "tests/temporal/ needs temporalio-openai-agents, whose releases each pin one older "
        "openai-agents line, so the README's virtualenv and the whole-suite and sdk cells "
        "(newest SDK) cannot hold it; the matrix's temporal cells install it and set "
        "TXS_REQUIRE_TEMPORAL=1, which turns this skip into a failure there"
    ),
    "running as root and chattr +i is not available": (
        "CI runs as root, where only chattr +i makes a file read-only; on a filesystem "
        "without that attribute the read-only test cannot set up its case at all"
    ),
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def allowed(reason: str) -> str | None:
    """The allow-list entry that admits ``reason``, if any."""
    return next((prefix for prefix in ALLOWED if reason.startswith(prefix)), None)


#: The allowed skips of this run, node id -> reason: gathered where reports are logged
#: (the process that prints the summary, whether tests ran in it or in ``pytest -n``
#: workers), once per node id.
_allowed_seen: dict[str, str] = {}


def _enforce(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Fail a skip whose reason is not allowed (in the process that made the report)."""
    if not report.skipped or not in_ci():
        return
    reason = skip_reason(report)
    if allowed(reason) is not None:
        return
    if hasattr(report, "wasxfail"):
        del report.wasxfail  # else reporters still show an xfail
    report.outcome = "failed"
    report.longrepr = (
        f"CI is set, so this skip fails (the allowed reasons are in tests/skip_policy.py): {reason}"
    )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    _enforce(outcome.get_result())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _enforce(outcome.get_result())


def _note(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and in_ci():
        reason = skip_reason(report)
        if allowed(reason) is not None:
            _allowed_seen.setdefault(report.nodeid, reason)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _allowed_seen:
        return
    terminalreporter.section("skips allowed under CI (tests/skip_policy.py)")
    for nodeid, reason in _allowed_seen.items():
        terminalreporter.line(f"{nodeid}: {reason}")
