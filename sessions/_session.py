"""``BufferedSession``: the Agents SDK ``Session`` protocol over any backend, buffered.

Writes are staged (:mod:`sessions._staging`) and made durable by ``commit()`` through
the one commit path (:mod:`sessions._commit`), inside a bounded shield
(:mod:`sessions._shield`). Reads see stored history followed by the staged changes.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from ._backend import (
    AdminBackend,
    Backend,
    Batch,
    BranchBackend,
    CatalogueBackend,
    RewindChange,
    Row,
    RunStateBackend,
    TurnBackend,
    TurnRecord,
    TurnUsage,
    new_batch_id,
)
from ._branching import Branch, fork_history, list_branches, refuse_split
from ._catalogue import KEEP, info_change
from ._commit import apply_batches, interrupted_error
from ._compaction import Ident, plan_replacement, read_window
from ._history import Shape, first_valid_start
from ._integrity import judge, tail_after
from ._locks import CrossLoopLock
from ._marks import Held
from ._observe import observed_load, observed_load_versioned
from ._options import StoreOptions, session_options
from ._owned import OwnedStores
from ._policy import DEFAULT_COMMIT_TIMEOUT, DEFAULT_INTEGRITY, Integrity
from ._resource import AsyncResource
from ._sdk import (
    coerce_session_settings,
    default_session_settings,
    make_compaction_snapshot,
    run_state_from_text,
    serialize_run_state,
)
from ._serde import decode_item, decode_rows, encode_staged
from ._shield import DeadlineExceeded, drive, shielded
from ._staging import PendingChanges, Staging
from ._turns import Turn, build_turns, coerce_usage, span_of
from ._validate import (
    check_text,
    validate_bool,
    validate_limit,
    validate_positive_int,
    validate_session_id,
)
from .errors import (
    CommitConflictError,
    CommitError,
    InvalidHistoryError,
    SessionClosedError,
    SessionError,
    StorageError,
    StoreClosedError,
    UncommittedChangesWarning,
)

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["BufferedSession", "RunStateRecord"]

logger = logging.getLogger("sessions")

T = TypeVar("T")


#: A suffix replacement to plan: the expected end, the prune rule, the new items.
_Suffix = tuple[list[Ident], "Callable[[Any], bool] | None", list[str], list[Shape]]


class _Tx:
    """Marks the context of one ``transaction()`` block (inherited by tasks made in it)."""

    __slots__ = ("finished", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.finished = False


_ACTIVE_TX: contextvars.ContextVar[tuple[_Tx, ...]] = contextvars.ContextVar(
    "sessions_transactions", default=()
)


@dataclass(frozen=True, slots=True)
class RunStateRecord:
    """A session's saved run state, as :meth:`BufferedSession.run_state_record` reads it."""

    text: str | None
    """The serialized ``RunState`` (``state.to_string()``); ``None``: there is none."""
    version: int
    """The stored version: bumped by every commit that writes or removes the state, never
    reused (``0``: none was ever stored). With ``staged`` it is the version the staged
    change replaces."""
    staged: bool
    """``True``: staged by ``stage_run_state()`` / ``discard_run_state()``, not committed."""
    label: str | None = None
    """The ``label`` given to ``stage_run_state()``."""


