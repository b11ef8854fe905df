"""Where metrics and traces hook in; nothing here imports a telemetry library.

:func:`sessions.otel.instrument` installs an :class:`Observer` (the OpenTelemetry one);
until then ``HOOK.observer`` is ``None`` and the commit and load paths pay one global
lookup each. The observer is process-wide, like OpenTelemetry's own providers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._model.backend import Backend, CatalogueBackend, Row

__all__ = [
    "HOOK",
    "Observer",
    "Operation",
    "install",
    "observed_load",
    "observed_load_versioned",
    "report_lock_wait",
    "system_of",
]


@dataclass(slots=True)
class Operation:
    """One commit or load, as an observer sees it."""

    name: str
    """``"commit"`` or ``"load"``."""
    system: str
    """The database: ``"sqlite"``, ``"postgresql"``, ``"memory"``, ``"other"`` (wrapped)."""
    items: int = 0
    """Items written (commit) or rows read (load)."""
    batches: int = 0
    attempts: int = 0
    """Commit attempts made (``1``: no retry)."""
    outcome: str = "ok"
    """``ok``, ``conflict``, ``failed`` (nothing applied), ``unknown`` (outcome
    unknown), ``cancelled`` or ``error`` (an unexpected exception)."""
    error_type: str | None = None
    """The exception's class name when the operation did not succeed."""
    started: float = field(default_factory=time.perf_counter)
    handle: Any = None
    """The observer's own (its span)."""


class Observer(Protocol):
    """What the package reports. Every method must be cheap and must not raise."""

    def begin(self, op: Operation) -> None: ...

    def end(self, op: Operation) -> None: ...

    def pool_wait(self, system: str, seconds: float) -> None:
        """A pooled connection was waited for ``seconds`` (PostgreSQL)."""
        ...

    def lock_wait(self, system: str, seconds: float) -> None:
        """A commit waited ``seconds`` for its session's lock before it could start."""
        ...

    def group(self, system: str, commits: int) -> None:
        """One group commit (one transaction) carried ``commits`` commits."""
        ...


class Hook:
    """The process's observer, read on every commit and load (``HOOK.observer``)."""

    __slots__ = ("observer",)

    def __init__(self) -> None:
        self.observer: Observer | None = None


HOOK = Hook()


def install(observer: Observer | None) -> Observer | None:
    """Make ``observer`` the process's observer (``None``: none); returns the previous."""
    previous, HOOK.observer = HOOK.observer, observer
    return previous


def system_of(backend: object) -> str:
    """The ``db.system.name`` of a backend (its ``system`` attribute, else ``other``)."""
    system = getattr(backend, "system", None)
    return system if isinstance(system, str) else "other"


def report_lock_wait(backend: object, seconds: float) -> None:
    """Report that a commit on ``backend`` waited ``seconds`` for its session's lock (to
    the observer, if one is installed)."""
    observer = HOOK.observer
    if observer is not None:
        observer.lock_wait(system_of(backend), seconds)


async def observed_load(backend: Backend, session_id: str, limit: int | None) -> list[Row]:
    """``backend.load(...)``, reported to the observer when one is installed."""
    observer = HOOK.observer
    if observer is None:
        return await backend.load(session_id, limit)
    rows, _, _ = await _observed_read(
        observer, backend, _with_no_version(backend, session_id, limit)
    )
    return rows


async def observed_load_versioned(
    backend: CatalogueBackend, session_id: str, limit: int | None
) -> tuple[list[Row], int, str | None]:
    """``backend.load_versioned(...)``, reported as a load when an observer is installed."""
    observer = HOOK.observer
    if observer is None:
        return await backend.load_versioned(session_id, limit)
    return await _observed_read(observer, backend, backend.load_versioned(session_id, limit))


async def _with_no_version(
    backend: Backend, session_id: str, limit: int | None
) -> tuple[list[Row], int, str | None]:
    return await backend.load(session_id, limit), 0, None


async def _observed_read(
    observer: Observer, backend: object, read: Awaitable[tuple[list[Row], int, str | None]]
) -> tuple[list[Row], int, str | None]:
    """Await ``read`` (rows, a version, a life) as one ``load`` operation of ``observer``."""
    op = Operation("load", system_of(backend))
    observer.begin(op)
    try:
        rows, version, life = await read
    except BaseException as exc:
        op.outcome, op.error_type = _failure(exc), type(exc).__name__
        raise
    else:
        op.items = len(rows)
        return rows, version, life
    finally:
        observer.end(op)


def _failure(exc: BaseException) -> str:
    return "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
