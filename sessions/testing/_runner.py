"""Run the spec checks against a subject and build its report."""

from __future__ import annotations

import asyncio
import traceback
import uuid
from collections.abc import Iterable
from contextlib import AsyncExitStack

from ._capabilities import Capability, offered
from ._checks import CHECK_MODULES  # noqa: F401 - importing them registers the checks
from ._report import CapabilityResult, CheckResult, Outcome, Report
from ._spec import Check, Context, registered
from ._subject import Subject

__all__ = ["checks", "run_conformance"]


def checks(capability: Capability | None = None) -> list[Check]:
    """The spec checks (of one capability, or all), in the order they run."""
    return registered(capability)


DEFAULT_CHECK_TIMEOUT = 180.0


async def run_conformance(
    subject: Subject,
    *,
    capabilities: Iterable[Capability] | None = None,
    check_timeout: float = DEFAULT_CHECK_TIMEOUT,
) -> Report:
    """Detect what ``subject`` offers, run the checks of each offered capability, report.

    Every check runs on fresh session ids, with handles it opens itself and closes at
    its end; one failing check does not stop the others. ``capabilities`` restricts the
    run (default: all). A check running longer than ``check_timeout`` seconds fails.
    """
    if not isinstance(subject, Subject):
        raise TypeError(f"run_conformance() takes a Subject, got {type(subject).__name__}")
    wanted = list(Capability) if capabilities is None else [Capability(c) for c in capabilities]
    reasons = await _detect(subject, wanted)
    results: dict[Capability, CapabilityResult] = {}
    for cap in wanted:
        reason = reasons[cap]
        if reason is not None:
            results[cap] = CapabilityResult(cap, Outcome.NOT_OFFERED, reason)
        else:
            results[cap] = await _run_capability(subject, cap, check_timeout)
    return Report(subject.name, results, subject.description)


async def _detect(subject: Subject, wanted: list[Capability]) -> dict[Capability, str | None]:
    """Open one handle and ask it what it offers."""
    async with subject.open(f"conformance-detect-{uuid.uuid4().hex}") as session:
        await session.get_items(limit=1)  # a lazily opened store is open after this
        can_spawn = subject.spawn is not None
        return {cap: offered(session, cap, can_spawn=can_spawn) for cap in wanted}


async def _run_capability(subject: Subject, cap: Capability, timeout: float) -> CapabilityResult:
    results = [await _run_check(subject, c, timeout) for c in checks(cap)]
    if any(r.passed is False for r in results):
        return CapabilityResult(cap, Outcome.FAILED, None, tuple(results))
    if all(r.passed is None for r in results):
        return CapabilityResult(cap, Outcome.NOT_CHECKED, results[0].detail, tuple(results))
    return CapabilityResult(cap, Outcome.PASSED, None, tuple(results))


async def _run_check(subject: Subject, spec: Check, timeout: float) -> CheckResult:
    if spec.needs_hooks and subject.hooked is None:
        why = "the subject has no hooked factory (write hooks) to hold or fail a write"
        return CheckResult(spec.name, None, why)
    try:
        await asyncio.wait_for(_isolated(subject, spec), timeout)
    except asyncio.TimeoutError:
        error = f"did not finish within {timeout:g} s"
        return CheckResult(spec.name, False, error, error)
    except Exception as exc:  # noqa: BLE001 - a failing check is a result, not a crash
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        first = (str(exc).splitlines() or [""])[0]
        return CheckResult(spec.name, False, "".join(lines), f"{type(exc).__name__}: {first}")
    return CheckResult(spec.name, True)


async def _isolated(subject: Subject, spec: Check) -> None:
    async with AsyncExitStack() as stack:
        await spec.run(Context(subject, stack))
