"""``TemporalSession``: a session for ``Runner.run(..., session=...)`` in workflow code.

Staging lives in the workflow's own state (deterministic: replay rebuilds it); reads
and commits run as the activities ``worker.py`` registers, against the store the
worker opens. Each commit is one activity whose batch id is derived from the workflow
id, the run id and the commit's position (``ids.py``), so a retried activity or a
replayed workflow never writes twice (``docs/temporal.md``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from .._model.history import first_valid_start
from .._model.serde import decode_item, encode_items
from .._model.validate import validate_limit, validate_session_id
from ..errors import SessionError
from .ids import lineage_of, workflow_batch_id
from .payloads import CommitRequest, CommitResult, LoadRequest, LoadResult, SessionCarry

__all__ = ["COMMIT_ACTIVITY", "LOAD_ACTIVITY", "TemporalSession"]

#: The activities' names (registered by :class:`~sessions.temporal.SessionsPlugin`).
LOAD_ACTIVITY = "txsessions.load"
COMMIT_ACTIVITY = "txsessions.commit"


def _timeout(value: object, name: str) -> timedelta:
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, got {type(value).__name__}")
    if value <= timedelta(0):
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


class TemporalSession:
    """The Agents SDK ``Session`` protocol for workflow code, buffered like
    :class:`~sessions.BufferedSession`: ``add_items`` / ``pop_item`` /
    ``clear_session`` only stage (in workflow state); ``commit()`` applies them as one
    idempotent activity; ``get_items`` reads what the store holds (an activity, once a
    run: the session then knows the history) followed by what is staged.

    Make it in workflow code only (``RuntimeError`` elsewhere). ``task_queue``,
    ``start_to_close_timeout`` and ``retry_policy`` go to the two activities
    (default: the workflow's queue, 60 s, Temporal's default retries: retried until they
    succeed). ``session_settings``: the SDK's ``SessionSettings`` (its ``limit`` is what
    ``Runner.run`` reads at most).
    """

    def __init__(
        self,
        session_id: str,
        *,
        session_settings: Any = None,
        task_queue: str | None = None,
        start_to_close_timeout: timedelta = timedelta(seconds=60),
        retry_policy: RetryPolicy | None = None,
        carry: SessionCarry | None = None,
    ) -> None:
        if not workflow.in_workflow():
            raise RuntimeError(
                "TemporalSession is for workflow code; inside an activity use "
                "sessions.temporal.activity_session()"
            )
        self.session_id: str = validate_session_id(session_id)
        self.session_settings = session_settings
        if task_queue is not None and (not isinstance(task_queue, str) or not task_queue):
            raise ValueError(f"task_queue must be a non-empty str or None, got {task_queue!r}")
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise TypeError(
                f"retry_policy must be a temporalio RetryPolicy or None, got "
                f"{type(retry_policy).__name__}"
            )
        self._options: dict[str, Any] = {
            "task_queue": task_queue,
            "start_to_close_timeout": _timeout(start_to_close_timeout, "start_to_close_timeout"),
            "retry_policy": retry_policy,
        }
        info = workflow.info()
        self._workflow_id, self._run_id = info.workflow_id, info.run_id
        if carry is None:
            self._lineage = lineage_of(info.workflow_id, info.first_execution_run_id)
            self._position = 0
        else:
            self._lineage, self._position = _check_carry(carry, self.session_id)
        self._clear = False
        self._pops = 0
        self._staged: list[str] = []
        self._stored: list[Any] | None = None  # the latest stored items, decoded
        self._complete = False  # _stored is the whole stored history
        self._trim = True
        self._busy = False

    @classmethod
    def from_carry(cls, carry: SessionCarry, **options: Any) -> TemporalSession:
        """The session a continue-as-new run goes on with (see :meth:`carry`)."""
        if not isinstance(carry, SessionCarry):
            raise TypeError(f"carry must be a SessionCarry, got {type(carry).__name__}")
        return cls(carry.session_id, carry=carry, **options)

    def carry(self) -> SessionCarry:
        """What the next run of a continue-as-new needs (ids and a count, no items).
        Refused while changes are staged: commit first."""
        self._refuse_staged("carry")
        return SessionCarry(self.session_id, self._lineage, self._position)

    # ------------------------------------------------------------------ introspection

    @property
    def has_pending(self) -> bool:
        """``True`` when ``commit()`` would write something."""
        return self._clear or self._pops > 0 or bool(self._staged)

    @property
    def position(self) -> int:
        """How many commits this workflow (its continue-as-new chain) has made."""
        return self._position

    def __repr__(self) -> str:
        return f"<TemporalSession {self.session_id!r} position={self._position}>"

    # ------------------------------------------------------------------ Session protocol

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        """Stored history followed by the staged changes; the latest ``limit`` items."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        n = validate_limit(limit)
        if n == 0:
            return []
        staged = [decode_item(text) for text in self._staged]
        if self._clear:
            stored: list[Any] = []
        else:
            need = None if n is None else max(n - len(staged), 0) + self._pops
            stored = await self._stored_tail(need)
            stored = stored[: len(stored) - self._pops] if self._pops else stored
        items = stored + staged
        if n is None:
            return items
        window = items[-n:]
        start = first_valid_start(window) if self._trim else 0
        return window[start:]

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Stage ``items`` (validated and snapshotted now; never suspends)."""
        self._staged.extend(encode_items(items))

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        """Remove and return the newest item (staged ones first), or ``None``."""
        if self._staged:
            return decode_item(self._staged.pop())
        if self._clear:
            return None
        stored = await self._stored_tail(self._pops + 1)
        if len(stored) <= self._pops:
            return None
        self._pops += 1
        return stored[len(stored) - self._pops]

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Stage the removal of the whole history (applied at commit)."""
        self._clear, self._pops, self._staged = True, 0, []

    # ------------------------------------------------------------------ transactions

    async def commit(self) -> None:
        """Apply everything staged as one batch, in one activity.

        The batch id is derived from the workflow id, the run id and this commit's
        position, so every attempt of the activity (and every replay of the workflow)
        names the same batch and the store applies it once. With nothing staged it
        returns at once and uses no position. When the activity fails for good, the
        changes stay staged.
        """
        if not self.has_pending:
            return
        self._enter("commit")
        try:
            position = self._position + 1
            request = CommitRequest(
                session_id=self.session_id,
                batch_id=workflow_batch_id(self._workflow_id, self._run_id, position),
                lineage=self._lineage,
                position=position,
                clear=self._clear,
                pops=self._pops,
                items=list(self._staged),
            )
            result = await workflow.execute_activity(
                COMMIT_ACTIVITY, request, result_type=CommitResult, **self._options
            )
        finally:
            self._busy = False
        self._position = position
        self._committed(result)

    async def rollback(self) -> None:
        """Discard everything staged (no activity)."""
        self._clear, self._pops, self._staged = False, 0, []

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[TemporalSession]:
        """Commit on normal exit; roll back on any exception."""
        try:
            yield self
        except BaseException:
            await self.rollback()
            raise
        await self.commit()

    # ------------------------------------------------------------------ internals

    def _committed(self, result: CommitResult) -> None:
        """What the store holds now, from what was staged (or, when the store kept items
        out of the history, nothing known: the next read loads)."""
        if result.quarantined or result.hidden or self._stored is None:
            self._stored, self._complete = None, False
        elif self._clear:
            self._stored, self._complete = [], True
        else:
            kept = self._stored[: len(self._stored) - self._pops] if self._pops else self._stored
            self._stored = kept + [decode_item(text) for text in self._staged]
        self._clear, self._pops, self._staged = False, 0, []

    async def _stored_tail(self, need: int | None) -> list[Any]:
        """The latest ``need`` stored items (all when ``None``); loads them (one activity)
        unless this session already knows them."""
        if need == 0:
            return []
        known = self._stored
        if known is not None and (self._complete or (need is not None and len(known) >= need)):
            return known if need is None or self._complete else known[len(known) - need :]
        self._enter("get_items")
        try:
            request = LoadRequest(self.session_id, need, self._lineage, self._position + 1)
            result = await workflow.execute_activity(
                LOAD_ACTIVITY, request, result_type=LoadResult, **self._options
            )
        finally:
            self._busy = False
        self._stored = [decode_item(text) for text in result.items]
        self._complete, self._trim = result.complete, result.trim
        return self._stored

    def _enter(self, operation: str) -> None:
        if self._busy:
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: another read or commit of "
                "this session is running (await it first)"
            )
        self._busy = True

    def _refuse_staged(self, operation: str) -> None:
        if self.has_pending:
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: it has staged changes; "
                "commit() or rollback() first"
            )


def _check_carry(carry: SessionCarry, session_id: str) -> tuple[str, int]:
    if not isinstance(carry, SessionCarry):
        raise TypeError(f"carry must be a SessionCarry or None, got {type(carry).__name__}")
    if carry.session_id != session_id:
        raise ValueError(f"carry is for session {carry.session_id!r}, not {session_id!r}")
    if not isinstance(carry.lineage, str) or not carry.lineage:
        raise ValueError(f"carry.lineage must be a non-empty str, got {carry.lineage!r}")
    position = carry.position
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError(f"carry.position must be an int >= 0, got {position!r}")
    return carry.lineage, position
