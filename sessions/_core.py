"""The transactional core shared by every backend.

``BufferedSession`` implements the Agents SDK's ``Session`` protocol on top of any
:class:`~sessions._backend.Backend`. Everything that makes history whole lives here,
once: staging, read-your-writes, ``limit``, the shielded and idempotent ``commit``,
retries, late-write refusal and the leak warnings.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
import random
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ._backend import Backend, Batch
from ._serde import decode_item, decode_rows, encode_items
from .errors import (
    CommitConflictError,
    CommitError,
    ConflictError,
    InvalidSessionIdError,
    SessionClosedError,
    SessionError,
    StorageError,
    StoreClosedError,
    TransientStorageError,
    UncommittedChangesWarning,
)

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings
    from typing_extensions import Self

    from ._store import Store

__all__ = ["BufferedSession", "PendingChanges", "RetryPolicy", "shielded"]

logger = logging.getLogger("sessions")

T = TypeVar("T")

MAX_SESSION_ID_LENGTH = 1024


# --------------------------------------------------------------------------- helpers


async def shielded(coro: Awaitable[T]) -> T:
    """Run ``coro`` to its outcome even if the caller is cancelled, then re-raise.

    The work runs in its own task. A cancellation of the caller (however often it is
    repeated) is held until that task has finished; then the first ``CancelledError``
    is re-raised, so ``asyncio.timeout`` and task groups still see it.
    """
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.cancelled():
                raise
            if cancelled is None:
                cancelled = exc
            if not task.done():
                continue
            try:
                task.result()
            except BaseException as failure:  # the work failed and the caller left
                raise cancelled from failure
            raise cancelled from None
        except BaseException as failure:
            if cancelled is not None:
                raise cancelled from failure
            raise
        if cancelled is not None:
            raise cancelled
        return result


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How ``commit`` retries transient failures (lost connection, busy database).

    ``attempts`` counts the first try. Delays grow exponentially from
    ``initial_delay`` up to ``max_delay`` seconds, with jitter.
    """

    attempts: int = 5
    initial_delay: float = 0.05
    max_delay: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must be >= 0")

    def delay(self, attempt: int) -> float:
        base: float = min(self.max_delay, self.initial_delay * (2.0 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """A read-only view of what ``commit()`` would apply."""

    clear: bool
    """A staged ``clear_session()``: stored history goes at commit."""
    pops: int
    """How many stored items staged ``pop_item()`` calls remove at commit."""
    items: int
    """How many staged items ``add_items()`` appends at commit."""
    batches: int
    """How many batches are queued (more than one only after a failed commit)."""

    def __bool__(self) -> bool:
        return self.clear or self.pops > 0 or self.items > 0


class _Stage:
    """One batch in the making. Sealed once a commit attempt has sent it."""

    __slots__ = ("batch_id", "clear", "items", "maybe_applied", "pops", "sealed")

    def __init__(self) -> None:
        self.batch_id = uuid.uuid4().hex
        self.clear = False
        self.pops: list[int] = []
        self.items: list[str] = []
        self.sealed = False
        self.maybe_applied = False

    def empty(self) -> bool:
        return not (self.clear or self.pops or self.items)

    def freeze(self) -> Batch:
        return Batch(self.batch_id, self.clear, tuple(self.pops), tuple(self.items))

    def absorb(self, later: _Stage) -> None:
        """Fold a later, never-applied stage into this never-applied one."""
        if later.clear:
            self.clear, self.pops, self.items = True, [], list(later.items)
        else:
            self.pops.extend(later.pops)
            self.items.extend(later.items)


class _Tx:
    """Marks the context of one ``transaction()`` block (inherited by tasks made in it)."""

    __slots__ = ("finished", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.finished = False


_ACTIVE_TX: contextvars.ContextVar[tuple[_Tx, ...]] = contextvars.ContextVar(
    "sessions_transactions", default=()
)


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


def validate_session_id(session_id: object) -> str:
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session_id must be a str, got {type(session_id).__name__}: {session_id!r}"
        )
    if not session_id:
        raise InvalidSessionIdError("session_id must not be empty")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(
            f"session_id is {len(session_id)} characters long; the maximum is "
            f"{MAX_SESSION_ID_LENGTH}"
        )
    if "\x00" in session_id:
        raise InvalidSessionIdError("session_id must not contain NUL characters")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidSessionIdError(f"session_id is not valid Unicode text: {exc}") from None
    return session_id


def _validate_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int or None, got {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return limit


# --------------------------------------------------------------------------- session


class AsyncResource:
    """``async with`` support for anything with ``close()`` and ``_check_open()``."""

    def _check_open(self, operation: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._check_open("__aenter__")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class BufferedSession(AsyncResource):
    """A conversation history whose writes are staged in memory until ``commit()``.

    Implements the Agents SDK ``Session`` protocol (``get_items``, ``add_items``,
    ``pop_item``, ``clear_session``) and adds ``commit``, ``rollback``,
    ``transaction()``, ``pending`` / ``has_pending`` and ``close``.

    Backends provide concrete subclasses (:class:`sessions.SQLiteSession`,
    :class:`sessions.PostgresSession`) and stores hand them out with
    ``store.session(session_id)``.
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
    ) -> None:
        self.session_id: str = validate_session_id(session_id)
        if (store is None) == (store_factory is None):
            raise TypeError("pass exactly one of store= or store_factory=")
        if not isinstance(autocommit, bool):
            raise TypeError(f"autocommit must be a bool, got {type(autocommit).__name__}")
        self.session_settings = _coerce_settings(session_settings)
        self._autocommit = autocommit
        self._store = store
        self._store_factory = store_factory
        self._owns_store = store is None
        self._state = _State.OPEN
        self._stages: list[_Stage] = []
        self._lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self._token = object()

    # ------------------------------------------------------------------ introspection

    @property
    def autocommit(self) -> bool:
        """Whether every write is its own commit."""
        return self._autocommit

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    @property
    def pending(self) -> PendingChanges:
        """What ``commit()`` would apply now (a snapshot; read-only)."""
        clear = False
        pops = items = 0
        for stage in self._stages:
            if stage.clear:
                clear, pops, items = True, 0, 0
            pops += len(stage.pops)
            items += len(stage.items)
        return PendingChanges(
            clear=clear,
            pops=pops,
            items=items,
            batches=sum(1 for s in self._stages if not s.empty()),
        )

    @property
    def has_pending(self) -> bool:
        """``True`` when there is anything staged that ``commit()`` would apply."""
        return any(not stage.empty() for stage in self._stages)

    @property
    def store(self) -> Store[Any] | None:
        """The store this session writes to (``None`` until an owned one is opened)."""
        return self._store

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.session_id!r} {self._state.value}"
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
        n = _validate_limit(limit)
        if n == 0:
            return []
        async with self._lock:
            await self._settle()
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
        if self._refuse_late_write("add_items", len(encoded)):
            return
        if not encoded:
            return
        self._open_stage().items.extend(encoded)
        if self._autocommit:
            await shielded(self._commit_now())

    async def pop_item(self) -> Any:
        """Remove and return the newest item (staged ones first), or ``None``.

        Popping stored history is staged as well and applied at commit.
        """
        self._check_open("pop_item")
        if self._refuse_late_write("pop_item", 1):
            return None
        if self._autocommit:
            return await shielded(self._autocommit_pop())
        async with self._lock:
            await self._settle()
            value, _ = await self._stage_pop()
            return value

    async def clear_session(self) -> None:
        """Stage the removal of the whole history (applied at commit)."""
        self._check_open("clear_session")
        if self._refuse_late_write("clear_session", 1):
            return
        if self._autocommit:
            await shielded(self._autocommit_clear())
            return
        async with self._lock:
            await self._settle()
            self._stage_clear()

    # ------------------------------------------------------------------ transactions

    async def commit(self) -> None:
        """Apply every staged change in one database transaction.

        Shielded: if the caller is cancelled while the commit is in flight, the commit
        still runs to its outcome and ``CancelledError`` is raised afterwards. When it
        returns, the batch is durable. When it raises :class:`~sessions.errors.CommitError`,
        nothing of the batch is visible (or, if ``outcome_known`` is ``False``, the
        error says it cannot tell) and the changes stay staged: committing again never
        duplicates them. With nothing staged it returns at once.
        """
        self._check_open("commit")
        if not self._stages:
            return
        await shielded(self._commit_now())

    async def rollback(self) -> None:
        """Discard every staged change. Never touches the database."""
        self._check_open("rollback")
        async with self._lock:
            self._discard_stages("rollback")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[BufferedSession]:
        """Commit on normal exit; roll back on any exception (cancellation included).

        Writes issued later from inside the finished block's context (a background
        task the block started, for example a streamed run still running) are refused
        with a logged warning and never reach a later commit.
        """
        self._check_open("transaction")
        if any(tx.owner is self._token and not tx.finished for tx in _ACTIVE_TX.get()):
            raise SessionError(
                f"session {self.session_id!r}: transaction() is already active in this "
                "context; it does not nest"
            )
        tx = _Tx(self._token)
        reset = _ACTIVE_TX.set((*_ACTIVE_TX.get(), tx))
        try:
            yield self
        except BaseException:
            tx.finished = True
            _ACTIVE_TX.reset(reset)
            if not self.closed:
                await shielded(self.rollback())
            raise
        tx.finished = True
        _ACTIVE_TX.reset(reset)
        await self.commit()

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Close the session (idempotent). Closes the store only if this session opened it.

        Staged changes are neither written nor silently dropped: a
        :class:`~sessions.errors.UncommittedChangesWarning` and a log line name the
        session and what was discarded.
        """
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        self._warn_discarded("close()")
        self._stages = []
        store = self._store
        if self._owns_store and store is not None:
            await shielded(store.close())

    def __del__(self) -> None:
        try:
            if self._state is _State.OPEN and self.has_pending:
                self._warn_discarded("garbage collection", stacklevel=3)
        except AttributeError:  # __init__ failed halfway
            pass

    # ------------------------------------------------------------------ internals

    def _check_open(self, operation: str) -> None:
        if self._state is _State.CLOSED:
            raise SessionClosedError(
                f"{operation}() on session {self.session_id!r}: the session is closed"
            )
        store = self._store
        if store is not None and store.closed:
            raise StoreClosedError(
                f"{operation}() on session {self.session_id!r}: its store is closed"
            )

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

    def _discard_stages(self, why: str) -> None:
        if any(stage.maybe_applied for stage in self._stages):
            logger.warning(
                "session %r: %s discarded a batch whose earlier commit has an unknown "
                "outcome; it may already be stored",
                self.session_id,
                why,
            )
        self._stages = []

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

    def _open_stage(self) -> _Stage:
        if not self._stages or self._stages[-1].sealed:
            self._stages.append(_Stage())
        return self._stages[-1]

    async def _backend(self) -> Backend:
        store = self._store
        if store is None:
            async with self._open_lock:
                if self._store is None:
                    assert self._store_factory is not None
                    self._store = await self._store_factory()
                store = self._store
        if store.closed:
            raise StoreClosedError(f"session {self.session_id!r}: its store is closed")
        return store.backend

    async def _settle(self) -> None:
        """Resolve batches whose commit outcome is unknown, then merge what is left.

        Called with the lock held. Only does I/O after a commit failed with an unknown
        outcome; otherwise it just folds never-applied stages together.
        """
        if len(self._stages) <= 1 and not any(s.sealed for s in self._stages):
            return
        unknown = [s.batch_id for s in self._stages if s.maybe_applied]
        if unknown:
            backend = await self._backend()
            done = await backend.applied(self.session_id, unknown)
            self._stages = [s for s in self._stages if s.batch_id not in done]
        merged: _Stage | None = None
        for stage in self._stages:
            stage.sealed = stage.maybe_applied = False
            if merged is None:
                merged = stage
            else:
                merged.absorb(stage)
        self._stages = [] if merged is None else [merged]

    def _staged_view(self) -> tuple[bool, set[int], list[str]]:
        clear = False
        pops: set[int] = set()
        items: list[str] = []
        for stage in self._stages:
            if stage.clear:
                clear, pops, items = True, set(), []
            pops.update(stage.pops)
            items.extend(stage.items)
        return clear, pops, items

    async def _view(self, limit: int | None) -> list[Any]:
        clear, pops, staged = self._staged_view()
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
        backend = await self._backend()
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
        stage = self._open_stage()
        if stage.items:
            return decode_item(stage.items.pop()), None
        if stage.clear:
            return None, None
        _, pops, _ = self._staged_view()
        keys, values = await self._committed_tail(1, pops)
        if not values:
            return None, None
        stage.pops.append(keys[-1])
        return values[-1], keys[-1]

    def _stage_clear(self) -> None:
        stage = self._open_stage()
        stage.clear, stage.pops, stage.items = True, [], []

    async def _autocommit_pop(self) -> Any:
        policy = await self._retry_policy()
        for attempt in range(1, policy.attempts + 1):
            async with self._lock:
                await self._settle()
                value, key = await self._stage_pop()
                try:
                    await self._commit_locked()
                except CommitConflictError:
                    # Another writer removed that item first: forget our pop (an autocommit
                    # session must not keep a change that can never apply), read again.
                    for stage in self._stages:
                        if key in stage.pops:
                            stage.pops.remove(key)
                    if key is None or attempt == policy.attempts:
                        raise
                else:
                    return value
            await asyncio.sleep(policy.delay(attempt))  # let the other writer finish

        raise AssertionError("unreachable")  # pragma: no cover

    async def _autocommit_clear(self) -> None:
        async with self._lock:
            await self._settle()
            self._stage_clear()
            await self._commit_locked()

    async def _retry_policy(self) -> RetryPolicy:
        await self._backend()
        assert self._store is not None
        return self._store.retry

    async def _commit_now(self) -> None:
        async with self._lock:
            await self._commit_locked()

    async def _commit_locked(self) -> None:
        stages = [stage for stage in self._stages if not stage.empty()]
        if not stages:
            self._stages = []
            return
        for stage in stages:
            stage.sealed = True
        batches = [stage.freeze() for stage in stages]
        backend = await self._backend()
        assert self._store is not None
        policy = self._store.retry
        outcome_known = True
        last: BaseException | None = None
        for attempt in range(1, policy.attempts + 1):
            try:
                await backend.apply(self.session_id, batches)
            except TransientStorageError as exc:
                last = exc
                outcome_known = outcome_known and exc.outcome_known
                if attempt < policy.attempts:
                    delay = policy.delay(attempt)
                    logger.info(
                        "session %r: commit attempt %d/%d failed (%s); retrying in %.3fs",
                        self.session_id,
                        attempt,
                        policy.attempts,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                break
            except StorageError as exc:  # the database rolled the transaction back
                self._unseal(stages)
                error = CommitConflictError if isinstance(exc, ConflictError) else CommitError
                raise error(
                    f"commit of session {self.session_id!r} failed and was rolled back "
                    f"(nothing applied; changes still staged): {exc}",
                    session_id=self.session_id,
                    outcome_known=True,
                    attempts=attempt,
                ) from exc
            except BaseException as exc:
                for stage in stages:
                    stage.maybe_applied = True
                if isinstance(exc, (Exception, asyncio.CancelledError)):
                    raise CommitError(
                        f"commit of session {self.session_id!r} failed with an unexpected "
                        f"{type(exc).__name__}; outcome unknown (changes still staged; "
                        f"{_retry_advice(backend)}): {exc}",
                        session_id=self.session_id,
                        outcome_known=False,
                        attempts=attempt,
                    ) from exc
                raise
            else:
                self._drop(stages)
                return
        # Out of retries. If the outcome is unknown, ask the database what happened.
        if not outcome_known:
            try:
                done = await backend.applied(self.session_id, [b.batch_id for b in batches])
            except Exception as probe:  # noqa: BLE001 - reported in the error below
                logger.info(
                    "session %r: could not resolve commit outcome: %s", self.session_id, probe
                )
            else:
                if len(done) == len(batches):
                    self._drop(stages)
                    return
                if not done:
                    outcome_known = True
        if outcome_known:
            self._unseal(stages)
        else:
            for stage in stages:
                stage.maybe_applied = True
        raise CommitError(
            f"commit of session {self.session_id!r} gave up after {policy.attempts} "
            f"attempt(s); outcome {'known: nothing applied' if outcome_known else 'UNKNOWN'}; "
            f"changes still staged ({_retry_advice(backend)}): {last}",
            session_id=self.session_id,
            outcome_known=outcome_known,
            attempts=policy.attempts,
        ) from last

    def _drop(self, committed: list[_Stage]) -> None:
        ids = {id(stage) for stage in committed}
        self._stages = [s for s in self._stages if id(s) not in ids]

    def _unseal(self, stages: list[_Stage]) -> None:
        for stage in stages:
            stage.sealed = False
            stage.maybe_applied = False
        # Stages added while the commit was in flight may follow; fold them back in.
        merged: list[_Stage] = []
        for stage in self._stages:
            if merged and not merged[-1].sealed and not stage.sealed:
                merged[-1].absorb(stage)
            else:
                merged.append(stage)
        self._stages = merged


def _retry_advice(backend: Backend) -> str:
    if backend.idempotent:
        return "commit() again is safe: this batch is applied at most once"
    return (
        f"{type(backend).__name__} is not idempotent: check the stored history "
        "before committing again"
    )


def _coerce_settings(value: object) -> SessionSettings | None:
    if value is None:
        return None
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:  # openai-agents releases before SessionSettings existed
        raise TypeError(
            "session_settings needs an openai-agents release that has "
            "agents.memory.session_settings.SessionSettings; upgrade openai-agents or pass "
            "limit= to get_items()"
        ) from None

    if isinstance(value, (SessionSettings, dict)):
        settings = coerce_session_settings(value)
        _validate_limit(settings.limit)
        return settings
    raise TypeError(
        f"session_settings must be an agents SessionSettings or a dict, got {type(value).__name__}"
    )
