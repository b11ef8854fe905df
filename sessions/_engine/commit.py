"""The one commit path: every writer (sessions, import, migration) goes through here.

:func:`apply_batches` applies batches of one session with the store's retry policy and,
when retries run out without knowing whether the last attempt landed, asks the
database (by batch id) before giving up. :func:`write_batches` is the same, shielded
from cancellation and bounded by the store's ``commit_timeout``: what import and
migration call. Sessions call :func:`apply_batches` inside their own bounded shield,
because their shielded work also covers their lock and their staging.

Nothing else in ``sessions/`` calls ``Backend.apply``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .._model.backend import Backend, Batch
from .._model.policy import BULK_NAMESPACES, DEFAULT_COMMIT_TIMEOUT, RetryPolicy
from ..errors import (
    CommitConflictError,
    CommitError,
    CommitVersionConflictError,
    ConflictError,
    DeletedConflictError,
    SessionDeletedError,
    StorageError,
    TransientStorageError,
    VersionConflictError,
)
from .marks import Held
from .observe import HOOK, Observer, Operation, system_of
from .shield import DeadlineExceeded, shielded

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "DEFAULT_COMMIT_TIMEOUT",
    "Outcome",
    "RetryPolicy",
    "apply_batches",
    "derived_batch_id",
    "interrupted_error",
    "read_for_commit",
    "retry_advice",
    "write_batches",
]

logger = logging.getLogger("sessions")

T = TypeVar("T")


@dataclass(slots=True)  # not frozen: built on every commit, plain assignments are cheaper
class Outcome:
    """What :func:`apply_batches` found out (never changed once made)."""

    applied: frozenset[str]
    """Ids of the batches known to be applied (all of them when ``error`` is ``None``)."""
    error: CommitError | None = None
    """Why not everything is known to be applied."""
    attempts: int = 1
    """How many times the batches were sent."""
    mark: Held | None = None
    """The store's write mark (:mod:`sessions._engine.marks`) this apply ended with, if no other
    write of the session through the store overlapped it."""
    previous: int | None = None
    """The session's write mark when this apply began."""


def retry_advice(backend: Backend) -> str:
    if backend.idempotent:
        return "commit() again is safe: this batch is applied at most once"
    return (
        f"{type(backend).__name__} is not idempotent: check the stored history "
        "before committing again"
    )


def _ids(batches: Sequence[Batch]) -> frozenset[str]:
    if len(batches) == 1:
        return frozenset((batches[0].batch_id,))
    return frozenset(batch.batch_id for batch in batches)


async def apply_batches(store: Store[Any], session_id: str, batches: Sequence[Batch]) -> Outcome:
    """Apply ``batches`` (one session, in order) with the store's retry policy.

    Never raises a storage error: the outcome says what is known. A ``CancelledError``
    (or any unexpected exception) while a batch is in flight is propagated as is: the
    outcome of that attempt is then unknown, and the caller records it so. The store
    counts the commit as in flight meanwhile (its ``close()`` waits for it).
    """
    backend = store.enter_commit("commit")
    try:
        marks = store.write_marks
        began = marks.begin(session_id)
        observer = HOOK.observer
        try:
            if observer is not None:
                outcome = await _observed(observer, backend, store.retry, session_id, batches)
            else:
                failure: StorageError | None = None
                try:  # the first attempt right here: one coroutine fewer per commit
                    await backend.apply(session_id, batches)
                except StorageError as exc:
                    failure = exc
                if failure is None:
                    outcome = Outcome(_ids(batches))
                else:
                    outcome = await _retried(backend, store.retry, session_id, batches, failure)
        finally:
            mark = marks.end(began)
    finally:
        store.leave_commit()
    outcome.mark, outcome.previous = mark, began.previous
    return outcome


async def _observed(
    observer: Observer,
    backend: Backend,
    policy: RetryPolicy,
    session_id: str,
    batches: Sequence[Batch],
) -> Outcome:
    """:func:`_retried`, reported to ``observer``."""
    op = Operation(
        "commit",
        system_of(backend),
        items=sum(len(batch.items) for batch in batches),
        batches=len(batches),
    )
    observer.begin(op)
    try:
        outcome = await _retried(backend, policy, session_id, batches)
    except BaseException as exc:
        op.outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
        op.error_type = type(exc).__name__
        raise
    else:
        op.attempts, error = outcome.attempts, outcome.error
        if error is not None:
            op.error_type = type(error.__cause__ or error).__name__
            if isinstance(error, CommitConflictError):
                op.outcome = "conflict"
            else:
                op.outcome = "failed" if error.outcome_known else "unknown"
        return outcome
    finally:
        observer.end(op)


async def _retried(
    backend: Backend,
    policy: RetryPolicy,
    session_id: str,
    batches: Sequence[Batch],
    failure: StorageError | None = None,
) -> Outcome:
    """``batches`` applied with ``policy``'s attempts; ``failure``: how the first
    attempt, already made by the caller, failed (``None``: not made yet)."""
    known = True
    last: TransientStorageError | None = None
    for attempt in range(1, policy.attempts + 1):
        if failure is None:
            try:
                await backend.apply(session_id, batches)
            except StorageError as exc:
                failure = exc
            else:
                return Outcome(_ids(batches), attempts=attempt)
        if not isinstance(failure, TransientStorageError):
            # The database rolled the transaction back.
            error = _rolled_back(session_id, failure, attempt)
            error.__cause__ = failure
            return Outcome(frozenset(), error, attempt)
        last, known, failure = failure, known and failure.outcome_known, None
        if attempt < policy.attempts:
            delay = policy.delay(attempt)
            logger.info(
                "session %r: commit attempt %d/%d failed (%s); retrying in %.3fs",
                session_id,
                attempt,
                policy.attempts,
                last,
                delay,
            )
            await asyncio.sleep(delay)
    assert last is not None
    return await _give_up(backend, session_id, batches, policy.attempts, known, last)


