"""What a session can offer, and how the suite tells what a given session offers."""

from __future__ import annotations

import enum
from typing import Any

from .._model.backend import Backend

__all__ = [
    "BASE_CAPABILITIES",
    "EXTENDED_CAPABILITIES",
    "Capability",
    "backend_of",
    "is_buffered",
]


class Capability(str, enum.Enum):
    """One promise a session may keep; each has a set of spec checks.

    Base capabilities are the Agents SDK ``Session`` protocol itself: every session must
    pass them. Extended ones are detected per subject; a subject that does not offer one
    is reported as such, not failed.
    """

    ITEMS = "items"
    LIMIT = "limit"
    POP = "pop_item"
    CLEAR = "clear_session"
    ORDERING = "ordering"
    BUFFERED = "buffered"
    STAGED_POPS = "staged_pops"
    SHIELDED_COMMIT = "shielded_commit"
    ATOMIC_BATCH = "atomic_batch"
    IDEMPOTENT_RETRY = "idempotent_retry"
    CROSS_PROCESS = "cross_process"

    @property
    def description(self) -> str:
        """One line saying what passing this capability means."""
        return _DESCRIPTIONS[self]

    @property
    def base(self) -> bool:
        """Whether every session must pass it (the SDK ``Session`` protocol)."""
        return self in BASE_CAPABILITIES


_DESCRIPTIONS = {
    Capability.ITEMS: "add_items / get_items round-trip items in order, as copies, per session id",
    Capability.LIMIT: "get_items(limit=n) returns the latest n items in chronological order",
    Capability.POP: "pop_item returns and removes the newest item; None when empty",
    Capability.CLEAR: "clear_session removes the whole history of that session only",
    Capability.ORDERING: "writes keep their order; concurrent writers' batches stay contiguous",
    Capability.BUFFERED: "writes are staged until commit(); rollback() and transaction() work",
    Capability.STAGED_POPS: "pop_item of stored history is staged, applied at commit, conflicts caught",
    Capability.SHIELDED_COMMIT: "a commit whose caller is cancelled or times out runs to its outcome",
    Capability.ATOMIC_BATCH: "the backend applies several batches all or nothing",
    Capability.IDEMPOTENT_RETRY: "a commit retried after an unknown outcome is applied exactly once",
    Capability.CROSS_PROCESS: "real processes committing to one session keep each batch contiguous",
}

BASE_CAPABILITIES = frozenset(
    {
        Capability.ITEMS,
        Capability.LIMIT,
        Capability.POP,
        Capability.CLEAR,
        Capability.ORDERING,
    }
)
EXTENDED_CAPABILITIES = frozenset(Capability) - BASE_CAPABILITIES

_BUFFERED_API = ("commit", "rollback", "transaction")


def is_buffered(session: Any) -> bool:
    """Whether ``session`` has the buffered API (``commit``, ``rollback``,
    ``transaction()``, ``has_pending``) of :class:`sessions.BufferedSession`."""
    return all(callable(getattr(session, name, None)) for name in _BUFFERED_API) and hasattr(
        session, "has_pending"
    )


def backend_of(session: Any) -> Backend | None:
    """The :class:`sessions.Backend` under a session (``session.store.backend``), if any."""
    backend = getattr(getattr(session, "store", None), "backend", None)
    return backend if isinstance(backend, Backend) else None


def offered(session: Any, capability: Capability, *, can_spawn: bool) -> str | None:
    """``None`` when ``session`` offers ``capability``, else why it does not."""
    if capability.base:
        return None
    name = type(session).__name__
    if capability is Capability.CROSS_PROCESS:
        return None if can_spawn else "the subject declares no way to open it from another process"
    if not is_buffered(session):
        return f"{name} has no commit() / rollback() / transaction() / has_pending"
    if capability in (Capability.ATOMIC_BATCH, Capability.IDEMPOTENT_RETRY):
        backend = backend_of(session)
        if backend is None:
            return f"{name} has no sessions.Backend under it (session.store.backend)"
        flag = "atomic" if capability is Capability.ATOMIC_BATCH else "idempotent"
        if getattr(backend, flag) is not True:
            return f"{name}'s backend declares {flag}={getattr(backend, flag)!r}"
    return None