class BufferedSession(AsyncResource):
    """A conversation history whose writes are staged in memory until ``commit()``.

    Implements the Agents SDK ``Session`` protocol (``get_items``, ``add_items``,
    ``pop_item``, ``clear_session``) and adds ``commit``, ``rollback``,
    ``transaction()``, ``pending`` / ``has_pending`` and ``close``.

    Backends provide concrete subclasses (:class:`sessions.SQLiteSession`,
    :class:`sessions.PostgresSession`) and stores hand them out with
    ``store.session(session_id)``.

    ``commit_timeout`` (seconds) bounds how long ``commit()``, an autocommit write or
    ``close()`` may hold its caller, cancelled or not; ``None`` takes the store's.
    It and ``integrity`` may also come as ``options=StoreOptions(...)`` (a session
    takes no other setting of it; one given both ways is a ``TypeError``).

    ``session_settings`` (an agents ``SessionSettings`` or a dict of its fields) gives
    ``get_items()`` its default ``limit``; it defaults to ``SessionSettings()``.

    ``integrity`` (``"reject"``, ``"quarantine"``, ``"off"``; ``None`` takes the
    store's): what ``commit()`` does with history the Responses API would refuse (an
    output without its call, a call without its output in a finished turn, ...; see
    ``docs/history.md``).

    A session made with ``store_factory`` (the one-liners ``SQLiteSession(id, path)``
    and ``PostgresSession(id, dsn)``) opens a store of its own per event loop, on first
    use there, so it can be shared by threads that each run an event loop (see
    ``docs/threads.md``); ``single_loop`` names what forbids that (a private in-memory
    database), and the session then refuses every loop but its first. A session on a
    borrowed ``store=`` belongs to that store's event loop.
    """

    def __init__(
        self,
        session_id: str,
        *,
        store: Store[Any] | None = None,
        store_factory: Callable[[], Awaitable[Store[Any]]] | None = None,
        autocommit: bool = False,
        session_settings: Any = None,
        commit_timeout: float | None = None,
        single_loop: str | None = None,
        integrity: Integrity | None = None,
        options: StoreOptions | None = None,
    ) -> None:
        self.session_id: str = validate_session_id(session_id)
        settings = session_options(
            options, type(self).__name__, commit_timeout=commit_timeout, integrity=integrity
        )
        self._integrity = settings.integrity
        if (store is None) == (store_factory is None):
            raise TypeError("pass exactly one of store= or store_factory=")
        if single_loop is not None and store_factory is None:
            raise TypeError("single_loop= goes with store_factory= only")
        self._autocommit = validate_bool(autocommit, "autocommit")
        # None: the default, SessionSettings(), made on first use (importing the SDK
        # costs a second or more; a CLI that never touches it should not pay that).
        self._settings: Any = _settings(session_settings)
        self._commit_timeout = settings.commit_timeout
        self._store = store
        self._owned: OwnedStores | None = None
        if store_factory is not None:
            self._owned = OwnedStores(
                store_factory,
                describe=self._describe,
                single_loop=single_loop,
                close_timeout=self.commit_timeout,
            )
        self._staging = Staging()
        self._lock = CrossLoopLock()
        self._token = object()
        self._version: int | None = None
        # The life of the session this object read (Batch.incarnation): its commits are
        # refused once that life is over; rollback() forgets it.
        self._life: str | None = None
        # What the history rules read of the end of the stored history as this session's
        # last commit left it (_integrity.tail_after), and the store's write mark that
        # commit ended with (sessions._marks): valid while the session's mark is that one.
        self._known: tuple[Held, tuple[Any, ...]] | None = None

    # ------------------------------------------------------------------ introspection

    @property
    def session_settings(self) -> Any:
        """The agents ``SessionSettings`` (``SessionSettings()`` unless given; ``None`` on
        SDK releases before 0.8.0, which have no such class). Assign a ``SessionSettings``,
        a dict of its fields, or ``None`` for the default."""
        if self._settings is None:
            self._settings = default_session_settings()
        return self._settings

    @session_settings.setter
    def session_settings(self, value: Any) -> None:
        self._settings = _settings(value)

    @property
    def autocommit(self) -> bool:
        """Whether every write is its own commit."""
        return self._autocommit

    @property
    def commit_timeout(self) -> float:
        """Seconds ``commit()``, an autocommit write or ``close()`` may hold its caller."""
        if self._commit_timeout is not None:
            return self._commit_timeout
        store = self.store
        return DEFAULT_COMMIT_TIMEOUT if store is None else store.commit_timeout

    @property
    def integrity(self) -> Integrity:
        """What ``commit()`` does with history the API would refuse (the session's
        ``integrity=``, else its store's)."""
        if self._integrity is not None:
            return self._integrity
        store = self.store
        return DEFAULT_INTEGRITY if store is None else store.integrity

    @property
    def pending(self) -> PendingChanges:
        """What ``commit()`` would apply now (a snapshot; read-only)."""
        return self._staging.pending()

    @property
    def has_pending(self) -> bool:
        """``True`` when there is anything staged that ``commit()`` would apply."""
        return bool(self._staging)

    @property
    def version(self) -> int | None:
        """The session's stored version as this session last saw it: set by a read of
        stored history (``get_items()``) and by ``commit(expected_version=...)``;
        ``None`` before that, after a commit without ``expected_version`` (other writers
        may have committed in between: read again), or where the backend keeps no
        versions. While a clear is staged, reads do not read stored history, so it stays
        the version last read: ``commit(expected_version=session.version)`` applies the
        clear unless another writer committed since. See :meth:`commit`."""
        return self._version

    @property
    def store(self) -> Store[Any] | None:
        """The store this session writes to from the running event loop (``None`` until
        an owned one is opened there)."""
        if self._store is not None or self._owned is None:
            return self._store
        return self._owned.current()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.session_id!r} {self.state.value}"
            f"{' autocommit' if self._autocommit else ''} pending={self.pending.items}>"
        )

    # ------------------------------------------------------------------ Session protocol
    #
    # ``wrapper`` is the run context the Agents SDK passes (0.20+) to sessions whose four
    # methods accept it. The storage of this package does not depend on it;
    # TransactionalSession hands it on to the session it wraps.

    async def get_items(
        self, limit: int | None = None, *, turns: int | None = None, wrapper: Any = None
    ) -> list[Any]:
        """Stored history followed by the staged changes; the latest ``limit`` items.

        ``limit`` defaults to ``session_settings.limit``. A limited read never starts
        with a tool output whose call fell before it (the API would refuse it): it then
        starts after that output, with fewer items (unless ``integrity="off"``).
        ``turns=N`` instead returns the items of the last ``N`` whole turns (:meth:`turns`;
        staged items count as one pending turn), never part of a turn, but for the same
        rule: an output whose call is in an earlier turn (an approval) is trimmed with what
        precedes it; ``session_settings.limit`` does not apply then, and ``limit`` may not
        be given with it.
        """
        self._check_open("get_items")
        if turns is not None:
            if limit is not None:
                raise TypeError("get_items(): pass limit= or turns=, not both")
            return await self._get_turn_items(validate_limit(turns, "turns"))
        if limit is None and self._settings is not None:
            limit = self._settings.limit
        n = validate_limit(limit)
        if n == 0:
            return []
        async with self._lock:
            await self._settle("get_items")
            return await self._view(n)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Stage ``items`` (validated and snapshotted now).

        Without autocommit this never suspends, so no cancellation can interrupt it
        halfway. A non-JSON item raises :class:`~sessions.errors.InvalidItemError`
        (a ``TypeError``) naming its index and type; none of the call's items are
        staged then.
        """
        self._check_open("add_items")
        encoded, shapes = encode_staged(items)
        if self._refuse_late_write("add_items", len(encoded)) or not encoded:
            return
        self._staging.add(encoded, shapes)
        if self._autocommit:
            await self._shield(self._commit_now)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        """Remove and return the newest item (staged ones first), or ``None``.

        Popping stored history is staged as well and applied at commit.
        """
        self._check_open("pop_item")
        if self._refuse_late_write("pop_item", 1):
            return None
        if self._autocommit:
            return await self._shield(self._autocommit_pop)
        async with self._lock:
            await self._settle("pop_item")
            value, _ = await self._stage_pop()
            return value

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Stage the removal of the whole history (applied at commit).

        The saved run state (``stage_run_state()``) is not history and stays.
        """
        self._check_open("clear_session")
        if self._refuse_late_write("clear_session", 1):
            return
        if self._autocommit:
            await self._shield(self._autocommit_clear)
            return
        async with self._lock:
            await self._settle("clear_session")
            self._staging.clear()

    # ------------------------------------------------------------------ turns

    def set_run_id(self, run_id: str | None) -> None:
        """Tag the turns staged from now on with ``run_id`` (``None``: no run id).

        Items staged by ``add_items`` take the run id set when the first of them is
        staged; each commit that adds items records one turn (:meth:`turns`). Never
        suspends, never touches the database. ``run_id``: 1 to 256 characters of valid
        Unicode (no lone surrogate) without NUL, refused now (``ValueError``) rather
        than by every later commit.
        """
        self._check_open("set_run_id")
        if run_id is not None:
            if not isinstance(run_id, str):
                raise TypeError(f"run_id must be a str or None, got {type(run_id).__name__}")
            if not run_id or len(run_id) > 256:
                raise ValueError(f"run_id must be 1 to 256 characters, got {len(run_id)}")
            check_text(run_id, "run_id")
        self._turn_support("set_run_id")
        self._staging.run_id = run_id

    @property
    def run_id(self) -> str | None:
        """The run id turns staged now carry (:meth:`set_run_id`)."""
        return self._staging.run_id

    async def turns(self) -> list[Turn]:
        """The history's turns, oldest first: one per commit that added items (see
        ``docs/turns.md``), then the staged items as one pending turn."""
        self._check_open("turns")
        async with self._lock:
            await self._settle("turns")
            return await self._turn_list("turns")

    async def fork(self, new_session_id: str, *, at_turn: int | None = None) -> int:
        """Make ``new_session_id`` a new session holding this session's turns 1 to
        ``at_turn`` (all its turns when ``None``); return how many turns it holds.

        One transaction through the commit path. A copy (``docs/turns.md`` says why): the
        fork keeps its history whatever happens to this session later. Refused while this
        session has staged changes (commit or roll back first), and with ``ValueError``
        when turn ``at_turn`` splits a tool call from its output (call up to it, output
        after it).

        The target must be fresh, checked in the transaction that writes the fork: no
        stored items, no hidden (rewound) turns, never the target of a fork before (a
        catalogue entry is kept; a cleared ordinary session is fresh again). Otherwise
        :class:`~sessions.errors.CommitConflictError` naming the target and the reason,
        nothing applied; of concurrent forks into one id exactly one succeeds. The same
        fork again (same source history, same ``at_turn``) returns ``at_turn`` and writes
        nothing while the target still holds those turns, and is refused the same way once
        it lost any. Open the fork with ``store.session(new_session_id)``;
        :meth:`branches` lists it.
        """
        self._check_open("fork")
        new_id = validate_session_id(new_session_id, "new_session_id")
        if at_turn is not None:
            validate_positive_int(at_turn, "at_turn")
        async with self._lock:
            await self._settle("fork")
            self._refuse_staged("fork")
            store = await self._ready_store("fork")
            return await fork_history(store, self.session_id, new_id, at_turn)

    async def rewind(self, to_turn: int) -> int:
        """Hide the turns after turn ``to_turn`` (``0``: all); return how many were hidden.

        One commit of its own (shielded, idempotent like any): reads, ``limit``,
        :meth:`turns` and forks no longer see the hidden turns, which are kept, not
        deleted, until :meth:`undo_rewind` brings them back or a clear removes them.
        Whole turns only; a ``to_turn`` that splits a tool call from its output (an
        approval: call up to it, output after it) is refused with ``ValueError``, nothing
        applied. Refused while this session has staged changes;
        :class:`~sessions.errors.CommitConflictError` (nothing applied) if another writer
        committed since the turns were read.
        """
        self._check_open("rewind")
        if isinstance(to_turn, bool) or not isinstance(to_turn, int):
            raise TypeError(f"to_turn must be an int, got {type(to_turn).__name__}")
        if to_turn < 0:
            raise ValueError(f"to_turn must be >= 0, got {to_turn}")
        return await self._shield(lambda: self._rewind_now("rewind", to_turn), known=False)

    async def undo_rewind(self) -> int:
        """Bring back the turns the newest :meth:`rewind` hid; return how many came back.

        ``0`` when nothing is hidden, and then nothing is written at all: the version and
        ``updated_at`` stay, a session that does not exist is not created. Several
        rewinds are undone newest first. Refused
        with :class:`~sessions.errors.CommitConflictError` (nothing applied) once a turn
        has been committed after the rewind (it would interleave with the hidden ones:
        :meth:`fork` the history you want instead).
        """
        self._check_open("undo_rewind")
        return await self._shield(lambda: self._rewind_now("undo_rewind", None), known=False)

    async def _rewind_now(self, operation: str, to_turn: int | None) -> int:
        async with self._lock:
            await self._settle(operation)
            self._refuse_staged(operation)
            store = await self._ready_store(operation)
            if not isinstance(store.backend, BranchBackend):
                raise SessionError(
                    f"{operation}() on session {self.session_id!r}: "
                    f"{type(store.backend).__name__} cannot rewind"
                )
            turns = await self._turn_list(operation)
            tail = None
            if to_turn is not None:
                if to_turn > len(turns):
                    raise ValueError(
                        f"rewind(): to_turn must be from 0 to {len(turns)} (the turns of "
                        f"session {self.session_id!r}), got {to_turn}"
                    )
                if to_turn == len(turns):
                    return 0
                backend = await self._turn_backend(operation)
                await refuse_split(backend, self.session_id, turns, to_turn, operation)
                tail = turns[-1].last_key
                after = turns[to_turn - 1].last_key if to_turn else 0
            change = RewindChange(after if to_turn is not None else None)
            batch = Batch(
                new_batch_id(), False, (), (), tail=tail, rewind=change, incarnation=self._life
            )
            outcome = await apply_batches(store, self.session_id, [batch])
            if outcome.error is not None:
                raise outcome.error
            if to_turn is not None:
                return len(turns) - to_turn
            return len(await self._turn_list(operation)) - len(turns)

    def record_usage(self, usage: Any) -> None:
        """Record model usage with the turn being staged (same commit, same transaction).

        ``usage``: an agents ``Usage`` (``result.context_wrapper.usage``) or a
        :class:`~sessions.TurnUsage`; requests, input, output, cached and reasoning tokens
        are kept, each an ``int`` from 0 to 2**63 - 1 (a ``ValueError`` names a larger
        one, also when the staged turns' usages would add up past it; nothing is
        recorded then). Called twice for one turn, the usages add up. Needs staged items to
        attach to (inside ``transaction()``, after the run): without any it raises
        :class:`~sessions.errors.SessionError` (with autocommit the items are already
        committed). Never suspends.
        """
        self._check_open("record_usage")
        counts = coerce_usage(usage)
        self._turn_support("record_usage")
        if self._refuse_late_write("record_usage", 1):
            return
        if not self._staging.add_usage(counts):
            raise SessionError(
                f"record_usage() on session {self.session_id!r}: no staged items to record "
                "it with (call it after the run, before the commit, without autocommit)"
            )

    async def usage(self, *, since: datetime | None = None) -> TurnUsage:
        """The model usage recorded with this session's turns (``record_usage``), summed:
        hidden (rewound) turns and turns whose items were popped included, forks' not;
        only turns committed at or after ``since`` when given."""
        self._check_open("usage")
        backend = await self._turn_backend("usage")
        total, _ = await backend.usage_totals(self.session_id, _utc(since, "since"))
        return total

    def _refuse_staged(self, operation: str) -> None:
        if self._staging:
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: it has staged changes; "
                "commit() or rollback() first"
            )

    async def branches(self) -> list[Branch]:
        """The sessions forked from this one (:meth:`fork`), oldest first."""
        self._check_open("branches")
        return await list_branches(await self._ready_store("branches"), self.session_id)

    def _turn_support(self, operation: str) -> None:
        store = self.store
        if store is not None and not isinstance(store.backend, TurnBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(store.backend).__name__} does not record turns"
            )

    async def _turn_backend(self, operation: str) -> TurnBackend:
        backend = await self._backend(operation)
        if not isinstance(backend, TurnBackend) or not isinstance(backend, AdminBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(backend).__name__} does not record turns"
            )
        return backend

    async def _turn_list(self, operation: str) -> list[Turn]:
        """With the lock held: stored turns as staging changes them, then the pending one."""
        backend = await self._turn_backend(operation)
        records, keys = await backend.load_turns(self.session_id)
        clear, pops, staged = self._staging.view()
        return build_turns(records, keys, clear=clear, pops=pops, staged=len(staged))

    async def _get_turn_items(self, count: int | None) -> list[Any]:
        assert count is not None
        if count == 0:
            return []
        async with self._lock:
            await self._settle("get_items")
            every = await self._turn_list("get_items")
            chosen = every[-count:]
            _, pops, staged = self._staging.view()
            values: list[Any] = []
            span = span_of(chosen)
            if span is not None:
                values = await self._read_span(*span, pops)
            if chosen and chosen[-1].pending:
                values.extend(decode_item(text) for text in staged)
            # A call answered in a later turn (an approval: the call is committed with
            # the paused run, its output with the resumed one) may fall before the
            # window: the rule of limited reads trims the orphan output.
            return values if len(chosen) == len(every) else self._whole(values)

    async def _read_span(self, first: int, last: int, items: int, pops: set[int]) -> list[Any]:
        """Stored items with keys from ``first`` to ``last``, minus ``pops``."""
        backend = await self._backend("get_items")
        assert isinstance(backend, AdminBackend)
        hidden = sum(1 for key in pops if first <= key <= last)
        rows = await backend.read_range(self.session_id, after=first - 1, limit=items + hidden)
        kept = [row for row in rows if row[0] <= last and row[0] not in pops]
        return decode_rows(kept, self.session_id)[1]

    # ------------------------------------------------------------------ catalogue

    def set_info(
        self,
        *,
        user_id: Any = KEEP,
        title: Any = KEEP,
        tags: Any = KEEP,
        metadata: Any = KEEP,
        ttl: Any = KEEP,
    ) -> None:
        """Stage a change of this session's catalogue entry, applied by the next commit
        in the same transaction as the items staged with it (or alone).

        ``user_id`` and ``title``: a str (``None`` clears it); ``tags``: a collection of
        short str (stored as a sorted set; ``None`` or empty: none); ``metadata``: a
        JSON object (a dict with str keys, nested at most 32 levels; ``None`` clears
        it); ``ttl``: a ``timedelta`` of at most 100 years, this session's idle
        time-to-live for :meth:`~sessions.Store.purge` (``None``: the store's default).
        Text must be valid Unicode without NUL. Fields not given stay as they are. Validated now (a
        ``TypeError`` or ``ValueError`` names what is wrong; nothing is staged then).
        Never suspends; with ``autocommit`` it waits for the next write or ``commit()``.
        """
        self._check_open("set_info")
        change = info_change(user_id=user_id, title=title, tags=tags, metadata=metadata, ttl=ttl)
        store = self.store
        if store is not None and not isinstance(store.backend, CatalogueBackend):
            raise SessionError(
                f"set_info() on session {self.session_id!r}: "
                f"{type(store.backend).__name__} keeps no session catalogue"
            )
        if not self._refuse_late_write("set_info", 1):
            self._staging.set_info(change)

    # ------------------------------------------------------------------ run state

    def stage_run_state(self, state: Any, *, label: str | None = None) -> None:
        """Save ``state`` (an agents ``RunState``, or its ``to_string()`` text) with the
        next commit, in the same transaction as the items staged with it.

        ``label``: a short text of yours kept with it (say, which step of your approval
        flow the state is at), read back by :meth:`run_state_record`. The state's text
        and the label must be valid Unicode without NUL (else ``ValueError``, nothing
        staged).

        One state per session: it replaces the saved one. Never suspends (unless
        ``autocommit``, where it is committed at once, alone). The commit fails with
        :class:`~sessions.errors.CommitConflictError` (nothing applied) if the saved
        state changed since this session last read it (``load_run_state()``,
        ``run_state_record()``); without such a read the write is unconditional.
        """
        self._check_open("stage_run_state")
        text = check_text(serialize_run_state(state), "the run state's text")
        if label is not None:
            if not isinstance(label, str):
                raise TypeError(f"label must be a str or None, got {type(label).__name__}")
            check_text(label, "label")
        self._stage_run_state_text(text, "stage_run_state", label)

    def discard_run_state(self) -> None:
        """Remove the saved run state with the next commit (when the run completed).

        Checked like :meth:`stage_run_state`. Removing a state that is not there is
        harmless; the version still moves on.
        """
        self._check_open("discard_run_state")
        self._stage_run_state_text(None, "discard_run_state")

    async def load_run_state(self, agent: Any, **from_string_options: Any) -> Any:
        """The saved run state as an agents ``RunState`` (``None`` if there is none).

        ``RunState.from_string(agent, text, **from_string_options)`` on the staged state
        if one is staged, else the stored one. Records the stored version read, which
        the next ``stage_run_state()`` / ``discard_run_state()`` is checked against.
        """
        record = await self.run_state_record()
        if record.text is None:
            return None
        return await run_state_from_text(agent, record.text, from_string_options)

    async def run_state_record(self) -> RunStateRecord:
        """The saved run state's text (``None`` if there is none) and version.

        Reads the staged state if one is staged, else the stored one. Without a staged
        change, records the stored version as the one the next change is checked against
        (as :meth:`load_run_state` does).
        """
        self._check_open("run_state_record")
        async with self._lock:
            await self._settle("run_state_record")
            backend = await self._run_state_backend("run_state_record")
            stored, version, label = await backend.load_run_state(self.session_id)
            staged = self._staging.run_state_view()
            if staged is None:
                self._staging.run_state_version = version
            else:
                base = self._staging.run_state_version
                version = version if base is None else base
        if staged is not None:
            return RunStateRecord(staged[0], version, True, staged[1])
        return RunStateRecord(stored, version, False, label)

    def _stage_run_state_text(
        self, text: str | None, operation: str, label: str | None = None
    ) -> None:
        if self._autocommit:
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: with autocommit the run "
                "state would be committed apart from the items it describes; use a session "
                "without autocommit (and transaction()) for runs that wait for approval"
            )
        store = self.store
        if store is not None and not isinstance(store.backend, RunStateBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(store.backend).__name__} cannot store run states"
            )
        if not self._refuse_late_write(operation, 1):
            self._staging.set_run_state(text, label)

    async def _run_state_backend(self, operation: str) -> RunStateBackend:
        backend = await self._backend(operation)
        if not isinstance(backend, RunStateBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(backend).__name__} cannot store run states"
            )
        return backend

    # ------------------------------------------------------------------ SDK compaction
    #
    # The hooks replace history without calling get_items / add_items / pop_item /
    # clear_session. A subclass that overrides one of those (to redact, encrypt, index or
    # refuse what is stored) would be bypassed, so the hooks are offered only where the
    # class that defines them is at least as derived as every class that defines one of
    # those four (_offers_hook): our own classes, and subclasses that override none of
    # the four. Otherwise they answer None / False and the SDK falls back to its generic
    # path, which calls the overrides, as it does for subclasses of its own sessions
    # ("must supply their own snapshot operation rather than inherit a bypass"). A
    # subclass opts back in by overriding the hook itself (calling ours through super()
    # and applying its own transforms to what the hook stores).

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The Agents SDK's compaction hook (openai-agents 0.23+; see ``sessions._sdk``).

        The latest ``limit`` items (stored, then staged) and a ``replace_suffix(start,
        output)`` that replaces ``items[start:]`` with ``output`` if they are still
        exactly the end of the history (``False`` and nothing changed otherwise). With
        autocommit the replacement is one commit of its own; otherwise it is staged
        with the open transaction (later reads see it; ``rollback()`` drops it).
        ``prune_prefix`` also removes the oldest stored items it accepts.

        ``None`` (the SDK then uses its generic path) on a subclass that overrides
        ``get_items``, ``add_items``, ``pop_item`` or ``clear_session`` without
        overriding this hook too (see ``docs/sdk-flows.md``).
        """
        self._check_open("get_items")
        n = validate_limit(limit, "limit")
        if not _offers_hook(type(self), "_get_compaction_snapshot"):
            return None
        if not n or make_compaction_snapshot([], True, _never) is None:
            return None
        if not self._replacements_supported(suffix=True):
            return None
        async with self._lock:
            await self._settle("get_items")
            if self._autocommit:
                await self._commit_locked()  # leftovers of a failed autocommit write
            window = await read_window(
                await self._backend("get_items"), self.session_id, self._staging, n
            )
        if window is None:
            return None
        idents = window.idents

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            return await self._replace_suffix(idents[start:], output, prune_prefix)

        return make_compaction_snapshot(window.items, window.complete, replace_suffix)

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The Agents SDK's whole-history replacement hook (openai-agents 0.24+).

        Replaces every item with ``items``: one commit of its own with autocommit,
        staged with the open transaction otherwise. ``False`` (nothing changed; the SDK
        then clears and adds through ``clear_session`` and ``add_items``) on a subclass
        that overrides one of the four ``Session`` methods without overriding this hook
        too, as for :meth:`_get_compaction_snapshot`.
        """
        self._check_open("clear_session")
        if not _offers_hook(type(self), "_atomic_replace_items"):
            return False
        texts, shapes = encode_staged(items)
        if not self._replacements_supported(suffix=False):
            return False
        if self._autocommit:
            batch = Batch(
                new_batch_id(),
                True,
                (),
                tuple(texts),
                turn=TurnRecord(self._staging.run_id),
                shapes=tuple(shapes),
            )
            return await self._shield(lambda: self._replace_now(batch), known=False)
        async with self._lock:
            await self._settle("clear_session")
            self._staging.clear()
            self._staging.add(texts, shapes)
        return True

    def _replacements_supported(self, *, suffix: bool) -> bool:
        """Whether a replacement commits atomically here (overridden by the wrapper)."""
        return True

    async def _replace_suffix(
        self, expected: list[Ident], output: list[Any], prune: Callable[[Any], bool] | None
    ) -> bool:
        self._check_open("add_items")
        texts, shapes = encode_staged(output)
        if not expected:
            return False
        if self._autocommit:
            return await self._shield(
                lambda: self._replace_now((expected, prune, texts, shapes)), known=False
            )
        async with self._lock:
            await self._settle("add_items")
            plan = await plan_replacement(
                await self._backend("add_items"), self.session_id, self._staging, expected, prune
            )
            if plan is None:
                return False
            self._staging.replace_tail(plan.keep, plan.pops, plan.tail, texts, shapes)
            return True

    async def _replace_now(self, replacement: Batch | _Suffix) -> bool:
        """Autocommit: commit a replacement now, as a batch of its own.

        A suffix replacement is planned first, from the end of the history it expects
        (``False`` if that end changed). Leftovers of failed autocommit writes are
        committed before it. ``False`` when the database refuses it as a conflict
        (nothing applied).
        """
        async with self._lock:
            await self._settle("commit")
            await self._commit_locked()
            store = await self._ready_store("commit")
            batch = replacement
            if not isinstance(batch, Batch):
                expected, prune, texts, shapes = batch
                plan = await plan_replacement(
                    store.backend, self.session_id, self._staging, expected, prune
                )
                if plan is None or plan.keep:
                    return False
                batch = Batch(
                    new_batch_id(),
                    False,
                    tuple(plan.pops),
                    tuple(texts),
                    tail=plan.tail,
                    turn=TurnRecord(self._staging.run_id),
                    shapes=tuple(shapes),
                )
            (batch,) = await judge(store.backend, self.session_id, [batch], self.integrity)
            outcome = await apply_batches(store, self.session_id, [batch])
        if outcome.error is None:
            return True
        if isinstance(outcome.error, CommitConflictError):
            return False
        raise outcome.error

    # ------------------------------------------------------------------ transactions

    async def commit(self, *, expected_version: int | None = None) -> None:
        """Apply every staged change in one database transaction.

        ``expected_version`` (optimistic concurrency): apply only if the session's
        stored version is still this one (typically :attr:`version` after a read);
        otherwise raise :class:`~sessions.errors.CommitVersionConflictError` with
        nothing applied and the changes still staged. On success :attr:`version` is
        the new version. Every applied batch advances the version by one.

        Shielded and bounded: if the caller is cancelled while the commit is in flight,
        the commit still runs to its outcome and ``CancelledError`` is raised afterwards,
        but never later than ``commit_timeout`` seconds (plus a short grace) after the
        call. When it returns, the batch is durable. When it raises
        :class:`~sessions.errors.CommitError`, ``outcome_known`` says whether nothing of
        the batch reached the database; the changes stay staged either way, and
        committing again never duplicates them (an unknown outcome is resolved by batch
        id first). With nothing staged it returns at once.
        """
        self._check_open("commit")
        if expected_version is not None:
            if isinstance(expected_version, bool) or not isinstance(expected_version, int):
                raise TypeError(
                    f"expected_version must be an int or None, got {type(expected_version).__name__}"
                )
            if expected_version < 0:
                raise ValueError(f"expected_version must be >= 0, got {expected_version}")
        if not self._staging:
            return
        if expected_version is None:
            await self._shield(self._commit_now)
            return

        async def conditional() -> None:
            async with self._lock:
                await self._settle("commit")
                await self._commit_locked(expected_version)

        await self._shield(conditional)

    async def rollback(self) -> None:
        """Discard every staged change. Never touches the database.

        Also forgets the history this object read when that session has since been
        deleted (:class:`~sessions.errors.SessionDeletedError`): the next commit then
        writes to the session as it is now (a new one if it is gone)."""
        self._check_open("rollback")
        async with self._lock:
            self._discard("rollback")
            self._life = None  # a deleted history is forgotten too (SessionDeletedError)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[BufferedSession]:
        """Commit on normal exit; roll back on any exception (cancellation included).

        Writes issued later from inside the finished block's context (a background
        task the block started, for example a streamed run still running) are refused
        with a logged warning and never reach a later commit.

        A cancellation of the task that something inside the block swallowed (as
        openai-agents before 0.7 did in ``stream_events()``) still counts: on Python
        3.11 and later the block then rolls back and ``CancelledError`` is raised,
        instead of committing a turn cut short.

        When the commit at the block's exit is refused with a known outcome (nothing
        applied: :class:`~sessions.errors.InvalidHistoryError`, a
        :class:`~sessions.errors.CommitConflictError` such as a version conflict, or any
        :class:`~sessions.errors.CommitError` with ``outcome_known=True``), the block's
        staged changes are rolled back (exactly as :meth:`rollback` does; a warning is
        logged and, from Python 3.11, a note added to the error) and the error is
        re-raised: a block commits whole or leaves nothing staged, so the next
        transaction on this session commits only its own changes. When the outcome is
        unknown (a :class:`~sessions.errors.CommitError` with ``outcome_known=False``,
        for example ``commit_timeout`` passed while the database hung), the changes stay
        staged: the next read, pop, clear or commit resolves them by batch id (applied
        once or not at all), and ``rollback()`` discards what did not land. A
        ``commit()`` called by hand, outside ``transaction()``, keeps its changes staged
        on any failure.
        """
        self._check_open("transaction")
        if any(tx.owner is self._token and not tx.finished for tx in _ACTIVE_TX.get()):
            raise SessionError(
                f"session {self.session_id!r}: transaction() is already active in this "
                "context; it does not nest"
            )
        tx = _Tx(self._token)
        reset = _ACTIVE_TX.set((*_ACTIVE_TX.get(), tx))
        cancels = _cancel_requests()
        try:
            yield self
            if _cancel_requests() > cancels:
                raise asyncio.CancelledError("cancelled inside transaction() (swallowed there)")
        except BaseException:
            tx.finished = True
            _ACTIVE_TX.reset(reset)
            if not self.closed:
                await self._rollback_on_error()
            raise
        tx.finished = True
        _ACTIVE_TX.reset(reset)
        try:
            await self.commit()
        except (CommitError, InvalidHistoryError) as exc:
            if _outcome_known(exc) and not self.closed and not self._staging.in_doubt():
                await self._rollback_refused(exc)
            raise

    async def _rollback_refused(self, exc: CommitError | InvalidHistoryError) -> None:
        """Roll back a block whose exit commit was refused with nothing applied."""
        pending = self.pending
        await self._rollback_on_error()
        logger.warning(
            "session %r: the commit at the end of transaction() was refused (%s, nothing "
            "applied); its staged changes were rolled back (%d item(s), %d pop(s), "
            "clear=%s)",
            self.session_id,
            type(exc).__name__,
            pending.items,
            pending.pops,
            pending.clear,
        )
        add_note = getattr(exc, "add_note", None)  # Python 3.11+
        if add_note is not None:
            add_note(
                "transaction() rolled the staged changes of this block back: nothing of "
                "it is staged any more"
            )

    async def _rollback_on_error(self) -> None:
        try:
            await shielded(self.rollback(), timeout=self.commit_timeout)
        except DeadlineExceeded:
            logger.warning(
                "session %r: rollback after an error waited %gs for a commit in flight; "
                "it goes on in the background",
                self.session_id,
                self.commit_timeout,
            )

    # ------------------------------------------------------------------ lifecycle

    def _describe(self) -> str:
        return f"session {self.session_id!r}"

    def _closed_error(self, operation: str) -> SessionClosedError:
        return SessionClosedError(
            f"{operation}() on session {self.session_id!r}: the session is {self.state.value}"
        )

    def _check_open(self, operation: str) -> None:
        super()._check_open(operation)
        store = self._store
        if store is not None and store.closed:
            raise StoreClosedError(
                f"{operation}() on session {self.session_id!r}: its store is {store.state.value}"
            )

    def _close_timeout(self) -> float:
        return self.commit_timeout

    async def _aclose(self) -> None:
        """Staged changes are neither written nor silently dropped: a
        :class:`~sessions.errors.UncommittedChangesWarning` and a log line name the
        session and what was discarded. Closes the store only if this session opened it.
        """
        self._warn_discarded("close()")
        self._staging.discard()
        if self._owned is not None:
            await self._owned.close_all()

    def __del__(self) -> None:
        try:
            if not self.closed and self.has_pending:
                self._warn_discarded("garbage collection", stacklevel=3)
        except AttributeError:  # __init__ failed halfway
            pass

    # ------------------------------------------------------------------ internals

    async def _shield(self, work: Callable[[], Awaitable[T]], *, known: bool | None = None) -> T:
        """Run ``work`` in the bounded shield; a missed deadline becomes a CommitError.

        ``known``: whether the outcome of an interrupted ``work`` is known (default: from
        staging, i.e. whether a staged batch is in flight or in doubt).
        """
        try:
            return await drive(work(), self.commit_timeout)  # shielded(), one frame fewer
        except DeadlineExceeded as exc:
            store = self.store
            backend = None if store is None else store.backend
            if known is None:
                known = not self._staging.in_doubt()
            raise interrupted_error(self.session_id, backend, exc, known=known) from exc

    def _warn_discarded(self, why: str, stacklevel: int = 3) -> None:
        pending = self.pending
        if not pending:
            return
        message = (
            f"session {self.session_id!r} discarded by {why} with uncommitted changes "
            f"({pending.items} staged item(s), {pending.pops} staged pop(s), "
            f"clear={pending.clear}); call commit() or rollback() first"
        )
        logger.warning(message)
        warnings.warn(message, UncommittedChangesWarning, stacklevel=stacklevel)

    def _discard(self, why: str) -> None:
        if self._staging.discard():
            logger.warning(
                "session %r: %s discarded a batch whose earlier commit has an unknown "
                "outcome; it may already be stored",
                self.session_id,
                why,
            )

    def _refuse_late_write(self, operation: str, count: int) -> bool:
        for tx in _ACTIVE_TX.get():
            if tx.owner is self._token and tx.finished:
                logger.warning(
                    "session %r: refused %s() of %d item(s) issued from a transaction() "
                    "block that has already ended (a task it started is still writing); "
                    "nothing was staged",
                    self.session_id,
                    operation,
                    count,
                )
                return True
        return False

    async def _ready_store(self, operation: str) -> Store[Any]:
        """The store (this loop's, opened on first use, if owned); checked for use here."""
        store = self._store
        if store is None:
            assert self._owned is not None
            store = await self._owned.get(operation)
        if not store.usable_here():
            store.check_usable(f"{operation}() on session {self.session_id!r}")
        return store

    async def _backend(self, operation: str) -> Backend:
        return (await self._ready_store(operation)).backend

    async def _settle(self, operation: str) -> None:
        """With the lock held: ask the database about batches of unknown outcome.

        Does I/O only after a commit failed with an unknown outcome.
        """
        unresolved = self._staging.unresolved()
        if unresolved:
            backend = await self._backend(operation)
            self._staging.resolve(await backend.applied(self.session_id, unresolved))

    async def _view(self, limit: int | None) -> list[Any]:
        clear, pops, staged = self._staging.view()
        if limit is not None and len(staged) >= limit:
            return self._whole([decode_item(text) for text in staged[len(staged) - limit :]])
        committed: list[Any] = []
        if not clear:
            need = None if limit is None else limit - len(staged)
            _, committed = await self._committed_tail(need, pops)
        items = committed + [decode_item(text) for text in staged]
        return items if limit is None else self._whole(items)

    def _whole(self, window: list[Any]) -> list[Any]:
        """A limited read never starts with an output whose call it cut off (the API
        would refuse it): it starts after the last such output (``integrity`` not off)."""
        if self.integrity == "off":
            return window
        start = first_valid_start(window)
        return window[start:] if start else window

    async def _committed_tail(
        self, need: int | None, exclude: set[int]
    ) -> tuple[list[int], list[dict[str, Any]]]:
        """Keys and values of the latest ``need`` valid stored items not staged for popping."""
        backend = await self._backend("get_items")
        fetch = None if need is None else need + len(exclude)
        while True:
            rows = await self._load(backend, fetch)
            kept = [row for row in rows if row[0] not in exclude] if exclude else rows
            keys, values = decode_rows(kept, self.session_id)
            if need is None:
                return keys, values
            if len(values) >= need or fetch is None or len(rows) < fetch:
                cut = max(len(values) - need, 0)
                return keys[cut:], values[cut:]
            fetch = fetch * 2 + (need - len(values))

    async def _load(self, backend: Backend, limit: int | None) -> list[Row]:
        """Stored rows; records the session's version where the backend keeps one."""
        if isinstance(backend, CatalogueBackend):
            rows, self._version, life = await observed_load_versioned(
                backend, self.session_id, limit
            )
            if self._life is None or not self._staging:
                self._life = life  # staged changes keep the life they were made against
            return rows
        return await observed_load(backend, self.session_id, limit)

    async def _stage_pop(self) -> tuple[Any, int | None]:
        """Stage one pop; returns the item and, if it was stored, its row key."""
        popped, text = self._staging.pop_staged()
        if popped:
            return (None if text is None else decode_item(text)), None
        _, pops, _ = self._staging.view()
        keys, values = await self._committed_tail(1, pops)
        if not values:
            return None, None
        self._staging.pop_stored(keys[-1])
        return values[-1], keys[-1]

    async def _autocommit_pop(self) -> Any:
        policy = (await self._ready_store("pop_item")).retry
        attempts = policy.attempts
        for attempt in range(1, attempts + 1):
            async with self._lock:
                await self._settle("pop_item")
                value, key = await self._stage_pop()
                try:
                    await self._commit_locked()
                except CommitConflictError:
                    # Another writer removed that item first: forget our pop (an autocommit
                    # session must not keep a change that can never apply), read again.
                    if key is not None:
                        self._staging.forget_pop(key)
                    if key is None or attempt == attempts:
                        raise
                else:
                    return value
            await asyncio.sleep(policy.delay(attempt))  # let the other writer finish
        raise AssertionError("unreachable")  # pragma: no cover

    async def _autocommit_clear(self) -> None:
        async with self._lock:
            await self._settle("clear_session")
            self._staging.clear()
            await self._commit_locked()

    async def _commit_now(self) -> None:
        async with self._lock:
            await self._commit_locked()

    async def _commit_locked(self, expected_version: int | None = None) -> None:
        """With the lock held: send every staged batch through the commit path."""
        store = self._store
        if store is None or not store.usable_here():
            store = await self._ready_store("commit")
        if expected_version is not None and not isinstance(store.backend, CatalogueBackend):
            raise SessionError(
                f"commit(expected_version=...) on session {self.session_id!r}: "
                f"{type(store.backend).__name__} keeps no session versions"
            )
        integrity = self.integrity
        doubtful = set(self._staging.unresolved())
        if doubtful and integrity != "off" and store.backend.idempotent:
            await self._settle_before_judging()
            doubtful = set(self._staging.unresolved())
        batches = self._staging.seal(expected_version)
        if not batches:
            return
        if self._life is not None:
            batches = [replace(batch, incarnation=self._life) for batch in batches]
        self._version = None
        remembered = self._known
        known = self._known_tail()
        self._known = None
        try:
            batches = await judge(store.backend, self.session_id, batches, integrity, known)
        except BaseException as exc:
            self._staging.failed(known=True, unknown=doubtful)  # nothing was sent
            if isinstance(exc, StorageError):
                raise CommitError(
                    f"commit of session {self.session_id!r} failed reading the history it "
                    f"is checked against (nothing applied; changes still staged): {exc}",
                    session_id=self.session_id,
                    outcome_known=True,
                ) from exc
            raise
        try:
            outcome = await apply_batches(store, self.session_id, batches)
        except BaseException as exc:  # in flight when it happened: outcome unknown
            self._staging.failed(known=False)
            if isinstance(exc, Exception):
                raise interrupted_error(self.session_id, store.backend, exc) from exc
            raise  # CancelledError: the shield's deadline; it reports the outcome
        self._staging.applied(outcome.applied)
        if outcome.error is not None:
            self._staging.failed(known=outcome.error.outcome_known)
            raise outcome.error
        if expected_version is not None:
            self._version = expected_version + len(batches)
        held = outcome.mark
        if held is not None and integrity != "off" and store.backend.idempotent:
            mine = None if remembered is None else remembered[0]
            ran_after_mine = (
                mine is not None and mine.cell is held.cell and outcome.previous == mine.mark
            )
            tail = tail_after(known if ran_after_mine else None, batches)
            self._known = None if tail is None else (held, tail)

    def _known_tail(self) -> tuple[Any, ...] | None:
        """The end of the stored history, if this session's last commit left it and
        nothing wrote to the session through its store since."""
        if self._known is None or not self._known[0].valid:
            return None
        return self._known[1]

    async def _settle_before_judging(self) -> None:
        """Judge no batch that may already be stored (a resent batch in doubt): ask the
        database first. (A non-idempotent backend, the wrapper's, resends as before.)"""
        try:
            await self._settle("commit")
        except StorageError as exc:
            raise CommitError(
                f"commit of session {self.session_id!r}: the outcome of an earlier "
                f"commit is still unknown (the database did not answer: {exc}); "
                "changes still staged, commit() again is safe",
                session_id=self.session_id,
                outcome_known=False,
            ) from exc


