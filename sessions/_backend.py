"""The storage boundary: what a backend must do, and the data that crosses it.

A backend stores and loads batches atomically, nothing more. Staging, read-your-writes,
``limit``, shielding, retries, idempotency bookkeeping and warnings all live in the core
(:mod:`sessions._staging`, :mod:`sessions._commit`, :mod:`sessions._session`), once, for
every backend. ``docs/architecture.md`` explains how to add one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AdminBackend",
    "Backend",
    "Batch",
    "CatalogueBackend",
    "InfoChange",
    "QuarantineEntry",
    "Row",
    "RunStateBackend",
    "RunStateChange",
    "SessionFilter",
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
class InfoChange:
    """A change of a session's catalogue entry, applied with the batch that carries it.

    Only the fields named in ``fields`` change (validated by the core,
    :mod:`sessions._catalogue`): ``user_id``, ``title``, ``tags`` (sorted, unique),
    ``metadata`` (JSON text of an object) and ``ttl`` (seconds); ``None`` clears one.
    """

    fields: frozenset[str]
    user_id: str | None = None
    title: str | None = None
    tags: tuple[str, ...] = ()
    metadata: str | None = None
    ttl: float | None = None


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
    * ``info``: an :class:`InfoChange` of the session's catalogue entry, applied in the
      same transaction (only backends implementing :class:`CatalogueBackend`).
    * ``expect_version``: the session's version (see :attr:`SessionInfo.version`) the
      batch was prepared against. Every applied batch advances the version by one; if
      the version before this batch is not ``expect_version``, the backend raises
      :class:`~sessions.errors.VersionConflictError` and nothing is applied. Checked
      only when the batch is applied (not when it is skipped as already applied).

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
    info: InfoChange | None = None
    expect_version: int | None = None
    quarantine: tuple[tuple[str, str], ...] = ()

    @property
    def plain(self) -> bool:
        """No condition, run-state, catalogue or quarantine write: only ``clear``,
        ``pops``, ``items``."""
        return (
            self.tail is None
            and self.run_state is None
            and self.info is None
            and self.expect_version is None
            and not self.quarantine
        )


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
    """Metadata kept per session by the store (the catalogue fields: ``docs/catalogue.md``)."""

    session_id: str
    item_count: int
    created_at: datetime
    updated_at: datetime
    user_id: str | None = None
    title: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] | None = field(default=None, hash=False)
    ttl: timedelta | None = None
    """The session's own idle time-to-live (``None``: the store's default applies)."""
    version: int = 0
    """Advances by one with every applied batch (``0``: never committed to)."""

    def expires_at(self, default_ttl: timedelta | None = None) -> datetime | None:
        """When :meth:`~sessions.Store.purge` may delete it: ``updated_at`` plus its own
        TTL, else ``default_ttl`` (``None``: never)."""
        ttl = self.ttl if self.ttl is not None else default_ttl
        return None if ttl is None else self.updated_at + ttl


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which sessions a catalogue listing or count covers (``None``: any)."""

    user_id: str | None = None
    tag: str | None = None
    updated_after: datetime | None = None


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


@runtime_checkable
class CatalogueBackend(Protocol):
    """A backend that keeps the session catalogue (user, title, tags, metadata, TTL,
    version): :attr:`Batch.info` and :attr:`Batch.expect_version` are applied, and
    listing, counting, expiry and per-user erasure are indexed queries."""

    async def load_versioned(self, session_id: str, limit: int | None) -> tuple[list[Row], int]:
        """:meth:`Backend.load` and the session's version, from one snapshot."""
        ...

    async def find_sessions(
        self, where: SessionFilter, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        """Sessions matching ``where``, ordered by id, the first ``limit`` after ``after``."""
        ...

    async def count_sessions(self, where: SessionFilter) -> int:
        """How many sessions match ``where``."""
        ...

    async def expired_sessions(
        self, now: datetime, default_ttl: float | None, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        """Sessions whose TTL (their own, else ``default_ttl`` seconds) has elapsed at
        ``now`` since ``updated_at``; ordered by id, the first ``limit`` after ``after``."""
        ...

    async def delete_expired(
        self, session_id: str, now: datetime, default_ttl: float | None
    ) -> bool:
        """Delete a session as :meth:`AdminBackend.delete_session` does, only if (inside
        that transaction) its TTL has still elapsed at ``now``."""
        ...

    async def delete_user(self, user_id: str) -> list[str]:
        """Delete every session of ``user_id`` (items, batch records, run states,
        catalogue rows) in one transaction; the ids of the deleted sessions."""
        ...
