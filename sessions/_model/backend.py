"""The storage boundary: what a backend must do, and the data that crosses it.

A backend stores and loads batches atomically, nothing more. Staging, read-your-writes,
``limit``, shielding, retries, idempotency bookkeeping and warnings all live in the core
(:mod:`sessions._model.staging`, :mod:`sessions._engine.commit`, :mod:`sessions._engine.session`), once, for
every backend. ``docs/architecture.md`` explains how to add one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from .history import Shape

__all__ = [
    "AdminBackend",
    "Backend",
    "Batch",
    "BranchBackend",
    "BranchRecord",
    "BranchRow",
    "RewindChange",
    "CatalogueBackend",
    "InfoChange",
    "QuarantineEntry",
    "Row",
    "RunStateBackend",
    "RunStateChange",
    "SessionFilter",
    "SessionInfo",
    "TurnBackend",
    "TurnRecord",
    "TurnRow",
    "TurnUsage",
    "TurnWindow",
    "new_batch_id",
    "staged_batch",
]


def new_batch_id() -> str:
    """A fresh batch id: 128 random bits from the operating system (as ``uuid4`` takes,
    at a fifth of its cost), as 32 hex digits."""
    return os.urandom(16).hex()


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
class TurnUsage:
    """Model usage: what a run's ``result.context_wrapper.usage`` says, or a sum of it."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """``input_tokens_details.cached_tokens``: input tokens served from the cache."""
    reasoning_tokens: int = 0
    """``output_tokens_details.reasoning_tokens``."""

    def __add__(self, other: TurnUsage) -> TurnUsage:
        return TurnUsage(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def values(self) -> tuple[int, int, int, int, int]:
        """The five counts, in field order (how backends store them)."""
        return (
            self.requests,
            self.input_tokens,
            self.output_tokens,
            self.cached_tokens,
            self.reasoning_tokens,
        )


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """The turn a batch's items make, recorded with the batch in its transaction.

    A backend implementing :class:`TurnBackend` stores one turn row per applied batch
    that has a ``turn`` and at least one item: the keys of its first and last item, the
    time and ``run_id``. Without items nothing is recorded.
    """

    run_id: str | None = None
    """The caller's id of the run that produced the items (``session.set_run_id``)."""
    created_at: datetime | None = None
    """``None``: the commit's time. A fork copies its source turns' times."""
    usage: TurnUsage | None = None
    """The model usage of the run that produced the items (``session.record_usage``)."""


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A stored turn record (see :class:`TurnBackend`)."""

    first_key: int
    last_key: int
    created_at: datetime
    run_id: str | None
    usage: TurnUsage | None = None
    items: int | None = None
    """How many of its items are stored now: set in a :class:`TurnWindow` (whose rows
    also narrow ``first_key`` / ``last_key`` to the keys of the first and last of
    them), ``None`` in :meth:`TurnBackend.load_turns`' rows."""


@dataclass(frozen=True, slots=True)
class TurnWindow:
    """The oldest or newest turn records of a session, read without its item keys
    (:meth:`TurnBackend.load_turn_window`).

    Returned only when the session's turn index is *exact*: every stored item is
    covered by a visible turn record (the items its visible records hold add up to
    the session's item count). Then the session's turns are exactly its visible
    records that still hold items, in ``first_key`` order.
    """

    count: int
    """How many turns the stored history holds (visible records holding items)."""
    rows: tuple[TurnRow, ...]
    """The records asked for, oldest first; each with ``items`` set and ``first_key`` /
    ``last_key`` the keys of its first and last stored item."""


@dataclass(frozen=True, slots=True)
class BranchRecord:
    """Records, with the batch, that its session is a fork of ``source_id`` made at
    turn ``at_turn`` (see :class:`BranchBackend`)."""

    source_id: str
    at_turn: int


@dataclass(frozen=True, slots=True)
class BranchRow:
    """A stored fork record: ``session_id`` was forked from a session at ``at_turn``."""

    session_id: str
    at_turn: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class RewindChange:
    """Hide the newest turns, or bring the last hidden ones back (``session.rewind``).

    ``hide_after``: a row key; every stored item with a greater key, and every turn
    record starting after it, is moved aside (kept, not deleted) under a new rewind
    number, the session's highest. ``None``: undo the newest rewind: its items and turn
    records come back with their keys, unless an item is stored with a greater key than
    the first of them (a turn committed since), which is a
    :class:`~sessions.errors.ConflictError`. An undo with nothing hidden is skipped whole
    (:func:`sessions._model.decide.decide` returns no plan, from what the backend read inside
    the transaction before the batch is recorded): no batch record, version,
    ``updated_at`` or session row. An undo with items of its own is always blocked
    (they are stored after the hidden ones).
    """

    hide_after: int | None


@dataclass(frozen=True, slots=True)
class InfoChange:
    """A change of a session's catalogue entry, applied with the batch that carries it.

    Only the fields named in ``fields`` change (validated by the core,
    :mod:`sessions._model.catalogue`): ``user_id``, ``title``, ``tags`` (sorted, unique),
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

    What a batch means is decided once, for every backend, by
    :func:`sessions._model.decide.decide`: a backend reads the facts a batch's conditions need
    inside its transaction (a :class:`~sessions._model.decide.Snapshot`), and writes the plan
    it returns or lets the conflict it raises roll the transaction back. When several
    conditions fail, the first in this order is raised: the session's life, pops,
    ``expect_version``, ``tail``, the run state's version, the fork target, a blocked undo.

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
    :mod:`sessions._model.history`). Stored in the session's quarantine, in the same
    transaction and only if the batch id is new; never part of the history.
    ``turn``: a :class:`TurnRecord` for the batch's items (recorded by backends
    implementing :class:`TurnBackend`, ignored by others; not a condition, so a batch
    with a turn is still :attr:`plain`). A ``clear`` also removes the session's turn
    records.

    ``incarnation``: the life of the session the batch was prepared against, as
    :meth:`CatalogueBackend.load_versioned` returned it (``None``: none, no check). A
    session's life starts when its metadata row is created and ends when the session is
    deleted; backends implementing :class:`CatalogueBackend` give each life a new
    token. If the session does not exist, or exists with another life, the backend
    raises :class:`~sessions.errors.DeletedConflictError` and nothing is applied (the
    batch never creates a session). Checked with the batch's other writes, on the
    plain path too (a batch with one is still :attr:`plain`); ignored by backends that
    do not implement :class:`CatalogueBackend`.

    ``branch``: a :class:`BranchRecord` (forks only), written with the batch by
    backends implementing :class:`BranchBackend`; a batch with one is not :attr:`plain`.
    Before writing it, the backend reads whether the session holds items of another
    batch, hidden items, or a fork record; :func:`sessions._model.decide.decide` refuses a
    target that is not fresh (nothing applied).

    ``rewind``: a :class:`RewindChange` (rewinds only, given only to backends
    implementing :class:`BranchBackend`), applied after the ``tail`` condition; a batch
    with one is not :attr:`plain`. A ``clear`` also removes hidden items.
    """

    batch_id: str
    clear: bool
    pops: tuple[int, ...]
    items: tuple[str, ...]
    restore_times: tuple[datetime, datetime] | None = None
    tail: int | None = None
    run_state: RunStateChange | None = None
    turn: TurnRecord | None = None
    branch: BranchRecord | None = None
    rewind: RewindChange | None = None
    info: InfoChange | None = None
    expect_version: int | None = None
    quarantine: tuple[tuple[str, str], ...] = ()
    incarnation: str | None = None
    shapes: tuple[Shape, ...] | None = field(default=None, compare=False, repr=False)
    """The core's own, backends ignore it: for each of ``items``, the fields the history
    rules read (:func:`sessions._model.history.shape_of`, taken when it was staged; ``None``
    where the text must be decoded), or ``None`` for the whole batch."""

    @property
    def plain(self) -> bool:
        """No condition, run-state, catalogue, quarantine, branch or rewind write:
        ``clear``, ``pops``, ``items`` (and a ``turn`` record, which every backend writes in
        its plain path too)."""
        return (
            self.tail is None
            and self.run_state is None
            and self.info is None
            and self.expect_version is None
            and not self.quarantine
            and self.branch is None
            and self.rewind is None
        )


#: What :func:`staged_batch` sets, each field's slot setter (which a frozen dataclass's own
#: ``__init__`` reaches through ``object.__setattr__``, one lookup and call more a field).
_SET = {name: getattr(Batch, name).__set__ for name in Batch.__dataclass_fields__}
_NEW = object.__new__


def staged_batch(
    batch_id: str,
    clear: bool,
    pops: tuple[int, ...],
    items: tuple[str, ...],
    *,
    tail: int | None,
    run_state: RunStateChange | None,
    turn: TurnRecord | None,
    info: InfoChange | None,
    expect_version: int | None,
    incarnation: str | None,
    shapes: tuple[Shape, ...] | None,
) -> Batch:
    """``Batch(batch_id, clear, pops, items, tail=..., ...)`` with every other field at
    its default, the same value (``tests/unit/test_staging_batches.py`` compares the
    two), made at a third of the cost: a session seals one on every commit."""
    batch: Batch = _NEW(Batch)
    _SET["batch_id"](batch, batch_id)
    _SET["clear"](batch, clear)
    _SET["pops"](batch, pops)
    _SET["items"](batch, items)
    _SET["restore_times"](batch, None)
    _SET["tail"](batch, tail)
    _SET["run_state"](batch, run_state)
    _SET["turn"](batch, turn)
    _SET["branch"](batch, None)
    _SET["rewind"](batch, None)
    _SET["info"](batch, info)
    _SET["expect_version"](batch, expect_version)
    _SET["quarantine"](batch, ())
    _SET["incarnation"](batch, incarnation)
    _SET["shapes"](batch, shapes)
    return batch


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
        TTL, else ``default_ttl`` (``None``: never, or not before the end of the range
        of ``datetime``, the year 9999)."""
        ttl = self.ttl if self.ttl is not None else default_ttl
        if ttl is None:
            return None
        try:
            return self.updated_at + ttl
        except OverflowError:
            return None


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
class TurnBackend(Protocol):
    """A backend that records turns (:attr:`Batch.turn`) with the batches that make them."""

    async def load_turns(self, session_id: str) -> tuple[list[TurnRow], list[int]]:
        """The session's turn records ordered by ``first_key`` and the keys of its
        stored items in order, read from one snapshot (hidden ones left out)."""
        ...

    async def load_turn_window(
        self, session_id: str, *, oldest: int | None = None, newest: int | None = None
    ) -> TurnWindow | None:
        """The ``oldest`` first or the ``newest`` last visible turn records holding
        items (give one of the two; both ``None``: all of them) and the turn count,
        from one snapshot, without reading item keys beyond the first and last of each
        record returned: its cost follows what it returns, not the history's length.
        ``None`` when the session's turn index is not exact (stored items no visible
        record covers: history from before turn records, imports, migrations); the
        core then reads :meth:`load_turns`. A session that does not exist is an exact
        empty window. See :class:`TurnWindow`."""
        ...

    async def usage_totals(
        self, session_id: str | None, since: datetime | None
    ) -> tuple[TurnUsage, int]:
        """The sum of the usage of the turn records of ``session_id`` (every session's
        when ``None``) created at or after ``since`` (all when ``None``), hidden ones
        included, and how many turn records carried usage."""
        ...


@runtime_checkable
class BranchBackend(Protocol):
    """A backend that keeps fork records (:attr:`Batch.branch`) and applies rewinds
    (:attr:`Batch.rewind`): its reads never return hidden items or turn records."""

    async def load_branches(self, source_id: str) -> list[BranchRow]:
        """The sessions forked from ``source_id``, oldest fork first."""
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

    async def delete_session(self, session_id: str, *, keep_forks: bool = False) -> bool:
        """Delete a session's items, batch records, quarantine and metadata in one
        transaction, with its own fork record and (unless ``keep_forks``) the records of
        the sessions forked from it. ``True`` if the session existed."""
        ...

    async def delete_stale(self, session_ids: Sequence[str], stale_before: datetime) -> list[str]:
        """Delete, as :meth:`delete_session` does and all in one transaction, each of
        ``session_ids`` whose ``updated_at`` is (checked inside that transaction) still
        before ``stale_before``; the ids deleted."""
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
        :func:`sessions._engine.commit.derived_batch_id`) are kept, however old.
        """
        ...


@runtime_checkable
class CatalogueBackend(Protocol):
    """A backend that keeps the session catalogue (user, title, tags, metadata, TTL,
    version): :attr:`Batch.info` and :attr:`Batch.expect_version` are applied, and
    listing, counting, expiry and per-user erasure are indexed queries."""

    async def load_versioned(
        self, session_id: str, limit: int | None
    ) -> tuple[list[Row], int, str | None]:
        """:meth:`Backend.load`, the session's version and its life (see
        :attr:`Batch.incarnation`; ``None``: the session does not exist), from one
        snapshot."""
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
        self, session_ids: Sequence[str], now: datetime, default_ttl: float | None
    ) -> list[str]:
        """Delete, as :meth:`AdminBackend.delete_stale` does, each of ``session_ids``
        whose TTL (checked inside that transaction) has still elapsed at ``now``."""
        ...

    async def delete_user(self, user_id: str) -> list[str]:
        """Delete every session of ``user_id`` (items, batch records, run states,
        catalogue rows) in one transaction; the ids of the deleted sessions."""
        ...