async def read_for_commit(
    policy: RetryPolicy, session_id: str, what: str, read: Callable[[], Awaitable[T]]
) -> T:
    """``read()``, a read a commit makes before it writes (the history its batches are
    judged against), with ``policy``'s attempts as the writes get: a read changes
    nothing, so a :class:`~sessions.errors.TransientStorageError` (a pooled connection
    found dead, a server restarting) is tried again, and only the last one is raised."""
    for attempt in range(1, policy.attempts):
        try:
            return await read()
        except TransientStorageError as exc:
            delay = policy.delay(attempt)
            logger.info(
                "session %r: commit's read of %s, attempt %d/%d failed (%s); retrying in %.3fs",
                session_id,
                what,
                attempt,
                policy.attempts,
                exc,
                delay,
            )
            await asyncio.sleep(delay)
    return await read()


def _rolled_back(session_id: str, exc: StorageError, attempt: int) -> CommitError:
    message = (
        f"commit of session {session_id!r} failed and was rolled back "
        f"(nothing applied; changes still staged): {exc}"
    )
    if isinstance(exc, VersionConflictError):
        return CommitVersionConflictError(
            message,
            session_id=session_id,
            expected_version=exc.expected,
            current_version=exc.actual,
            attempts=attempt,
        )
    kind: type[CommitError] = CommitError
    if isinstance(exc, DeletedConflictError):
        kind = SessionDeletedError
    elif isinstance(exc, ConflictError):
        kind = CommitConflictError
    return kind(message, session_id=session_id, outcome_known=True, attempts=attempt)


async def _give_up(
    backend: Backend,
    session_id: str,
    batches: Sequence[Batch],
    attempts: int,
    known: bool,
    last: TransientStorageError,
) -> Outcome:
    """Out of retries. If the outcome is unknown, ask the database what happened."""
    applied: frozenset[str] = frozenset()
    if not known:
        try:
            applied = frozenset(await backend.applied(session_id, list(_ids(batches))))
        except Exception as probe:  # noqa: BLE001 - the outcome stays unknown, said below
            logger.info("session %r: could not resolve commit outcome: %s", session_id, probe)
        else:
            if applied == _ids(batches):
                return Outcome(applied, attempts=attempts)
            known = known or not applied
    error = CommitError(
        f"commit of session {session_id!r} gave up after {attempts} attempt(s); outcome "
        f"{'known: nothing applied' if known else 'UNKNOWN'}; changes still staged "
        f"({retry_advice(backend)}): {last}",
        session_id=session_id,
        outcome_known=known,
        attempts=attempts,
    )
    error.__cause__ = last
    return Outcome(applied, error, attempts)


def interrupted_error(
    session_id: str, backend: Backend | None, failure: BaseException, *, known: bool = False
) -> CommitError:
    """The error for a commit interrupted in flight (out of time, or an unexpected error).

    ``known``: nothing of the commit was sent (it was still waiting to start).
    """
    if isinstance(failure, DeadlineExceeded):
        what = f"did not finish within commit_timeout={failure.timeout:g}s"
    else:
        what = f"failed with an unexpected {type(failure).__name__}: {failure}"
    if known:
        state = "nothing of it was sent (changes still staged)"
    else:
        advice = "" if backend is None else f"; {retry_advice(backend)}"
        state = f"outcome unknown (changes still staged{advice})"
    error = CommitError(
        f"commit of session {session_id!r} {what}; {state}",
        session_id=session_id,
        outcome_known=known,
    )
    error.__cause__ = failure
    return error


async def write_batches(store: Store[Any], session_id: str, batches: Sequence[Batch]) -> None:
    """:func:`apply_batches`, shielded and bounded by the store's ``commit_timeout``.

    Raises :class:`CommitError` on failure. For writers without a session of their own
    (import, migration): their batches have deterministic ids, so after any error
    running the same write again is safe.
    """
    try:
        outcome = await shielded(
            apply_batches(store, session_id, batches), timeout=store.commit_timeout
        )
    except DeadlineExceeded as exc:
        raise interrupted_error(session_id, store.backend, exc) from exc
    if outcome.error is not None:
        raise outcome.error


def derived_batch_id(namespace: str, session_id: str, position: int, texts: Sequence[str]) -> str:
    """A batch id that depends only on its inputs: what makes bulk writes idempotent.

    ``namespace`` says which writer made it (one of :data:`BULK_NAMESPACES`: ``imp``
    for import, ``mig`` for migration, ``doc`` for a repair); ``position`` is where the batch's first item
    sits in the source's history of that session (``-1`` for a marker batch without
    items). Records of these ids are never pruned.
    """
    if namespace not in BULK_NAMESPACES:
        raise ValueError(f"unknown bulk namespace {namespace!r}: one of {BULK_NAMESPACES}")
    digest = hashlib.sha256()
    digest.update(f"{namespace}\0{session_id}\0{position}\0{len(texts)}\0".encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return f"{namespace}-{digest.hexdigest()[:40]}"
