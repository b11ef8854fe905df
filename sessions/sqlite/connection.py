"""The connection: a store's settings checked, a file opened (pragmas, WAL, the schema
brought up to date), and the two kinds of transaction every job runs in."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from .faults import busy
from .sql import migrate

__all__ = [
    "Synchronous",
    "reading",
    "setup",
    "validate_path",
    "validate_synchronous",
    "writing",
]

Synchronous = Literal["FULL", "NORMAL", "EXTRA"]


def validate_synchronous(value: object) -> Synchronous:
    if value == "FULL" or value == "NORMAL" or value == "EXTRA":
        return value
    raise ValueError(f"synchronous must be 'FULL', 'NORMAL' or 'EXTRA', got {value!r}")


def validate_path(path: object) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"db_path must be a str or os.PathLike, got {type(path).__name__}")
    if not path:
        raise ValueError("db_path must not be empty (use ':memory:' for an in-memory database)")
    return path


@contextmanager
def writing(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` (the write lock taken now, not at the first write), then
    ``COMMIT``; on any exception ``ROLLBACK`` (if SQLite has not rolled back already)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def reading(conn: sqlite3.Connection) -> Iterator[None]:
    """One snapshot for several reads: ``BEGIN`` ... ``COMMIT``, whatever happens."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def setup(conn: sqlite3.Connection, synchronous: str, busy_timeout: float) -> None:
    """The connection's pragmas (busy timeout, WAL, ``synchronous``), then the missing
    migrations in one write transaction."""
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    deadline = time.monotonic() + busy_timeout
    while True:  # switching to WAL needs a moment alone with the file
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    conn.execute(f"PRAGMA synchronous = {validate_synchronous(synchronous)}")
    with writing(conn):
        migrate(conn)
