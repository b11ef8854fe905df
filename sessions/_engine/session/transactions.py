"""Transactions of :class:`~sessions.BufferedSession`: ``commit()``, ``rollback()``,
``transaction()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ...errors import CommitError, InvalidHistoryError, SessionError
from ..shield import DeadlineExceeded, drive, shielded
from .core import ACTIVE_TX, Tx
from .plumbing import SessionPlumbing

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["TransactionPart"]

logger = logging.getLogger("sessions")


class TransactionPart(SessionPlumbing):
    """``commit``, ``rollback`` and ``transaction()``."""

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
            try:  # self._shield(self._commit_now), one coroutine fewer
                await drive(self._commit_now(), self.commit_timeout)
            except DeadlineExceeded as exc:
                raise self._missed(exc) from exc
            return

        async def conditional() -> None:
            async with self._commit_lock("commit"):
                await self._settle("commit")
                await self._commit_locked(expected_version)

        await self._shield(conditional)

    async def _commit_as(self, batch_id: str) -> None:
        """:meth:`commit`, the staged changes sent as one batch with the id ``batch_id``
        (derived by the caller, ``sessions.temporal``, from what identifies the write:
        a retry sends the same id and the backend applies it once). With nothing staged
        it returns at once; staged changes spread over several batches (after a failed
        commit) raise ``RuntimeError``, nothing sent."""
        self._check_open("commit")
        if not self._staging:
            return
        self._staging.name(batch_id)
        await self._shield(self._commit_now)

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
    async def transaction(self) -> AsyncIterator[Self]:
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
        if any(tx.owner is self._token and not tx.finished for tx in ACTIVE_TX.get()):
            raise SessionError(
                f"session {self.session_id!r}: transaction() is already active in this "
                "context; it does not nest"
            )
        tx = Tx(self._token)
        reset = ACTIVE_TX.set((*ACTIVE_TX.get(), tx))
        cancels = _cancel_requests()
        try:
            yield self
            if _cancel_requests() > cancels:
                raise asyncio.CancelledError("cancelled inside transaction() (swallowed there)")
        except BaseException:
            tx.finished = True
            ACTIVE_TX.reset(reset)
            if not self.closed:
                await self._rollback_on_error()
            raise
        tx.finished = True
        ACTIVE_TX.reset(reset)
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


def _outcome_known(exc: CommitError | InvalidHistoryError) -> bool:
    """Whether a failed commit is known to have applied nothing."""
    return isinstance(exc, InvalidHistoryError) or exc.outcome_known


def _cancel_requests() -> int:
    """How many cancellations of the current task are pending (0 before Python 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return 0 if cancelling is None else int(cancelling())
