"""txsessions: conversation-history sessions for the OpenAI Agents SDK that never
lose or tear history.

Writes are staged in memory and made durable by one explicit, atomic, idempotent,
cancellation-shielded ``commit()``.
"""

from __future__ import annotations

from . import errors
from ._backend import Backend, Batch, SessionInfo
from ._core import BufferedSession, PendingChanges, RetryPolicy
from ._store import Store
from .sqlite import SQLiteSession, SQLiteStore

__all__ = [
    "Backend",
    "Batch",
    "BufferedSession",
    "PendingChanges",
    "RetryPolicy",
    "SQLiteSession",
    "SQLiteStore",
    "SessionInfo",
    "Store",
    "errors",
]

__version__ = "0.1.0"
