"""The two paths every feature of :class:`~sessions.BufferedSession` runs on: reading
stored history as staging changes it (items, turns), and committing the staged
batches through :mod:`sessions._engine.commit` (history rules first, :mod:`sessions._engine.integrity`).
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..._model.backend import AdminBackend, Backend, Batch, CatalogueBackend, Row, TurnBackend
from ..._model.history import first_valid_start
from ..._model.policy import Integrity, RetryPolicy
from ..._model.serde import decode_item, decode_rows
from ..._model.turns import Turn, build_turns, pending_turn, window_turns
from ...errors import CommitError, SessionError, StorageError
from ..commit import apply_batches, interrupted_error, read_for_commit
from ..integrity import clean, judge, tail_after
from ..observe import HOOK, observed_load, observed_load_versioned, report_lock_wait
from .core import SessionCore

__all__ = ["SessionPlumbing"]


class SessionPlumbing(SessionCore):
    """The read path and the commit path, over :class:`SessionCore`."""

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
        found = await self._turn_tail(operation, None)
        if found is not None:
            return found[0]
        backend = await self._turn_backend(operation)
        records, keys = await backend.load_turns(self.session_id)
        clear, pops, staged = self._staging.view()
        return build_turns(records, keys, clear=clear, pops=pops, staged=len(staged))

    async def _newest_turns(self, operation: str, count: int) -> tuple[list[Turn], int]:
        """With the lock held: the last ``count`` turns and how many there are, from the
        turn index (:meth:`_turn_tail`) when it can answer, else from every key."""
        found = await self._turn_tail(operation, count)
        if found is not None:
            return found
        every = await self._turn_list(operation)
        return every[-count:], len(every)

    async def _turn_tail(self, operation: str, count: int | None) -> tuple[list[Turn], int] | None:
        """With the lock held: the last ``count`` turns (all when ``None``) as staging
        changes them, pending one included, and how many turns there are, from the turn
        index (no item keys read: ``docs/turns.md``). ``None`` when it cannot answer:
        staged pops or a staged clear (they change which stored turns remain), or an
        index that is not exact; :meth:`_turn_list` then reads every key."""
        clear, pops, staged = self._staging.view()
        if clear or pops:
            return None
        backend = await self._turn_backend(operation)
        pending = 1 if staged else 0
        newest = None if count is None else max(count - pending, 0)
        window = await backend.load_turn_window(self.session_id, newest=newest)
        if window is None:
            return None
        turns = window_turns(window, newest=True)
        if staged:
            turns.append(pending_turn(window.count + 1, len(staged)))
        return turns, window.count + pending

    async def _read_span(self, first: int, last: int, items: int, pops: set[int]) -> list[Any]:
        """Stored items with keys from ``first`` to ``last``, minus ``pops``."""
        backend = await self._backend("get_items")
        assert isinstance(backend, AdminBackend)
        hidden = sum(1 for key in pops if first <= key <= last)
        rows = await backend.read_range(self.session_id, after=first - 1, limit=items + hidden)
        kept = [row for row in rows if row[0] <= last and row[0] not in pops]
        return decode_rows(kept, self.session_id)[1]

    async def _commit_now(self) -> None:
        if HOOK.observer is not None:
            async with self._commit_lock("commit"):
                await self._commit_locked()
            return
        lock = self._lock  # as ``async with self._lock``, minus two coroutines when free
        if not lock.take():
            await lock.acquire()
        try:
            await self._commit_locked()
        finally:
            lock.release()

    def _commit_lock(self, operation: str) -> AbstractAsyncContextManager[None]:
        """The session's lock as a commit (or an autocommit write) takes it: the lock
        itself, or, when an observer is installed, the lock with the wait for it timed
        and reported (:func:`~sessions._engine.observe.report_lock_wait`)."""
        if HOOK.observer is None:
            return self._lock
        return _TimedLock(self, time.perf_counter(), operation)

    async def _lock_waited(self, started: float, operation: str) -> None:
        """With the lock just taken by a commit that began waiting for it at
        ``started``: report the wait, on the store's backend."""
        waited = time.perf_counter() - started
        store = await self._ready_store(operation)
        report_lock_wait(store.backend, waited)

    async def _commit_locked(self, expected_version: int | None = None) -> None:
        """With the lock held: send every staged batch through the commit path."""
        store = self._store
        if store is None or not store.usable_here():
            store = await self._ready_store("commit")
        backend = store.backend
        if expected_version is not None and not isinstance(backend, CatalogueBackend):
            raise SessionError(
                f"commit(expected_version=...) on session {self.session_id!r}: "
                f"{type(backend).__name__} keeps no session versions"
            )
        integrity = self.integrity
        doubtful = self._staging.unresolved()
        if doubtful and integrity != "off" and backend.idempotent:
            await self._settle_before_judging()
            doubtful = self._staging.unresolved()
        batches = self._staging.seal(expected_version, self._life)
        if not batches:
            return
        self._version = None
        remembered = self._known
        known = self._known_tail()
        self._known = None
        if integrity != "off" and not clean(batches):
            batches = await self._judged(store.retry, backend, batches, integrity, known, doubtful)
        try:
            outcome = await apply_batches(store, self.session_id, batches)
        except BaseException as exc:  # in flight when it happened: outcome unknown
            self._staging.failed(known=False)
            if isinstance(exc, Exception):
                raise interrupted_error(self.session_id, backend, exc) from exc
            raise  # CancelledError: the shield's deadline; it reports the outcome
        self._staging.applied(outcome.applied)
        if outcome.error is not None:
            self._staging.failed(known=outcome.error.outcome_known)
            raise outcome.error
        if expected_version is not None:
            self._version = expected_version + len(batches)
        held = outcome.mark
        if held is not None and integrity != "off" and backend.idempotent:
            mine = None if remembered is None else remembered[0]
            ran_after_mine = (
                mine is not None and mine.cell is held.cell and outcome.previous == mine.mark
            )
            tail = tail_after(known if ran_after_mine else None, batches)
            self._known = None if tail is None else (held, tail)

    async def _judged(
        self,
        policy: RetryPolicy,
        backend: Backend,
        batches: list[Batch],
        integrity: Integrity,
        known: tuple[Any, ...] | None,
        doubtful: list[str],
    ) -> list[Batch]:
        """The sealed ``batches`` as the history rules let them go
        (:func:`~sessions._engine.integrity.judge`; its reads tried again as the commit's
        writes are, :func:`~sessions._engine.commit.read_for_commit`); if judging fails,
        nothing was sent."""
        try:
            return await read_for_commit(
                policy,
                self.session_id,
                "the history it is checked against",
                lambda: judge(backend, self.session_id, batches, integrity, known),
            )
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


class _TimedLock:
    """``async with``: a session's lock taken, then the wait for it reported."""

    __slots__ = ("_operation", "_session", "_started")

    def __init__(self, session: SessionPlumbing, started: float, operation: str) -> None:
        self._session = session
        self._started = started
        self._operation = operation

    async def __aenter__(self) -> None:
        lock = self._session._lock
        await lock.acquire()
        try:
            await self._session._lock_waited(self._started, self._operation)
        except BaseException:
            lock.release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._session._lock.release()
