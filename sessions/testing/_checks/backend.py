"""Extended capabilities of sessions on a ``sessions.Backend``: atomic and idempotent apply.

The atomic checks hand batches to the backend themselves, through the commit path of
the session's store (several batches in one ``Backend.apply`` call; a conflict is not
retried), because only there can a failure be made to happen *after* part of a
transaction was written without knowing the database: a batch that pops a row which is already gone must fail, and every batch of
that ``apply`` call must leave no trace. The idempotency checks go through the session: a
write whose reply is lost after it was applied, then ``commit()`` again.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..._engine.commit import write_batches
from ..._engine.store import Store
from ..._model.backend import Batch
from .._capabilities import Capability
from .._spec import ConformanceFailure, Context, check, expect, expect_equal, msg
from .._subject import WriteHooks

__all__: list[str] = []


async def _apply(store: Store[Any], sid: str, batches: list[Batch]) -> None:
    """``Backend.apply`` of ``batches`` in one call, through the commit path."""
    await write_batches(store, sid, batches)


def _batch(*, items: tuple[str, ...] = (), pops: tuple[int, ...] = ()) -> Batch:
    return Batch(uuid.uuid4().hex, False, pops, items)


async def _stored_rows(ctx: Context, sid: str, *texts: str) -> tuple[Store[Any], list[int]]:
    """Commit ``texts`` to ``sid``; the session's store and the keys of the stored rows."""
    session = await ctx.open(sid)
    await session.add_items([msg(t) for t in texts])
    await session.commit()
    store = await ctx.store(session)
    keys = [key for key, _ in await store.backend.load(sid, None)]
    expect_equal(len(keys), len(texts), "rows loaded after the commit")
    return store, keys


async def _apply_must_fail(store: Store[Any], sid: str, batches: list[Batch]) -> None:
    try:
        await _apply(store, sid, batches)
    except Exception:  # noqa: BLE001 - a ConflictError is due; what counts is what stays
        return
    raise ConformanceFailure("apply() of a batch popping a row that is gone did not raise")


@check(Capability.ATOMIC_BATCH)
async def apply_of_several_batches_is_all_or_nothing(ctx: Context) -> None:
    """A later batch that fails undoes the earlier batches of the same apply() call."""
    sid = ctx.new_id()
    store, keys = await _stored_rows(ctx, sid, "1", "2", "3")
    await _apply(store, sid, [_batch(pops=(keys[-1],))])  # row 3 is gone now
    good, bad = _batch(items=('{"role":"user","content":"a"}',)), _batch(pops=(keys[-1],))
    await _apply_must_fail(store, sid, [good, bad])
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after the failed apply")
    expect_equal(
        await store.backend.applied(sid, [good.batch_id, bad.batch_id]), set(), "applied()"
    )


@check(Capability.ATOMIC_BATCH)
async def a_batch_with_a_missing_pop_applies_nothing(ctx: Context) -> None:
    """One batch popping a present and a missing row (and adding) changes nothing."""
    sid = ctx.new_id()
    store, keys = await _stored_rows(ctx, sid, "1", "2", "3")
    await _apply(store, sid, [_batch(pops=(keys[-1],))])
    torn = _batch(pops=(keys[-2], keys[-1]), items=('{"role":"user","content":"x"}',))
    await _apply_must_fail(store, sid, [torn])
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after the failed apply")
    await _apply(store, sid, [_batch(pops=(keys[-2],))])  # still usable afterwards
    expect_equal(await ctx.stored(sid), [msg("1")], "history after a good apply")


@check(Capability.IDEMPOTENT_RETRY)
async def backend_skips_a_batch_it_already_applied(ctx: Context) -> None:
    """apply() of a batch id already applied adds nothing; applied() reports the id."""
    sid = ctx.new_id()
    store, _ = await _stored_rows(ctx, sid, "1")
    again = _batch(items=('{"role":"user","content":"2"}',))
    await _apply(store, sid, [again])
    await _apply(store, sid, [again])
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after applying twice")
    unknown = uuid.uuid4().hex
    expect_equal(
        await store.backend.applied(sid, [again.batch_id, unknown]), {again.batch_id}, "ids"
    )


def _lose_first_reply() -> WriteHooks:
    replies: list[Any] = []

    async def lose() -> None:
        if not replies:
            replies.append(None)
            raise ConnectionResetError("reply lost after the write (injected by the check)")

    return WriteHooks(after=lose)


@check(Capability.IDEMPOTENT_RETRY, needs_hooks=True)
async def commit_retried_after_an_unknown_outcome_applies_once(ctx: Context) -> None:
    """commit() again after a commit whose reply was lost stores the batch once."""
    sid = ctx.new_id()
    session = await ctx.open_hooked(sid, _lose_first_reply())
    await session.add_items([msg("1"), msg("2")])
    try:
        await session.commit()
    except Exception as exc:  # noqa: BLE001 - reported below if it claims a known outcome
        expect(
            getattr(exc, "outcome_known", False) is not True,
            f"the failed commit claims a known outcome: {exc}",
        )
        expect(session.has_pending, "the changes are gone after a commit of unknown outcome")
        await session.commit()
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after the retry")
    expect_equal(await session.get_items(), [msg("1"), msg("2")], "get_items() of the writer")


@check(Capability.IDEMPOTENT_RETRY, needs_hooks=True)
async def unknown_outcome_is_resolved_before_reads(ctx: Context) -> None:
    """After a lost reply, reads show the applied batch once, not twice."""
    sid = ctx.new_id()
    session = await ctx.open_hooked(sid, _lose_first_reply())
    await session.add_items([msg("1")])
    try:
        await session.commit()
    except Exception:  # noqa: BLE001 - either outcome is fine; the reads must be exact
        pass
    expect_equal(await session.get_items(), [msg("1")], "get_items() after the lost reply")
    expect(not session.has_pending, "the applied batch is still staged after the read")
