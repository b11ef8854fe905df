"""The conformance suite: the contract of this package's sessions, runnable against any
session implementation.

Give it a :class:`Subject` (a way to open sessions on one storage) and it detects what
the sessions offer, runs the spec checks of every offered :class:`Capability`, and
returns a :class:`Report`::

    import asyncio
    from sessions.testing import Subject, run_conformance

    async def my_sessions(session_id):
        session = MySession(session_id, "test.db")
        yield session
        await session.close()

    report = asyncio.run(run_conformance(Subject("mine", my_sessions)))
    print(report.render())
    report.raise_for_failures()      # in a test

Base capabilities are the Agents SDK ``Session`` protocol: every session must pass
them. Extended ones (buffering, staged pops, shielded, atomic and idempotent commits,
cross-process ordering) are detected and reported as "not offered" when absent.
:func:`store_subject` builds a subject for any :class:`sessions.Store`;
:func:`wrapper_subject` for :class:`sessions.TransactionalSession` over any SDK
session. ``docs/conformance.md`` walks through it.

Nothing here imports pytest: the suite is plain async code, usable from any test runner.
"""

from __future__ import annotations

from ._capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES, Capability
from ._report import CapabilityResult, CheckResult, Outcome, Report, capability_table
from ._runner import checks, run_conformance
from ._spec import Check, ConformanceFailure
from ._subject import Spawn, Subject, WriteHooks, store_subject, wrapper_subject

__all__ = [
    "BASE_CAPABILITIES",
    "EXTENDED_CAPABILITIES",
    "Capability",
    "CapabilityResult",
    "Check",
    "CheckResult",
    "ConformanceFailure",
    "Outcome",
    "Report",
    "Spawn",
    "Subject",
    "WriteHooks",
    "capability_table",
    "checks",
    "run_conformance",
    "store_subject",
    "wrapper_subject",
]
