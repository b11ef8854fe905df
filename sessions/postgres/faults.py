"""How the PostgreSQL backend reads a failure: which :mod:`sessions.errors` exception an
asyncpg or OS error becomes, and whether the commit's outcome is known (:class:`_Phase`).
"""

from __future__ import annotations

import asyncio

import asyncpg  # type: ignore[import-untyped]

from .._model.catalogue import deleted_message
from ..errors import DeletedConflictError, StorageError, TransientStorageError

#: SQLSTATE of the append statement's refusal of a batch for a life that is over.
_DELETED_STATE = "TXS01"

# Server-reported SQLSTATEs after which the connection is gone or the database is
# going away: retry, and the outcome is known only if the commit was not yet sent.
_LOST_STATES = frozenset({"57P01", "57P02", "57P03"})
# Server-reported SQLSTATEs that abort the statement (outcome known) but are worth a
# retry: serialization failure, deadlock, too many connections, statement cancelled.
_RETRY_STATES = frozenset({"40001", "40P01", "53300", "57014"})


class _Phase:
    """Where an operation got to; decides whether a lost connection leaves the outcome known."""

    __slots__ = ("commit_sent",)

    def __init__(self) -> None:
        self.commit_sent = False


def _is_connection_loss(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.PostgresConnectionError):  # 08xxx, incl. ConnectionDoesNotExist
        return True
    if isinstance(exc, asyncpg.PostgresError):
        return getattr(exc, "sqlstate", None) in _LOST_STATES
    if isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc).lower()
    if isinstance(exc, asyncpg.InternalClientError):
        # The protocol is out of step with the server, typically because the backend
        # died while the connection sat idle in the pool: the connection is unusable.
        return True
    return isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError))


def _classify(exc: BaseException, operation: str, phase: _Phase) -> StorageError | None:
    """The :mod:`sessions.errors` exception for an asyncpg/OS failure, or ``None``."""
    detail = f"{type(exc).__name__}: {exc}"
    if _is_connection_loss(exc):
        known = not phase.commit_sent
        return TransientStorageError(
            f"PostgreSQL {operation}: connection lost or database unavailable "
            f"({'nothing was committed' if known else 'the commit may have been applied'}): "
            f"{detail}",
            outcome_known=known,
        )
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None)
        if state == _DELETED_STATE:
            return DeletedConflictError(deleted_message(getattr(exc, "message", "")))
        if state in _RETRY_STATES:
            return TransientStorageError(
                f"PostgreSQL {operation} failed and was rolled back (SQLSTATE {state}): {detail}",
                outcome_known=True,
            )
        return StorageError(f"PostgreSQL {operation} failed (SQLSTATE {state}): {detail}")
    if isinstance(exc, asyncpg.InterfaceError):
        return StorageError(f"PostgreSQL {operation} failed: {detail}")
    return None