async def _never(start: int, output: list[Any]) -> bool:
    return False


#: The ``Session`` methods whose overrides the compaction hooks would bypass.
_SESSION_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def _defined_by(cls: type, name: str) -> type:
    """The class of ``cls.__mro__`` whose own namespace defines ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return object


def _offers_hook(cls: type, hook: str) -> bool:
    """Whether sessions of ``cls`` offer the SDK's compaction ``hook``: only when the class
    defining it is (a subclass of) every class defining one of :data:`_SESSION_METHODS`,
    so that no override of theirs is bypassed."""
    owner = _defined_by(cls, hook)
    return all(issubclass(owner, _defined_by(cls, name)) for name in _SESSION_METHODS)


def _outcome_known(exc: CommitError | InvalidHistoryError) -> bool:
    """Whether a failed commit is known to have applied nothing."""
    return isinstance(exc, InvalidHistoryError) or exc.outcome_known


def _cancel_requests() -> int:
    """How many cancellations of the current task are pending (0 before Python 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return 0 if cancelling is None else int(cancelling())


def _utc(moment: object, name: str) -> datetime | None:
    """``None``, or an aware ``datetime`` (a naive one is taken as UTC)."""
    if moment is None:
        return None
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a datetime or None, got {type(moment).__name__}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _settings(value: object) -> Any:
    """Given settings, coerced and checked (``None``: the default, made on first use)."""
    if value is None:
        return None
    settings = coerce_session_settings(value)
    validate_limit(settings.limit, "session_settings.limit")
    return settings
