"""SQLite's errors classified: a busy or locked database is worth a retry, the rest is not."""

from __future__ import annotations

import sqlite3

from ..errors import StorageError, TransientStorageError

__all__ = ["busy", "classify"]

_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (named in sqlite3 only from Python 3.11)
#: SQLite's own texts for those codes: all Python 3.10's sqlite3 tells (no error codes).
_BUSY_TEXTS = ("database is locked", "database table is locked", "database schema is locked")


def busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLITE_BUSY or SQLITE_LOCKED (another connection holds a lock)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(_BUSY_TEXTS)


def classify(exc: sqlite3.Error, operation: str) -> StorageError:
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    if busy(exc):
        return TransientStorageError(
            f"SQLite {operation}: database busy ({name}): {exc}", outcome_known=True
        )
    return StorageError(f"SQLite {operation} failed ({name}): {exc}")
