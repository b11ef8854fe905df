"""What the session activities do against the worker's store: load, commit, and hide
the turns of a replaced run. No ``temporalio`` here (``worker.py`` wraps these as
activities), so each step can be read and tested on its own.
"""

from __future__ import annotations

from typing import Any

from .._engine.session import BufferedSession
from .._engine.store import Store
from .._model.serde import decode_item, encode_items
from .ids import parse_turn_tag, turn_tag
from .payloads import CommitRequest, CommitResult, LoadRequest, LoadResult

__all__ = ["commit", "hide_replaced", "load"]


async def hide_replaced(session: BufferedSession, lineage: str, next_position: int) -> int:
    """Hide the turns from the first one tagged with ``lineage`` at ``next_position`` or
    later on (and every turn after it): what a run that a reset replaced had committed
    past the point the reset went back to. Returns how many turns were hidden (kept, as
    a rewind keeps them: ``undo_rewind()`` brings them back)."""
    turns = await session.turns()
    for kept, turn in enumerate(turns):
        tag = parse_turn_tag(turn.run_id)
        if tag is not None and tag[0] == lineage and tag[1] >= next_position:
            return await session._hide_after_turn(kept)
    return 0


async def load(store: Store[Any], request: LoadRequest) -> LoadResult:
    """The latest ``request.limit`` items (all when ``None``), after hiding a replaced
    run's turns."""
    session: BufferedSession = store.session(request.session_id)
    try:
        hidden = await hide_replaced(session, request.lineage, request.next_position)
        items = await session.get_items(request.limit)
        return LoadResult(
            items=encode_items(items),
            complete=request.limit is None,
            trim=session.integrity != "off",
            hidden=hidden,
        )
    finally:
        await session.close()


async def commit(store: Store[Any], request: CommitRequest) -> CommitResult:
    """Apply the workflow's staged changes as one batch with the request's id: skipped
    when an earlier attempt applied it, else after hiding a replaced run's turns."""
    session: BufferedSession = store.session(request.session_id)
    backend = store.backend
    try:
        before = request.batch_id in await backend.applied(request.session_id, [request.batch_id])
        hidden = 0
        if not before:
            hidden = await hide_replaced(session, request.lineage, request.position)
            if request.clear:
                await session.clear_session()
            for _ in range(request.pops):
                await session.pop_item()
            session.set_run_id(turn_tag(request.lineage, request.position))
            await session.add_items([decode_item(text) for text in request.items])
            await session._commit_as(request.batch_id)
        quarantined = 0
        if request.items and session.integrity == "quarantine":
            entries = await store.read_quarantine(request.session_id)
            quarantined = sum(1 for entry in entries if entry.batch_id == request.batch_id)
        return CommitResult(applied_before=before, quarantined=quarantined, hidden=hidden)
    finally:
        if session.has_pending:
            await session.rollback()
        await session.close()
