"""The storage boundary: what a backend must do, and the data that crosses it.

A backend stores and loads batches atomically, nothing more. Staging, read-your-writes,
``limit``, shielding, retries, idempotency bookkeeping and warnings all live in the core
(:mod:`sessions._staging`, :mod:`sessions._commit`, :mod:`sessions._session`), once, for
every backend. ``docs/architecture.md`` explains how to add one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = [
    "AdminBackend",
    "Backend",
    "Batch",
    "QuarantineEntry",
    "Row",
    "RunStateBackend",
    "RunStateChange",
    "SessionInfo",
]

Row = tuple[int, str]
"""One stored item: ``(key, json_text)``. ``key`` orders a session's items and
identifies the row for a staged pop; it is opaque to the core."""


@dataclass(frozen=True, slots=True)
class RunStateChange:
    """A write of the session's saved run state, applied with the batch that carries it.

    ``text`` is the serialized state, or ``None`` to remove it. ``expect_version``: the
    stored version this change was made against (``0``: no state was ever stored); if the
    stored version differs, the backend raises :class:`~sessions.errors.ConflictError`
    and nothing of the batch is applied. ``None`` writes unconditionally. Every change
    bumps the stored version by one (a removal too: versions are never reused).
    """

    text: str | None
    expect_version: int | None = None
    label: str | None = None
    """A short text of the caller's kept with the state (``None`` with a removal)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One unit of commit: applied whole or not at all, and at most once per id.

    Applied in this order: ``clear`` deletes every stored item of the session, else
    ``pops`` deletes exactly these rows (all must still exist, otherwise the backend
    raises :class:`~sessions.errors.ConflictError`); then ``items`` are appended,
    contiguous and in order, after every item already stored.

    ``restore_times`` (restores only: ``sessions import``) is ``(created_at,
    updated_at)``: when the batch is applied, the session's metadata takes these
    times instead of the commit's, in the same transaction. ``None`` for every commit.

    Two optional conditions and one optional write, used by the SDK flows:

    * ``tail``: the key of the newest stored item when the batch was prepared (a
      replacement of the end of the history). If any item other than this batch's own
      is stored with a greater key once the batch is applied, the backend raises
      :class:`~sessions.errors.ConflictError` and nothing is applied.
    * ``run_state``: a :class:`RunStateChange`, applied in the same transaction (only
      backends implementing :class:`RunStateBackend` are given one).

    ``quarantine``: ``(reason, json_text)`` pairs, items the core took out of the batch
    because they break a history rule (``integrity="quarantine"``, see
    :mod:`sessions._history`). Stored in the session's quarantine, in the same
    transaction and only if the batch id is new; never part of the history.
    """

    batch_id: str
    clear: bool
    pops: tuple[int, ...]
    items: tuple[str, ...]
    restore_times: tuple[datetime, datetime] | None = None
    tail: int | None = None
    run_state: RunStateChange | None = None
    quarantine: tuple[tuple[str, str], ...] = ()

    @property
    def plain(self) -> bool:
        """Neither condition, run-state write nor quarantine: only ``clear``, ``pops``
        and ``items``."""
        return self.tail is None and self.run_state is None and not self.quarantine


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """One item kept out of a session's history (see :attr:`Batch.quarantine`)."""

    key: int
    """Orders a session's quarantine (opaque, like :data:`Row` keys)."""
    batch_id: str
    """The batch the item came with."""
    reason: str
    """Why: names the broken rule, the item's type and call id (no item text)."""
    data: str
    """The item's JSON text, as it was staged."""
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Metadata kept per session by the store."""

    session_id: str
    item_count: int
    created_at: datetime
    updated_at: datetime


@runtime_checkable
class Backend(Protocol):
    """The storage layer under a session. Implementations must be safe to share
    between many sessions and tasks of one event loop."""

    #: ``apply`` is one database transaction (all batches or none).
    atomic: bool
    #: ``apply`` skips batches whose id was already applied.
    idempotent: bool

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        """The latest ``limit`` stored rows (all when ``None``), oldest first."""
        ...

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        """Apply ``batches`` in order, in one transaction, skipping already-applied ids.

        Raises :class:`~sessions.errors.TransientStorageError` for failures worth a
        retry, :class:`~sessions.errors.ConflictError` when a popped row is gone, and
        :class:`~sessions.errors.StorageError` for anything else.
        """
        ...

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        """Which of ``batch_ids`` are recorded as applied for this session."""
        ...

    async def close(self) -> None:
        """Release the backend's resources. Idempotent."""
        ...


@runtime_checkable
class RunStateBackend(Protocol):
    """A backend that stores one run state per session (tool approvals that wait for a
    human), written by :attr:`Batch.run_state` in the same transaction as the items."""

    async def load_run_state(self, session_id: str) -> tuple[str | None, int, str | None]:
        """``(text, version, label)``: the stored state (``None`` if none), its version
        (``0`` if no state was ever stored for the session) and its label."""
        ...


@runtime_checkable
class AdminBackend(Protocol):
    """Store-wide operations (listing, export, purge). Implemented by the SQLite and
    PostgreSQL backends; used by :class:`~sessions.Store` and the ``sessions`` CLI."""

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionInfo]:
        """Sessions ordered by ``session_id``, the first ``limit`` after ``after``."""
        ...

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """Metadata of one session, ``None`` if it has never been committed to."""
        ...

    async def delete_session(
        self, session_id: str, *, stale_before: datetime | None = None
    ) -> bool:
        """Delete a session's items, batch records, quarantine and metadata in one
        transaction.

        With ``stale_before``, only if (inside that transaction) its ``updated_at`` is
        still before it. ``True`` if the session was deleted.
        """
        ...

    async def stale_sessions(
        self, cutoff: datetime, *, limit: int, after: str | None = None
    ) -> list[SessionInfo]:
        """Up to ``limit`` sessions whose ``updated_at`` is before ``cutoff``, ordered by
        ``session_id``, with ids after ``after`` (all when ``None``)."""
        ...

    async def read_range(self, session_id: str, *, after: int | None, limit: int) -> list[Row]:
        """Up to ``limit`` rows with key > ``after`` (all keys when ``None``), oldest first."""
        ...

    async def read_quarantine(self, session_id: str) -> list[QuarantineEntry]:
        """The session's quarantined items, oldest first (``delete_session`` removes them)."""
        ...

    async def prune_batches(self, cutoff: datetime, *, keep_prefixes: Sequence[str]) -> int:
        """Forget the ids of batches committed before ``cutoff``; return how many.

        Ids that start with one of ``keep_prefixes`` (the bulk writers' ids, see
        :func:`sessions._commit.derived_batch_id`) are kept, however old.
        """
        ...
