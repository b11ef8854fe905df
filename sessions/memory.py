"""In-memory reference backend: small, exact, atomic and idempotent.

Like httpx's ``MockTransport``, it is here for tests: yours (a ``MemorySession`` behaves
like every other session of this package, minus durability) and the conformance suite's
(``sessions.testing`` runs against it as the reference every other backend is compared
with). Nothing is written anywhere: the history lives as long as the
:class:`MemoryBackend` object.

``apply`` builds the new state of a session on copies and swaps it in only when every
batch went through, so a failing batch leaves nothing behind; each batch is judged by the
core's :func:`sessions._model.decide.decide`, like every backend's, from a snapshot of the
copies (batch ids are remembered per session, so a retried batch is skipped). Each call yields to the event loop once, as
a real driver would, so code under test meets the same interleavings; the state itself
changes without suspending, so no cancellation can tear it. One event loop at a time:
like the other backends, it is not thread-safe.
"""

from __future__ import annotations

import asyncio
import bisect
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ._engine.session import BufferedSession
from ._engine.store import Store
from ._engine.storebase import BackendView, borrowed_store
from ._model.backend import (
    Batch,
    BranchRow,
    InfoChange,
    QuarantineEntry,
    Row,
    SessionFilter,
    SessionInfo,
    TurnRow,
    TurnUsage,
    TurnWindow,
)
from ._model.catalogue import decode_metadata, expired, stored_ttl
from ._model.decide import Plan, Snapshot, decide, key_limit
from ._model.options import STORE_KEYWORDS, check_keywords, session_keywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._model.options import SessionKeywords, StoreKeywords

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


def _snapshot(state: _State, batch: Batch, life: str | None) -> Snapshot:
    """What :func:`~sessions._model.decide.decide` needs of the (copied) state for ``batch``."""
    rows, hidden, limit = state.rows, state.hidden, key_limit(batch)
    newest = max((n for n, _ in hidden.rows.values()), default=None)
    first_hidden = min((k for k, (n, _) in hidden.rows.items() if n == newest), default=0)
    tail = batch.tail
    return Snapshot(
        applied=batch.batch_id in state.done,
        life=life,
        version=state.version,
        pops_stored=sum(1 for key in set(batch.pops) if key in rows),
        after_tail=() if tail is None else _keys(rows, tail, limit),
        newest_rewind=newest,
        after_hidden=() if newest is None else _keys(rows, first_hidden, limit),
        run_state_version=state.run_state[1],
        stored=_keys(rows, 0, limit),
        fork_of=None if state.fork_of is None else state.fork_of[:2],
    )


def _keys(rows: dict[int, str], after: int, limit: int) -> tuple[int, ...]:
    """The first ``limit`` stored keys greater than ``after``."""
    return tuple(sorted(key for key in rows if key > after)[:limit])


@dataclass
class _State:
    """A session's state while ``apply`` builds it, on copies of the stored one."""

    rows: dict[int, str]
    next_key: int
    done: dict[str, datetime]
    run_state: tuple[str | None, int, str | None]
    turns: list[TurnRow]
    hidden: _Hidden
    fork_of: tuple[str, int, datetime] | None
    quarantine: list[QuarantineEntry]
    catalogue: InfoChange
    version: int
    created: datetime
    updated: datetime

    @classmethod
    def of(cls, history: _History) -> _State:
        return cls(
            dict(history.rows),
            history.next_key,
            dict(history.batches),
            history.run_state,
            list(history.turns),
            history.hidden.copy(),
            history.fork_of,
            list(history.quarantine),
            history.catalogue,
            history.version,
            history.created_at,
            history.updated_at,
        )

    def history(self, incarnation: str) -> _History:
        return _History(
            self.created,
            self.updated,
            self.rows,
            self.next_key,
            self.done,
            self.run_state,
            self.catalogue,
            self.version,
            self.turns,
            self.fork_of,
            self.hidden,
            tuple(self.quarantine),
            incarnation,
        )


def _applied(
    history: _History | None, session_id: str, batches: Sequence[Batch]
) -> _History | None:
    """The state after ``batches`` (``None``: nothing new), computed on copies.

    Raises without changing ``history``.
    """
    now = _now()
    life = None if history is None else history.incarnation
    if history is None:
        history = _History(now, now)
    state = _State.of(history)
    for batch in batches:
        plan = decide(session_id, batch, _snapshot(state, batch, life))
        if plan is not None:
            _write(state, batch, plan, now)
    if len(state.done) == len(history.batches):
        return None
    return state.history(history.incarnation)


