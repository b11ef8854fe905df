"""The exceptions and warnings raised by :mod:`sessions`.

Every error names what was wrong: the operation, the session and, where it
matters, the state the session was in.
"""

from __future__ import annotations

__all__ = [
    "CommitConflictError",
    "CommitError",
    "CommitVersionConflictError",
    "ConflictError",
    "DeletedConflictError",
    "InvalidHistoryError",
    "InvalidItemError",
    "InvalidSessionIdError",
    "SessionClosedError",
    "SessionDeletedError",
    "SessionError",
    "StorageError",
    "StoreClosedError",
    "TransientStorageError",
    "UncommittedChangesWarning",
    "VersionConflictError",
    "WrongEventLoopError",
]


class SessionError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidSessionIdError(SessionError, ValueError):
    """A ``session_id`` that is not a usable key (empty, too long, not a string, NUL)."""


class InvalidItemError(SessionError, TypeError):
    """An item passed to ``add_items`` cannot be stored as JSON.

    ``index`` is the item's position in the call and ``item_type`` its type name.
    None of that call's items were staged.
    """

    def __init__(self, message: str, *, index: int, item_type: str) -> None:
        super().__init__(message)
        self.index = index
        self.item_type = item_type


class InvalidHistoryError(SessionError):
    """A commit would store history the Responses API refuses (``integrity="reject"``).

    ``defects`` are the broken rules found in what the commit adds
    (:class:`sessions._model.history.Defect`: position, rule, call id, a message naming item
    types and call ids, never item text). Nothing was applied; the changes are still
    staged, to fix (``pop_item``) or ``rollback()`` (when raised at the end of a
    ``transaction()`` block, the block has rolled them back already).
    """

    def __init__(self, message: str, *, session_id: str, defects: tuple[object, ...]) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.defects = defects


class SessionClosedError(SessionError, RuntimeError):
    """An operation was attempted on a session (or store) that is closed."""


class StoreClosedError(SessionClosedError):
    """The store a session is bound to has been closed."""


class WrongEventLoopError(SessionError, RuntimeError):
    """A session or store was used from an event loop other than the one it belongs to.

    asyncio locks, futures and database pools belong to one loop: each thread that runs
    an event loop of its own needs its own store.
    """


class StorageError(SessionError):
    """The database refused or failed an operation.

    Raised by backends; the core turns failures of ``commit`` into :class:`CommitError`.
    """


class TransientStorageError(StorageError):
    """A failure worth retrying: lost connection, busy database, serialization failure.

    ``outcome_known`` is ``True`` when the backend knows the write did not reach the
    database (for example it failed before the statement was sent).
    """

    def __init__(self, message: str, *, outcome_known: bool) -> None:
        super().__init__(message)
        self.outcome_known = outcome_known


class ConflictError(StorageError):
    """A staged pop refers to a stored item that another writer already removed.

    The transaction was rolled back: nothing of the batch was applied.
    """


class VersionConflictError(ConflictError):
    """A batch's ``expect_version`` is not the session's version: another writer
    committed since the version was read. Raised by backends; nothing was applied.

    ``expected`` is the version the batch was prepared against, ``actual`` the stored one.
    """

    def __init__(self, message: str, *, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class DeletedConflictError(ConflictError):
    """The batch was prepared against a life of the session that has since been
    deleted (``delete_session``, ``delete_user``, ``purge``): the session is gone or was
    created anew. Raised by backends; nothing was applied."""


class CommitError(SessionError):
    """``commit`` failed.

    ``outcome_known`` tells whether the package knows that nothing of the batch
    reached the database (``True``) or cannot tell (``False``: the connection was lost
    while the database may have been committing). Either way the staged changes are
    still staged: ``commit()`` again is safe, because each batch carries an id and is
    applied at most once; ``rollback()`` discards them locally. Exception: when
    ``outcome_known`` is ``True`` and the commit was the one at the end of a
    ``transaction()`` block, the block has rolled its changes back.
    """

    def __init__(
        self, message: str, *, session_id: str, outcome_known: bool, attempts: int = 1
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.outcome_known = outcome_known
        self.attempts = attempts


class CommitConflictError(CommitError):
    """``commit`` failed because a staged pop refers to an item another writer removed.

    Nothing was applied (``outcome_known`` is ``True``). Retrying will fail the same
    way: ``rollback()`` and read again (a ``transaction()`` block whose exit commit
    fails so has rolled back already).
    """


class CommitVersionConflictError(CommitConflictError):
    """``commit(expected_version=v)`` failed: the session's stored version is no longer
    ``v`` (another writer committed since). Nothing was applied; the changes stay
    staged. A :class:`CommitConflictError` (so a ``CommitError``), not a
    :class:`ConflictError` (that one is the backends' ``StorageError``): code catching
    conflicts of ``commit()`` catches both kinds. ``expected_version`` and
    ``current_version`` say what was expected and what is stored.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str,
        expected_version: int,
        current_version: int,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, session_id=session_id, outcome_known=True, attempts=attempts)
        self.expected_version = expected_version
        self.current_version = current_version


class SessionDeletedError(CommitConflictError):
    """``commit`` (or ``rewind``/``undo_rewind``) failed: this session object read the
    session before it was deleted (``delete_session``, ``delete_user``, ``purge``), and
    its changes were made against the deleted history. Nothing was applied; the changes
    stay staged and every later commit of this object is refused the same way until
    ``rollback()``, which forgets the deleted history (the next commit then starts a
    new session). Items are never appended to, and pops never remove items of, a
    session that was deleted and created anew under the same id.
    """


class UncommittedChangesWarning(ResourceWarning):
    """A session was closed or garbage-collected while it still had staged changes."""
