"""SQLite backend: one file, one connection per store (on a worker thread), WAL.

Every commit is one ``BEGIN IMMEDIATE ... COMMIT`` executed start to finish by a
single job on the connection's worker thread (:mod:`sessions.sqlite.worker`, which says
why it is ours and not aiosqlite's), so no cancellation of the caller can leave a
transaction open or half-applied. Commits of different sessions that arrive while the
worker is busy share the next transaction (group commit, :mod:`sessions.sqlite.group`),
each in a savepoint of its own: one fsync and one thread hop for all of them.

The schema is versioned: ``MIGRATIONS`` lists each version's statements (append only);
opening a file applies the missing ones in one transaction, so many processes may open
a fresh file at once.

The modules, each one concern: ``sql`` (the SQL text and the migrations), ``faults``
(errors classified), ``connection`` (opening a file; the transaction wrappers),
``worker`` (the thread owning the connection), ``commit`` (a commit's transaction),
``group`` (group commit's job), ``reads`` and ``deletes`` (the other jobs),
``backend`` (:class:`SQLiteBackend`), ``store`` (:class:`SQLiteStore`,
:class:`SQLiteSession`).
"""

from __future__ import annotations

from .backend import SQLiteBackend
from .sql import MIGRATIONS, SCHEMA_VERSION
from .sql import SESSION_TABLES as SESSION_TABLES
from .store import SQLiteSession, SQLiteStore

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteBackend", "SQLiteSession", "SQLiteStore"]
