"""``activity_session``: the other shape, a whole agent turn run inside one activity
(no Temporal plugin for the SDK). A retried activity runs its turn again; its commit
lands once, because its batch id comes from the workflow and activity identity, never
from the attempt (``ids.py``, ``docs/temporal.md``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from temporalio import activity

from .._engine.session import BufferedSession
from .._engine.store import Store
from .._model.validate import validate_session_id
from .ids import activity_batch_id
from .worker import current_store

__all__ = ["ActivityTurn", "activity_session"]


@dataclass(frozen=True)
class ActivityTurn:
    """What :func:`activity_session` yields."""

    session: BufferedSession
    """The session to hand to ``Runner.run`` (staged; committed when the block ends)."""
    batch_id: str
    """The id this activity's commit is applied under, the same on every attempt."""
    committed: bool
    """``True``: an earlier attempt of this activity already committed its turn (it
    reached the database, then the attempt failed or its worker died). Running the turn
    again writes nothing more; the stored turn is ``session.get_items(turns=1)``."""


@asynccontextmanager
async def activity_session(
    session_id: str, *, store: Store[Any] | None = None, part: int = 1
) -> AsyncIterator[ActivityTurn]:
    """A session for one agent turn inside an activity, committed once.

    On normal exit the staged changes are committed as one batch with the id of
    (workflow id, run id, activity id, ``part``); on an exception they are rolled back
    and the exception propagates (Temporal retries the activity). ``store``: the
    worker's (:class:`~sessions.temporal.SessionsPlugin`) when ``None``. ``part``: which
    commit to this session the activity makes (1, 2, ...), when it makes several.
    """
    if not activity.in_activity():
        raise RuntimeError("activity_session() runs inside a Temporal activity only")
    session_id = validate_session_id(session_id)
    if store is None:
        store = await current_store()
    elif not isinstance(store, Store):
        raise TypeError(f"store must be a sessions Store or None, got {type(store).__name__}")
    info = activity.info()
    workflow_id, run_id = info.workflow_id, info.workflow_run_id
    if not workflow_id or not run_id:
        raise RuntimeError("activity_session() needs an activity a workflow started")
    batch_id = activity_batch_id(workflow_id, run_id, info.activity_id, part)
    session: BufferedSession = store.session(session_id)
    try:
        done = batch_id in await store.backend.applied(session_id, [batch_id])
        yield ActivityTurn(session, batch_id, done)
    except BaseException:
        if not session.closed and session.has_pending:
            await session.rollback()
        raise
    else:
        await session._commit_as(batch_id)
    finally:
        if session.has_pending:  # a commit that failed: the retry sends the same id
            await session.rollback()
        await session.close()
