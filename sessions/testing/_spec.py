"""The registry of spec checks, the context each check runs in, and its assertions.

A check is an async function taking a :class:`Context`, registered with
``@check(Capability.X)``. It fails by raising (:class:`ConformanceFailure` for a broken
promise, anything else for a crash). Assertions are explicit calls, not ``assert``
statements, so that ``python -O`` cannot turn the suite into one that always passes.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from .._engine.store import Store
from ._capabilities import Capability, backend_of, is_buffered
from ._subject import Subject, WriteHooks

__all__ = [
    "Check",
    "ConformanceFailure",
    "Context",
    "check",
    "expect",
    "expect_equal",
    "msg",
    "registered",
]

CheckFunction = Callable[["Context"], Awaitable[None]]


class ConformanceFailure(AssertionError):
    """A session broke a promise of the capability being checked."""


def expect(condition: bool, message: str) -> None:
    """Fail the check with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConformanceFailure(message)


def expect_equal(actual: object, expected: object, what: str) -> None:
    """Fail the check unless ``actual == expected``, saying what was compared."""
    if actual != expected:
        raise ConformanceFailure(f"{what}: expected {expected!r}, got {actual!r}")


def msg(text: str, role: str = "user") -> dict[str, Any]:
    """A minimal SDK input item."""
    return {"role": role, "content": text}


@dataclass(frozen=True)
class Check:
    """One spec check of one capability."""

    name: str
    capability: Capability
    run: CheckFunction
    needs_hooks: bool
    doc: str


_CHECKS: list[Check] = []


def check(
    capability: Capability, *, needs_hooks: bool = False
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as a spec check of ``capability``."""

    def register(func: CheckFunction) -> CheckFunction:
        doc = (func.__doc__ or "").strip().splitlines()
        name = func.__name__
        if any(existing.name == name for existing in _CHECKS):
            raise ValueError(f"a spec check named {name!r} is already registered")
        _CHECKS.append(Check(name, capability, func, needs_hooks, doc[0] if doc else ""))
        return func

    return register


def registered(capability: Capability | None = None) -> list[Check]:
    """The checks registered so far (of one capability, or all), in registration order."""
    return [c for c in _CHECKS if capability is None or c.capability is capability]


class Context:
    """What a check gets: fresh session ids and handles, cleaned up after the check."""

    def __init__(self, subject: Subject, stack: AsyncExitStack) -> None:
        self.subject = subject
        self._stack = stack

    def new_id(self) -> str:
        """A session id no other check uses."""
        return f"conformance-{uuid.uuid4().hex}"

    async def open(self, session_id: str) -> Any:
        """A fresh handle on ``session_id``, closed (after a rollback) when the check ends."""
        session = await self._stack.enter_async_context(self.subject.open(session_id))
        self._stack.push_async_callback(_discard_staged, session)
        return session

    async def open_hooked(self, session_id: str, hooks: WriteHooks) -> Any:
        """Like :meth:`open`, with ``hooks`` around every write of this handle."""
        cm = self.subject.open_hooked(session_id, hooks)
        session = await self._stack.enter_async_context(cm)
        self._stack.push_async_callback(_discard_staged, session)
        return session

    def defer(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` when the check ends, before the handles opened so far close."""
        self._stack.callback(callback)

    async def stored(self, session_id: str) -> list[Any]:
        """The durable history: what a handle opened now (and closed again) reads."""
        async with self.subject.open(session_id) as session:
            items: list[Any] = await session.get_items()
            return items

    async def flush(self, session: Any) -> None:
        """Make the session's writes durable: ``commit()`` if it is buffered."""
        if is_buffered(session):
            await session.commit()

    async def store(self, session: Any) -> Store[Any]:
        """The :class:`sessions.Store` under ``session`` (opened if it is lazy), whose
        backend is a :class:`sessions.Backend`."""
        await session.get_items(limit=1)
        if backend_of(session) is None:
            raise ConformanceFailure(f"{type(session).__name__} has no sessions.Backend")
        store: Store[Any] = session.store
        return store


async def _discard_staged(session: Any) -> None:
    """Roll back what a check left staged, so closing the handle does not warn."""
    if is_buffered(session) and not getattr(session, "closed", False) and session.has_pending:
        await session.rollback()
