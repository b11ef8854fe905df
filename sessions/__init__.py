"""txsessions: conversation-history sessions for the OpenAI Agents SDK that never
lose or tear history.

Writes are staged in memory and made durable by one explicit, atomic, idempotent,
cancellation-shielded ``commit()``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors
from ._engine.branching import Branch
from ._engine.session import BufferedSession, RunStateRecord
from ._engine.store import Store
from ._model.backend import (
    AdminBackend,
    Backend,
    Batch,
    CatalogueBackend,
    QuarantineEntry,
    SessionFilter,
    SessionInfo,
    TurnUsage,
)
from ._model.options import StoreOptions
from ._model.policy import RetryPolicy
from ._model.staging import PendingChanges
from ._model.turns import Turn
from .memory import MemoryBackend, MemorySession, MemoryStore
from .sqlite import SQLiteSession, SQLiteStore

if TYPE_CHECKING:
    from ._tools.url import open_store
    from .postgres import PostgresSession, PostgresStore
    from .wrapper import TransactionalSession

__all__ = [
    "AdminBackend",
    "Backend",
    "Batch",
    "Branch",
    "BufferedSession",
    "CatalogueBackend",
    "MemoryBackend",
    "MemorySession",
    "MemoryStore",
    "PendingChanges",
    "PostgresSession",
    "PostgresStore",
    "QuarantineEntry",
    "RetryPolicy",
    "RunStateRecord",
    "SQLiteSession",
    "SQLiteStore",
    "SessionFilter",
    "SessionInfo",
    "Store",
    "StoreOptions",
    "TransactionalSession",
    "Turn",
    "TurnUsage",
    "errors",
    "open_store",
]

__version__ = "0.1.0"

# Imported on first use: the PostgreSQL backend needs the optional asyncpg driver.
_LAZY = {
    "PostgresSession": (".postgres", "postgres"),
    "PostgresStore": (".postgres", "postgres"),
    "TransactionalSession": (".wrapper", None),
    "open_store": ("._tools.url", None),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, extra = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'sessions' has no attribute {name!r}") from None
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:
        if extra is None:
            raise
        raise ImportError(
            f"sessions.{name} needs an optional dependency ({exc.name}): "
            f"pip install 'txsessions[{extra}]'"
        ) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value