def _write(state: _State, batch: Batch, plan: Plan, now: datetime) -> None:
    """Write ``batch`` as :func:`~sessions._model.decide.decide` planned it."""
    state.version = plan.version
    if batch.info is not None:
        state.catalogue = _catalogue_after(state.catalogue, batch.info)
    rows = state.rows
    if batch.clear:
        rows.clear()
        state.turns.clear()
        state.hidden = _Hidden({}, [])
    else:
        for key in set(batch.pops):
            del rows[key]
    first = state.next_key
    for text in batch.items:
        rows[state.next_key] = text
        state.next_key += 1
    _rewind(state, batch, plan)
    if batch.turn is not None and batch.items:
        when = now if batch.turn.created_at is None else batch.turn.created_at
        last = first + len(batch.items) - 1
        state.turns.append(TurnRow(first, last, when, batch.turn.run_id, batch.turn.usage))
    if batch.run_state is not None and plan.run_state_version is not None:
        change = batch.run_state
        state.run_state = (change.text, plan.run_state_version, change.label)
    if batch.branch is not None:
        state.fork_of = (batch.branch.source_id, batch.branch.at_turn, now)
    for reason, text in batch.quarantine:
        entry = QuarantineEntry(len(state.quarantine) + 1, batch.batch_id, reason, text, now)
        state.quarantine.append(entry)
    state.done[batch.batch_id] = now
    state.updated = max(state.updated, now)
    if batch.restore_times is not None:  # a restore (import): the export's times
        state.created, state.updated = batch.restore_times


def _rewind(state: _State, batch: Batch, plan: Plan) -> None:
    """Hide rows and turn records under ``plan.hide_as``, or bring back those of
    ``plan.bring_back``."""
    rows, turns, hidden = state.rows, state.turns, state.hidden
    if plan.hide_as is not None:
        assert batch.rewind is not None and batch.rewind.hide_after is not None
        after = batch.rewind.hide_after
        for key in [key for key in rows if key > after]:
            hidden.rows[key] = (plan.hide_as, rows.pop(key))
        hidden.turns.extend((plan.hide_as, t) for t in turns if t.first_key > after)
        turns[:] = [t for t in turns if t.first_key <= after]
    elif plan.bring_back is not None:
        number = plan.bring_back
        for key in sorted(key for key, (n, _) in hidden.rows.items() if n == number):
            rows[key] = hidden.rows.pop(key)[1]
        turns.extend(t for n, t in hidden.turns if n == number)
        turns.sort(key=lambda t: t.first_key)
        hidden.turns = [(n, t) for n, t in hidden.turns if n != number]


def _catalogue_after(current: InfoChange, change: InfoChange) -> InfoChange:
    values = {name: getattr(current, name) for name in ("user_id", "title", "metadata", "ttl")}
    values.update({name: getattr(change, name) for name in change.fields if name != "tags"})
    tags = change.tags if "tags" in change.fields else current.tags
    return InfoChange(frozenset(), tags=tags, **values)


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

    async def load_turn_window(
        self, session_id: str, *, oldest: int | None = None, newest: int | None = None
    ) -> TurnWindow | None:
        """The oldest or newest turn records holding items, with the turn count; ``None``
        when stored items are not all covered by a record. Computed from the rows
        (this backend keeps no counts: it is the reference, not the fast one)."""
        await asyncio.sleep(0)
        history = self._sessions.get(session_id)
        if history is None:
            return TurnWindow(0, ())
        keys = sorted(history.rows)
        held: list[TurnRow] = []
        for record in history.turns:
            low = bisect.bisect_left(keys, record.first_key)
            high = bisect.bisect_right(keys, record.last_key)
            if high > low:
                held.append(
                    replace(record, first_key=keys[low], last_key=keys[high - 1], items=high - low)
                )
        if sum(row.items or 0 for row in held) != len(keys):
            return None
        if newest is not None:
            return TurnWindow(len(held), tuple(held[max(len(held) - newest, 0) :]))
        return TurnWindow(len(held), tuple(held if oldest is None else held[:oldest]))

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
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        settings, common = session_keywords(keywords, "MemorySession")
        if store is not None:
            borrowed = borrowed_store(store, MemoryStore, "MemorySession", {"backend": backend})
            super().__init__(session_id, store=borrowed, **common)
            return
        if backend is not None and not isinstance(backend, MemoryBackend):
            raise TypeError(f"backend must be a MemoryBackend, got {type(backend).__name__}")
        shared = MemoryBackend() if backend is None else backend
        store_timeout = settings.commit_timeout  # None: the store's default

        async def factory() -> Store[Any]:
            return MemoryStore(shared, commit_timeout=store_timeout)

        super().__init__(session_id, store_factory=factory, **common)


class MemoryStore(Store["MemorySession"]):
    """Sessions over one :class:`MemoryBackend`.

    ``store = await MemoryStore.open()`` makes a backend of its own;
    ``MemoryStore.open(backend)`` shares one, like a second connection to a database.
    """

    backend_class = MemoryBackend
    session_class = MemorySession
    memory = BackendView(MemoryBackend)

    @classmethod
    async def open(
        cls, backend: MemoryBackend | None = None, **keywords: Unpack[StoreKeywords]
    ) -> MemoryStore:
        """A store over ``backend`` (a new, empty one when ``None``); the settings
        (:class:`~sessions._model.options.StoreKeywords`) as :class:`~sessions.Store` takes them."""
        check_keywords(keywords, STORE_KEYWORDS, "MemoryStore.open")
        shared = MemoryBackend() if backend is None else backend
        return cls(shared, **keywords)
