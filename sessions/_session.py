"""``BufferedSession``: the Agents SDK ``Session`` protocol over any backend, buffered.

Writes are staged (:mod:`sessions._staging`) and made durable by ``commit()`` through
the one commit path (:mod:`sessions._commit`), inside a bounded shield
(:mod:`sessions._shield`). Reads see stored history followed by the staged changes.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ._backend import Backend
from ._commit import apply_batches, interrupted_error
from ._policy import DEFAULT_COMMIT_TIMEOUT
from ._resource import AsyncResource
from ._serde import decode_item, decode_rows, encode_items
from ._shield import DeadlineExceeded, shielded
from ._staging import PendingChanges, Staging
from ._validate import validate_bool, validate_limit, validate_seconds, validate_session_id
from .errors import (
    CommitConflictError,
    SessionClosedError,
    SessionError,
    StoreClosedError,
    UncommittedChangesWarning,
)

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings

    from ._store import Store

__all__ = ["BufferedSession"]

logger = logging.getLogger("sessions")

T = TypeVar("T")


class _Tx:
    """Marks the context of one ``transaction()`` block (inherited by tasks made in it)."""

    __slots__ = ("finished", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.finished = False


_ACTIVE_TX: contextvars.ContextVar[tuple[_Tx, ...]] = contextvars.ContextVar(
    "sessions_transactions", default=()
)


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
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        *,
        store: Store[Any] | None = None,
        store_factory: Callable[[], Awaitable[Store[Any]]] | None = None,
        autocommit: bool = False,
        session_settings: SessionSettings | None = None,
        commit_timeout: float | None = None,
    ) -> None:
        self.session_id: str = validate_session_id(session_id)
        if (store is None) == (store_factory is None):
            raise TypeError("pass exactly one of store= or store_factory=")
        self._autocommit = validate_bool(autocommit, "autocommit")
        self.session_settings = _coerce_settings(session_settings)
        self._commit_timeout = (
            None if commit_timeout is None else validate_seconds(commit_timeout, "commit_timeout")
        )
        self._store = store
        self._store_factory = store_factory
        self._owns_store = store is None
        self._staging = Staging()
        self._lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self._token = object()

    # ------------------------------------------------------------------ introspection

    @property
    def autocommit(self) -> bool:
        """Whether every write is its own commit."""
        return self._autocommit

    @property
    def commit_timeout(self) -> float:
        """Seconds ``commit()``, an autocommit write or ``close()`` may hold its caller."""
        if self._commit_timeout is not None:
            return self._commit_timeout
        store = self._store
        return DEFAULT_COMMIT_TIMEOUT if store is None else store.commit_timeout

    @property
    def pending(self) -> PendingChanges:
        """What ``commit()`` would apply now (a snapshot; read-only)."""
        return self._staging.pending()

    @property
    def has_pending(self) -> bool:
        """``True`` when there is anything staged that ``commit()`` would apply."""
        return bool(self._staging)

    @property
    def store(self) -> Store[Any] | None:
        """The store this session writes to (``None`` until an owned one is opened)."""
        return self._store

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.session_id!r} {self.state.value}"
            f"{' autocommit' if self._autocommit else ''} pending={self.pending.items}>"
        )

    # ------------------------------------------------------------------ Session protocol

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """Stored history followed by the staged changes; the latest ``limit`` items.

        ``limit`` defaults to ``session_settings.limit``.
        """
        self._check_open("get_items")
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        n = validate_limit(limit)
        if n == 0:
            return []
        async with self._lock:
            await self._settle("get_items")
            return await self._view(n)

    async def add_items(self, items: list[Any]) -> None:
        """Stage ``items`` (validated and snapshotted now).

        Without autocommit this never suspends, so no cancellation can interrupt it
        halfway. A non-JSON item raises :class:`~sessions.errors.InvalidItemError`
        (a ``TypeError``) naming its index and type; none of the call's items are
        staged then.
        """
        self._check_open("add_items")
        encoded = encode_items(items)
        if self._refuse_late_write("add_items", len(encoded)) or not encoded:
            return
        self._staging.add(encoded)
        if self._autocommit:
            await self._shield(self._commit_now)

    async def pop_item(self) -> Any:
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

    async def clear_session(self) -> None:
        """Stage the removal of the whole history (applied at commit)."""
        self._check_open("clear_session")
        if self._refuse_late_write("clear_session", 1):
            return
        if self._autocommit:
            await self._shield(self._autocommit_clear)
            return
        async with self._lock:
            await self._settle("clear_session")
            self._staging.clear()

    # ------------------------------------------------------------------ transactions

    async def commit(self) -> None:
        """Apply every staged change in one database transaction.

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
        if not self._staging:
            return
        await self._shield(self._commit_now)

    async def rollback(self) -> None:
        """Discard every staged change. Never touches the database."""
        self._check_open("rollback")
        async with self._lock:
            self._discard("rollback")

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
        await self.commit()

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
        store = self._store
        if self._owns_store and store is not None:
            await store.close()

    def __del__(self) -> None:
        try:
            if not self.closed and self.has_pending:
                self._warn_discarded("garbage collection", stacklevel=3)
        except AttributeError:  # __init__ failed halfway
            pass

    # ------------------------------------------------------------------ internals

    async def _shield(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` in the bounded shield; a missed deadline becomes a CommitError."""
        try:
            return await shielded(work(), timeout=self.commit_timeout)
        except DeadlineExceeded as exc:
            store = self._store
            backend = None if store is None else store.backend
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
        """The store, opened on first use if this session owns it; checked for use here."""
        store = self._store
        if store is None:
            async with self._open_lock:
                if self._store is None:
                    assert self._store_factory is not None
                    self._store = await self._store_factory()
                store = self._store
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
            return [decode_item(text) for text in staged[len(staged) - limit :]]
        committed: list[Any] = []
        if not clear:
            need = None if limit is None else limit - len(staged)
            _, committed = await self._committed_tail(need, pops)
        return committed + [decode_item(text) for text in staged]

    async def _committed_tail(
        self, need: int | None, exclude: set[int]
    ) -> tuple[list[int], list[dict[str, Any]]]:
        """Keys and values of the latest ``need`` valid stored items not staged for popping."""
        backend = await self._backend("get_items")
        fetch = None if need is None else need + len(exclude)
        while True:
            rows = await backend.load(self.session_id, fetch)
            kept = [row for row in rows if row[0] not in exclude] if exclude else rows
            keys, values = decode_rows(kept, self.session_id)
            if need is None:
                return keys, values
            if len(values) >= need or fetch is None or len(rows) < fetch:
                cut = max(len(values) - need, 0)
                return keys[cut:], values[cut:]
            fetch = fetch * 2 + (need - len(values))

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
        for attempt in range(1, policy.attempts + 1):
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
                    if key is None or attempt == policy.attempts:
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

    async def _commit_locked(self) -> None:
        """With the lock held: send every staged batch through the commit path."""
        store = await self._ready_store("commit")
        batches = self._staging.seal()
        if not batches:
            return
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


def _cancel_requests() -> int:
    """How many cancellations of the current task are pending (0 before Python 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return 0 if cancelling is None else int(cancelling())


def _coerce_settings(value: object) -> SessionSettings | None:
    if value is None:
        return None
    try:
        from agents.memory.session_settings import SessionSettings
    except ImportError:  # openai-agents releases before SessionSettings existed (< 0.8)
        raise TypeError(
            "session_settings needs an openai-agents release that has "
            "agents.memory.session_settings.SessionSettings; upgrade openai-agents or pass "
            "limit= to get_items()"
        ) from None

    if isinstance(value, dict):
        # As the SDK's coerce_session_settings (0.19 on) does; earlier releases lack it.
        known = {f.name for f in dataclasses.fields(SessionSettings) if f.init}
        unknown = sorted(str(name) for name in value if name not in known)
        if unknown:
            raise TypeError(f"Unknown session_settings settings: {', '.join(unknown)}")
        value = SessionSettings(**value)
    if isinstance(value, SessionSettings):
        validate_limit(value.limit, "session_settings.limit")
        return value
    raise TypeError(
        f"session_settings must be an agents SessionSettings or a dict, got {type(value).__name__}"
    )
