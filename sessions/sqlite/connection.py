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


class writing:  # noqa: N801 - used as a function: ``with writing(conn):``
    """``BEGIN IMMEDIATE`` (the write lock taken now, not at the first write), then
    ``COMMIT``; on any exception (``COMMIT``'s own included) ``ROLLBACK``, if SQLite has
    not rolled back already. A class, not a generator: every commit enters one."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        conn = self._conn
        if kind is None:
            try:
                conn.execute("COMMIT")
                return
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        if conn.in_transaction:
            conn.execute("ROLLBACK")


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
