"""PostgreSQL backend (asyncpg): one pool per store, one round trip per common commit.

The backend only loads rows and applies batches; staging, retries and outcome
resolution live in the core (:mod:`sessions._engine.commit`, :mod:`sessions._engine.session`).
One module per concern:

* ``sql.py``: the migrations and every statement, each written once; the table names.
* ``faults.py``: asyncpg and OS failures as :mod:`sessions.errors` exceptions.
* ``connect.py``: running an operation on a pooled connection (handed back clean or
  terminated), closing; the pool helpers of :class:`PostgresStore`.
* ``group.py``: appends, alone or grouped (the scheduler: :mod:`sessions._engine.group`).
* ``admin.py``: store operations (listings, range reads, pruning, deletes).
* ``schema.py``: creating and migrating the tables.
* ``backend.py``: :class:`PostgresBackend`, those parts put together, with the commit's
  transaction and the reads.
* ``store.py``: :class:`PostgresStore` and :class:`PostgresSession`.
"""

from __future__ import annotations

from .backend import PostgresBackend
from .sql import MIGRATIONS, SCHEMA_VERSION
from .sql import SESSION_TABLES as SESSION_TABLES
from .store import PostgresSession, PostgresStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresBackend",
    "PostgresSession",
    "PostgresStore",
]
