"""In-memory reference backend: small, exact, atomic and idempotent.

Like httpx's ``MockTransport``, it is here for tests: yours (a ``MemorySession`` behaves
like every other session of this package, minus durability) and the conformance suite's
(``sessions.testing`` runs against it as the reference every other backend is compared
with). Nothing is written anywhere: the history lives as long as the
:class:`MemoryBackend` object.

``apply`` builds the new state of a session on copies and swaps it in only when every
batch went through, so a failing batch leaves nothing behind; batch ids are remembered
per session, so a retried batch is skipped. Each call yields to the event loop once, as
a real driver would, so code under test meets the same interleavings; the state itself
changes without suspending, so no cancellation can tear it. One event loop at a time:
like the other backends, it is not thread-safe.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ._backend import (
    Batch,
    BranchRow,
    InfoChange,
    QuarantineEntry,
    Row,
    SessionFilter,
    SessionInfo,
    TurnRow,
    TurnUsage,
)
from ._branchrules import fork_target_conflict, skips_undo
from ._catalogue import check_life, decode_metadata, expired, stored_ttl, version_conflict
from ._conflicts import pops_gone, run_state_moved, tail_moved, undo_blocked
from ._options import StoreOptions, session_options
from ._policy import Integrity, RetryPolicy
from ._session import BufferedSession
from ._store import Store

__all__ = ["MemoryBackend", "MemorySession", "MemoryStore"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class _History:
    created_at: datetime
    updated_at: datetime
    rows: dict[int, str] = field(default_factory=dict)  # insertion order is history order
    next_key: int = 1
    batches: dict[str, datetime] = field(default_factory=dict)  # batch id -> applied at
    run_state: tuple[str | None, int, str | None] = (None, 0, None)  # text, version, label
    catalogue: InfoChange = InfoChange(frozenset())
    version: int = 0
    turns: list[TurnRow] = field(default_factory=list)  # ordered by first_key
    fork_of: tuple[str, int, datetime] | None = None  # source id, at turn, when
    hidden: _Hidden = field(default_factory=lambda: _Hidden({}, []))  # rewound away
    quarantine: tuple[QuarantineEntry, ...] = ()
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)  # this life's token

    def info(self, session_id: str) -> SessionInfo:
        entry = self.catalogue
        return SessionInfo(
            session_id,
            len(self.rows),
            self.created_at,
            self.updated_at,
            user_id=entry.user_id,
            title=entry.title,
            tags=entry.tags,
            metadata=decode_metadata(entry.metadata),
            ttl=stored_ttl(entry.ttl),
            version=self.version,
        )

    def expired(self, now: datetime, default_ttl: float | None) -> bool:
        return expired(self.updated_at, self.catalogue.ttl, default_ttl, now)

    def matches(self, where: SessionFilter) -> bool:
        entry = self.catalogue
        return (
            (where.user_id is None or entry.user_id == where.user_id)
            and (where.tag is None or where.tag in entry.tags)
            and (where.updated_after is None or self.updated_at > where.updated_after)
        )


@dataclass
class _Hidden:
    """What rewinds moved aside: rows (key -> (rewind number, text)) and turn records."""

    rows: dict[int, tuple[int, str]]
    turns: list[tuple[int, TurnRow]]

    def copy(self) -> _Hidden:
        return _Hidden(dict(self.rows), list(self.turns))


def _rewind(
    rows: dict[int, str], turns: list[TurnRow], hidden: _Hidden, batch: Batch, session_id: str
) -> None:
    """Apply ``batch.rewind`` to the (copied) state, in place."""
    assert batch.rewind is not None
    after = batch.rewind.hide_after
    if after is not None:
        number = max((n for n, _ in hidden.rows.values()), default=0) + 1
        for key in [key for key in rows if key > after]:
            hidden.rows[key] = (number, rows.pop(key))
        hidden.turns.extend((number, t) for t in turns if t.first_key > after)
        turns[:] = [t for t in turns if t.first_key <= after]
        return
    if not hidden.rows:
        return
    number = max(n for n, _ in hidden.rows.values())
    back = sorted(key for key, (n, _) in hidden.rows.items() if n == number)
    if any(key > back[0] for key in rows):
        raise undo_blocked(session_id)
    for key in back:
        rows[key] = hidden.rows.pop(key)[1]
    turns.extend(t for n, t in hidden.turns if n == number)
    turns.sort(key=lambda t: t.first_key)
    hidden.turns = [(n, t) for n, t in hidden.turns if n != number]


def _applied(
    history: _History | None, session_id: str, batches: Sequence[Batch]
) -> _History | None:
    """The state after ``batches`` (``None``: nothing new), computed on copies.

    Raises without changing ``history``.
    """
    now = _now()
    new = history is None
    if history is None:
        history = _History(now, now)
    rows = dict(history.rows)
    next_key = history.next_key
    done = dict(history.batches)
    run_state = history.run_state
    turns = list(history.turns)
    hidden = history.hidden.copy()
    fork_of = history.fork_of
    quarantine = list(history.quarantine)
    catalogue, version = history.catalogue, history.version
    created, updated = history.created_at, history.updated_at
    for batch in batches:
        if batch.batch_id in done:
            continue  # applied by an earlier attempt
        check_life(session_id, batch, None if new else history.incarnation)
        if skips_undo(batch, bool(hidden.rows)):
            continue  # nothing to undo: nothing written, not recorded
        if batch.expect_version is not None and batch.expect_version != version:
            raise version_conflict(session_id, batch.expect_version, version)
        version += 1
        if batch.info is not None:
            catalogue = _catalogue_after(catalogue, batch.info)
        if batch.clear:
            rows.clear()
            turns.clear()
            hidden = _Hidden({}, [])
        first = next_key
        next_key = _rows_after(rows, batch, next_key, session_id)
        _turn_parts(batch, rows, turns, hidden, (first, now), session_id)
        if batch.run_state is not None:
            run_state = _run_state_after(run_state, batch, session_id)
        if batch.branch is not None:
            fork_of = _forked(batch, session_id, (rows, first, hidden, fork_of), now)
        _quarantined(quarantine, batch, now)
        done[batch.batch_id] = now
        updated = max(updated, now)
        if batch.restore_times is not None:  # a restore (import): the export's times
            created, updated = batch.restore_times
    if len(done) == len(history.batches):
        return None
    kept = (created, updated, rows, next_key, done, run_state, catalogue, version)
    return _History(*kept, turns, fork_of, hidden, tuple(quarantine), history.incarnation)


def _forked(
    batch: Batch,
    session_id: str,
    state: tuple[dict[int, str], int, _Hidden, tuple[str, int, datetime] | None],
    now: datetime,
) -> tuple[str, int, datetime]:
    """The fork record ``batch.branch`` writes, if the target is fresh (``state``: its
    rows, the batch's first key, hidden rows, fork record); else the core's error."""
    assert batch.branch is not None
    rows, first, hidden, fork_of = state
    error = fork_target_conflict(
        session_id,
        batch.branch,
        holds_items=any(key < first for key in rows),
        holds_hidden=bool(hidden.rows),
        fork_of=None if fork_of is None else fork_of[:2],
    )
    if error is not None:
        raise error
    return (batch.branch.source_id, batch.branch.at_turn, now)


def _quarantined(quarantine: list[QuarantineEntry], batch: Batch, now: datetime) -> None:
    """Append ``batch``'s quarantined items to ``quarantine`` (a copy)."""
    for reason, text in batch.quarantine:
        quarantine.append(QuarantineEntry(len(quarantine) + 1, batch.batch_id, reason, text, now))


def _rows_after(rows: dict[int, str], batch: Batch, next_key: int, session_id: str) -> int:
    """Apply ``batch``'s pops and items to ``rows`` (a copy), check its tail condition;
    return the next free key."""
    missing = sum(1 for key in batch.pops if key not in rows)
    if missing:
        raise pops_gone(session_id, missing, len(batch.pops))
    for key in batch.pops:
        del rows[key]
    first = next_key
    for text in batch.items:
        rows[next_key] = text
        next_key += 1
    if batch.tail is not None and any(batch.tail < key < first for key in rows):
        raise tail_moved(session_id)
    return next_key


def _turn_parts(
    batch: Batch,
    rows: dict[int, str],
    turns: list[TurnRow],
    hidden: _Hidden,
    at: tuple[int, datetime],
    session_id: str,
) -> None:
    """A batch's rewind and turn record (``at``: its first key and the commit's time)."""
    if batch.rewind is not None:
        _rewind(rows, turns, hidden, batch, session_id)
    first, now = at
    if batch.turn is not None and batch.items:
        when = now if batch.turn.created_at is None else batch.turn.created_at
        last = first + len(batch.items) - 1
        turns.append(TurnRow(first, last, when, batch.turn.run_id, batch.turn.usage))


def _catalogue_after(current: InfoChange, change: InfoChange) -> InfoChange:
    values = {name: getattr(current, name) for name in ("user_id", "title", "metadata", "ttl")}
    values.update({name: getattr(change, name) for name in change.fields if name != "tags"})
    tags = change.tags if "tags" in change.fields else current.tags
    return InfoChange(frozenset(), tags=tags, **values)


def _run_state_after(
    current: tuple[str | None, int, str | None], batch: Batch, session_id: str
) -> tuple[str | None, int, str | None]:
    change = batch.run_state
    assert change is not None
    version = current[1]
    if change.expect_version is not None and change.expect_version != version:
        raise run_state_moved(session_id, version, change.expect_version)
    return change.text, version + 1, change.label


class MemoryBackend:
    """The :class:`~sessions.Backend` protocol (and store operations) over a dict.

    Share one ``MemoryBackend`` between stores to give several "connections" the same
    data. ``close()`` releases nothing and forgets nothing: the data lives as long as
    this object.
    """

    atomic = True
    idempotent = True
    system = "memory"

    def __init__(self) -> None:
        self._sessions: dict[str, _History] = {}

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        """The latest ``limit`` stored rows (all when ``None``), oldest first."""
        await asyncio.sleep(0)
        history = self._sessions.get(session_id)
        if history is None or limit == 0:
            return []
        rows = list(history.rows.items())
        return rows if limit is None else rows[-limit:]

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        """Apply ``batches`` whole or not at all, skipping ids already applied."""
        await asyncio.sleep(0)
        changed = _applied(self._sessions.get(session_id), session_id, batches)
        if changed is not None:
            self._sessions[session_id] = changed

    async def load_run_state(self, session_id: str) -> tuple[str | None, int, str | None]:
        """The saved run state: ``(text, version, label)``."""
        await asyncio.sleep(0)
        history = self._sessions.get(session_id)
        return (None, 0, None) if history is None else history.run_state

    async def load_turns(self, session_id: str) -> tuple[list[TurnRow], list[int]]:
        """The session's turn records and the keys of its stored items."""
        await asyncio.sleep(0)
        history = self._sessions.get(session_id)
        return ([], []) if history is None else (list(history.turns), list(history.rows))

    async def usage_totals(
        self, session_id: str | None, since: datetime | None
    ) -> tuple[TurnUsage, int]:
        """Usage of the turn records (hidden ones included), summed."""
        await asyncio.sleep(0)
        total, count = TurnUsage(), 0
        for sid, history in self._sessions.items():
            if session_id is not None and sid != session_id:
                continue
            records = [*history.turns, *(t for _, t in history.hidden.turns)]
            for t in records:
                if t.usage is not None and (since is None or t.created_at >= since):
                    total, count = total + t.usage, count + 1
        return total, count

    async def load_branches(self, source_id: str) -> list[BranchRow]:
        """The sessions forked from ``source_id``, oldest fork first."""
        await asyncio.sleep(0)
        forks = [
            BranchRow(sid, h.fork_of[1], h.fork_of[2])
            for sid, h in self._sessions.items()
            if h.fork_of is not None and h.fork_of[0] == source_id
        ]
        return sorted(forks, key=lambda row: (row.created_at, row.session_id))

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        """Which of ``batch_ids`` this session has applied."""
        await asyncio.sleep(0)
        history = self._sessions.get(session_id)
        return set() if history is None else {b for b in batch_ids if b in history.batches}

    async def close(self) -> None:
        """Nothing to release (idempotent); the data stays readable."""

    # ------------------------------------------------------------ store operations

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionInfo]:
        ids = sorted(s for s in self._sessions if after is None or s > after)
        return [self._sessions[s].info(s) for s in ids[:limit]]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        history = self._sessions.get(session_id)
        return None if history is None else history.info(session_id)

    async def delete_session(self, session_id: str, *, keep_forks: bool = False) -> bool:
        return bool(self._delete([session_id], lambda _h: True, keep_forks=keep_forks))

    def _drop(self, session_id: str, *, keep_forks: bool = False) -> bool:
        """Delete a session with its own fork record and (unless ``keep_forks``) its
        forks' records of it, as the SQL backends do; whether it existed."""
        if self._sessions.pop(session_id, None) is None:
            return False
        if not keep_forks:
            for history in self._sessions.values():
                if history.fork_of is not None and history.fork_of[0] == session_id:
                    history.fork_of = None
        return True

    async def delete_stale(self, session_ids: Sequence[str], stale_before: datetime) -> list[str]:
        return self._delete(session_ids, lambda h: h.updated_at < stale_before)

    def _delete(
        self,
        session_ids: Sequence[str],
        qualifies: Callable[[_History], bool],
        *,
        keep_forks: bool = False,
    ) -> list[str]:
        """Delete each of ``session_ids`` that qualifies, with (unless ``keep_forks``)
        the records of the sessions forked from it, as the SQL backends do."""
        gone = []
        for session_id in session_ids:
            history = self._sessions.get(session_id)
            if history is not None and qualifies(history):
                self._drop(session_id, keep_forks=keep_forks)
                gone.append(session_id)
        return gone

    async def stale_sessions(
        self, cutoff: datetime, *, limit: int, after: str | None = None
    ) -> list[SessionInfo]:
        stale = sorted(
            s
            for s, h in self._sessions.items()
            if h.updated_at < cutoff and (after is None or s > after)
        )
        return [self._sessions[s].info(s) for s in stale[:limit]]

    async def load_versioned(
        self, session_id: str, limit: int | None
    ) -> tuple[list[Row], int, str | None]:
        """:meth:`load`, the session's version and its life."""
        rows = await self.load(session_id, limit)
        history = self._sessions.get(session_id)
        if history is None:
            return rows, 0, None
        return rows, history.version, history.incarnation

    async def find_sessions(
        self, where: SessionFilter, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        ids = sorted(
            s
            for s, h in self._sessions.items()
            if (after is None or s > after) and h.matches(where)
        )
        return [self._sessions[s].info(s) for s in ids[:limit]]

    async def count_sessions(self, where: SessionFilter) -> int:
        return sum(1 for h in self._sessions.values() if h.matches(where))

    async def expired_sessions(
        self, now: datetime, default_ttl: float | None, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        ids = sorted(
            s
            for s, h in self._sessions.items()
            if (after is None or s > after) and h.expired(now, default_ttl)
        )
        return [self._sessions[s].info(s) for s in ids[:limit]]

    async def delete_expired(
        self, session_ids: Sequence[str], now: datetime, default_ttl: float | None
    ) -> list[str]:
        return self._delete(session_ids, lambda h: h.expired(now, default_ttl))

    async def delete_user(self, user_id: str) -> list[str]:
        ids = sorted(s for s, h in self._sessions.items() if h.catalogue.user_id == user_id)
        for session_id in ids:
            self._drop(session_id)
        return ids

    async def read_range(self, session_id: str, *, after: int | None, limit: int) -> list[Row]:
        history = self._sessions.get(session_id)
        if history is None:
            return []
        rows = [row for row in history.rows.items() if after is None or row[0] > after]
        return rows[:limit]

    async def read_quarantine(self, session_id: str) -> list[QuarantineEntry]:
        history = self._sessions.get(session_id)
        return [] if history is None else list(history.quarantine)

    async def prune_batches(self, cutoff: datetime, *, keep_prefixes: Sequence[str]) -> int:
        pruned = 0
        keep = tuple(keep_prefixes)
        for history in self._sessions.values():
            old = [b for b, at in history.batches.items() if at < cutoff and not b.startswith(keep)]
            for batch_id in old:
                del history.batches[batch_id]
            pruned += len(old)
        return pruned


class MemoryStore(Store["MemorySession"]):
    """Sessions over one :class:`MemoryBackend`.

    ``store = await MemoryStore.open()`` makes a backend of its own;
    ``MemoryStore.open(backend)`` shares one, like a second connection to a database.
    """

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        retry: RetryPolicy | None = None,
        commit_timeout: float | None = None,
        ttl: timedelta | None = None,
        integrity: Integrity | None = None,
        options: StoreOptions | None = None,
    ) -> None:
        if not isinstance(backend, MemoryBackend):
            raise TypeError(f"backend must be a MemoryBackend, got {type(backend).__name__}")
        super().__init__(
            backend,
            retry=retry,
            commit_timeout=commit_timeout,
            ttl=ttl,
            integrity=integrity,
            options=options,
        )
        self.session_class = MemorySession
        self.memory = backend

    @classmethod
    async def open(
        cls,
        backend: MemoryBackend | None = None,
        *,
        retry: RetryPolicy | None = None,
        commit_timeout: float | None = None,
        ttl: timedelta | None = None,
        integrity: Integrity | None = None,
        options: StoreOptions | None = None,
    ) -> MemoryStore:
        """A store over ``backend`` (a new, empty one when ``None``); the settings as
        :class:`~sessions.Store` takes them."""
        shared = MemoryBackend() if backend is None else backend
        return cls(
            shared,
            retry=retry,
            commit_timeout=commit_timeout,
            ttl=ttl,
            integrity=integrity,
            options=options,
        )


class MemorySession(BufferedSession):
    """A buffered session kept in memory.

    ``MemorySession(session_id)`` keeps its history in a backend of its own;
    ``MemorySession(session_id, backend=shared)`` shares one with other sessions and
    stores. ``store=`` borrows a :class:`MemoryStore` (never closed by the session).
    """

    def __init__(
        self,
        session_id: str,
        *,
        backend: MemoryBackend | None = None,
        store: MemoryStore | None = None,
        autocommit: bool = False,
        session_settings: Any = None,
        commit_timeout: float | None = None,
        integrity: Integrity | None = None,
        options: StoreOptions | None = None,
    ) -> None:
        settings = session_options(
            options, "MemorySession", commit_timeout=commit_timeout, integrity=integrity
        )
        common: dict[str, Any] = {
            "autocommit": autocommit,
            "session_settings": session_settings,
            "options": settings,
        }
        if store is not None:
            if backend is not None:
                raise TypeError("pass either backend= or store=, not both")
            if not isinstance(store, MemoryStore):
                raise TypeError(f"store must be a MemoryStore, got {type(store).__name__}")
            super().__init__(session_id, store=store, **common)
            return
        if backend is not None and not isinstance(backend, MemoryBackend):
            raise TypeError(f"backend must be a MemoryBackend, got {type(backend).__name__}")
        shared = MemoryBackend() if backend is None else backend
        store_timeout = settings.commit_timeout  # None: the store's default

        async def factory() -> Store[Any]:
            return MemoryStore(shared, commit_timeout=store_timeout)

        super().__init__(session_id, store_factory=factory, **common)
