"""Extended capabilities of buffered sessions: staging, staged pops, the shielded commit.

"Stored" below always means what a fresh handle reads: the durable history.
"""

from __future__ import annotations

import asyncio

from .._capabilities import Capability
from .._spec import ConformanceFailure, Context, check, expect, expect_equal, msg
from .._subject import WriteHooks
from .base import holding, popped

__all__: list[str] = []


# ------------------------------------------------------------------------ buffered


@check(Capability.BUFFERED)
async def writes_stay_local_until_commit(ctx: Context) -> None:
    """Staged items are invisible to other handles until commit(), then durable."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    await session.add_items([msg("1")])
    expect(session.has_pending, "has_pending is False right after add_items")
    expect_equal(await ctx.stored(sid), [], "history before commit()")
    await session.commit()
    expect(not session.has_pending, "has_pending is still True after commit()")
    expect_equal(await ctx.stored(sid), [msg("1")], "history after commit()")


@check(Capability.BUFFERED)
async def add_items_never_suspends_when_buffered(ctx: Context) -> None:
    """add_items finishes in one step: no cancellation can land inside it."""
    session = await ctx.open(ctx.new_id())
    coro = session.add_items([msg("a"), msg("b")])
    try:
        coro.send(None)
    except StopIteration:
        pass
    else:
        coro.close()
        raise ConformanceFailure("add_items suspended: a cancellation could interrupt it")
    expect(session.has_pending, "nothing staged after add_items")


@check(Capability.BUFFERED)
async def reads_see_committed_then_staged(ctx: Context) -> None:
    """get_items returns the stored history followed by the staged items."""
    session = await ctx.open(ctx.new_id())
    await session.add_items([msg("1"), msg("2")])
    await session.commit()
    await session.add_items([msg("3")])
    expect_equal(await session.get_items(), [msg("1"), msg("2"), msg("3")], "get_items()")


@check(Capability.BUFFERED)
async def staged_clear_hides_committed_history(ctx: Context) -> None:
    """A staged clear hides the stored history at once and removes it at commit."""
    sid = ctx.new_id()
    session = await holding(ctx, sid, "old")
    await session.clear_session()
    expect_equal(await session.get_items(), [], "get_items() after a staged clear")
    await session.add_items([msg("new")])
    expect_equal(await session.get_items(), [msg("new")], "get_items() after clear + add")
    expect_equal(await ctx.stored(sid), [msg("old")], "history before commit()")
    await session.commit()
    expect_equal(await ctx.stored(sid), [msg("new")], "history after commit()")


@check(Capability.BUFFERED)
async def rollback_discards_staged_changes(ctx: Context) -> None:
    """rollback() drops staged items and a staged clear; the stored history stays."""
    sid = ctx.new_id()
    session = await holding(ctx, sid, "1")
    await session.add_items([msg("2")])
    await session.clear_session()
    await session.rollback()
    expect(not session.has_pending, "has_pending is True after rollback()")
    expect_equal(await session.get_items(), [msg("1")], "get_items() after rollback()")
    await session.commit()
    expect_equal(await ctx.stored(sid), [msg("1")], "history after rollback() + commit()")


@check(Capability.BUFFERED)
async def commit_with_nothing_staged_changes_nothing(ctx: Context) -> None:
    """commit() with nothing staged, or again after a commit, writes nothing more."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    await session.commit()
    await session.add_items([msg("1")])
    await session.commit()
    await session.commit()
    expect_equal(await ctx.stored(sid), [msg("1")], "history after repeated commit()")


@check(Capability.BUFFERED)
async def commit_is_durable_when_it_returns(ctx: Context) -> None:
    """What commit() returned for is read by a handle opened after the writer closed."""
    sid = ctx.new_id()
    async with ctx.subject.open(sid) as session:
        await session.add_items([msg("1"), msg("2")])
        await session.commit()
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after close")


@check(Capability.BUFFERED)
async def transaction_commits_on_normal_exit(ctx: Context) -> None:
    """async with session.transaction(): commits when the block ends normally."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    async with session.transaction():
        await session.add_items([msg("1")])
    expect_equal(await ctx.stored(sid), [msg("1")], "history after the block")


@check(Capability.BUFFERED)
async def transaction_rolls_back_on_exception(ctx: Context) -> None:
    """An exception leaving the transaction() block rolls the staged changes back."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    try:
        async with session.transaction():
            await session.add_items([msg("1")])
            raise LookupError("raised inside the block by the check")
    except LookupError:
        pass
    expect(not session.has_pending, "changes still staged after the block raised")
    expect_equal(await ctx.stored(sid), [], "history after the block raised")


@check(Capability.BUFFERED)
async def transaction_rolls_back_on_cancellation(ctx: Context) -> None:
    """A task cancelled inside transaction() leaves nothing staged or stored."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    started = asyncio.Event()

    async def work() -> None:
        async with session.transaction():
            await session.add_items([msg("1")])
            started.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(work())
    await started.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    expect(task.cancelled(), "the cancelled task did not end cancelled")
    expect(not session.has_pending, "changes still staged after the cancellation")
    expect_equal(await ctx.stored(sid), [], "history after the cancellation")


# ------------------------------------------------------------------------ staged pops


@check(Capability.STAGED_POPS)
async def staged_pop_removes_the_tail(ctx: Context) -> None:
    """A pop of stored history shows at once in reads and reaches storage at commit."""
    sid = ctx.new_id()
    session = await popped(ctx, sid, "get_items()")
    expect_equal(await session.get_items(limit=1), [msg("2")], "get_items(limit=1)")
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2"), msg("3")], "history before commit")
    await session.commit()
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after commit()")


@check(Capability.STAGED_POPS)
async def pop_returns_staged_items_first_then_committed(ctx: Context) -> None:
    """pop_item takes staged items first, then stored ones (staged until commit)."""
    sid = ctx.new_id()
    session = await holding(ctx, sid, "c1", "c2")
    await session.add_items([msg("s1")])
    expect_equal(await session.pop_item(), msg("s1"), "first pop_item()")
    expect_equal(await session.pop_item(), msg("c2"), "second pop_item()")
    expect_equal(await ctx.stored(sid), [msg("c1"), msg("c2")], "history before commit")
    await session.commit()
    expect_equal(await ctx.stored(sid), [msg("c1")], "history after commit()")


@check(Capability.STAGED_POPS)
async def pop_then_rollback_restores_committed_item(ctx: Context) -> None:
    """rollback() after popping stored items brings them back."""
    session = await holding(ctx, ctx.new_id(), "1", "2")
    expect_equal(await session.pop_item(), msg("2"), "pop_item()")
    await session.rollback()
    expect_equal(await session.get_items(), [msg("1"), msg("2")], "get_items() after rollback")


@check(Capability.STAGED_POPS)
async def pop_after_staged_clear_returns_none(ctx: Context) -> None:
    """After a staged clear there is nothing left to pop."""
    session = await holding(ctx, ctx.new_id(), "1")
    await session.clear_session()
    expect_equal(await session.pop_item(), None, "pop_item() after a staged clear")


@check(Capability.STAGED_POPS)
async def pops_then_adds_in_one_batch(ctx: Context) -> None:
    """Staged pops of stored items and staged adds are committed together, in order."""
    sid = ctx.new_id()
    session = await holding(ctx, sid, "1", "2", "3")
    await session.pop_item()
    await session.pop_item()
    await session.add_items([msg("x"), msg("y")])
    expected = [msg("1"), msg("x"), msg("y")]
    expect_equal(await session.get_items(), expected, "get_items() before commit")
    await session.commit()
    expect_equal(await ctx.stored(sid), expected, "history after commit()")


@check(Capability.STAGED_POPS)
async def limit_with_staged_pops_of_committed_items(ctx: Context) -> None:
    """get_items(limit) skips stored items whose pop is staged."""
    session = await holding(ctx, ctx.new_id(), *(str(i) for i in range(10)))
    await session.pop_item()
    await session.pop_item()
    expect_equal(await session.get_items(limit=3), [msg("5"), msg("6"), msg("7")], "limit=3")


@check(Capability.STAGED_POPS)
async def two_handles_popping_one_item_conflict(ctx: Context) -> None:
    """When two handles pop the same stored item, the second commit fails, removing nothing."""
    sid = ctx.new_id()
    first = await holding(ctx, sid, "1", "2", "3")
    second = await ctx.open(sid)
    expect_equal(await first.pop_item(), msg("3"), "pop_item() of the first handle")
    expect_equal(await second.pop_item(), msg("3"), "pop_item() of the second handle")
    await second.commit()
    try:
        await first.commit()
    except Exception:  # noqa: BLE001 - any error will do; what counts is what is stored
        pass
    else:
        raise ConformanceFailure("the second commit of a pop of the same item succeeded")
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after the conflict")
    await first.rollback()
    expect_equal(await first.get_items(), [msg("1"), msg("2")], "get_items() after rollback")


# ------------------------------------------------------------------------ shielded commit


def _gate() -> tuple[WriteHooks, asyncio.Event, asyncio.Event]:
    """Hooks holding every write at its start: ``entered`` is set there, ``release`` frees it."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        entered.set()
        await release.wait()

    return WriteHooks(before=hold), entered, release


@check(Capability.SHIELDED_COMMIT, needs_hooks=True)
async def commit_is_shielded_from_cancellation(ctx: Context) -> None:
    """A commit cancelled twice while in flight runs to its outcome, then re-raises."""
    sid = ctx.new_id()
    hooks, entered, release = _gate()
    session = await ctx.open_hooked(sid, hooks)
    ctx.defer(release.set)  # never leave the write held, even when the check fails
    await session.add_items([msg("1"), msg("2"), msg("3")])
    task = asyncio.ensure_future(session.commit())
    await entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    expect(not task.done(), "commit() returned before its outcome was known")
    release.set()
    await asyncio.gather(task, return_exceptions=True)
    expect(task.cancelled(), "the cancelled commit() did not re-raise CancelledError")
    expect(not session.has_pending, "changes still staged after the commit ran")
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2"), msg("3")], "history")


@check(Capability.SHIELDED_COMMIT, needs_hooks=True)
async def commit_under_timeout_still_completes(ctx: Context) -> None:
    """A commit outlasting asyncio.wait_for's timeout still completes; then TimeoutError."""
    sid = ctx.new_id()

    async def slow() -> None:
        await asyncio.sleep(0.2)

    session = await ctx.open_hooked(sid, WriteHooks(before=slow))
    await session.add_items([msg("x")])
    try:
        await asyncio.wait_for(session.commit(), 0.01)
    except asyncio.TimeoutError:
        pass
    else:
        raise ConformanceFailure("commit() finished within 0.01 s though its write took 0.2 s")
    expect(not session.has_pending, "changes still staged after the commit ran")
    expect_equal(await ctx.stored(sid), [msg("x")], "history")


@check(Capability.SHIELDED_COMMIT, needs_hooks=True)
async def items_added_while_a_commit_is_in_flight_stay_staged(ctx: Context) -> None:
    """Items added during a commit are not part of it; they stay staged for the next."""
    sid = ctx.new_id()
    hooks, entered, release = _gate()
    session = await ctx.open_hooked(sid, hooks)
    ctx.defer(release.set)
    await session.add_items([msg("first")])
    task = asyncio.ensure_future(session.commit())
    await entered.wait()
    await session.add_items([msg("second")])
    release.set()
    await task
    expect_equal(await ctx.stored(sid), [msg("first")], "history after the first commit")
    expect(session.has_pending, "the item added during the commit is not staged")
    expect_equal(await session.get_items(), [msg("first"), msg("second")], "get_items()")
    await session.commit()
    expect_equal(await ctx.stored(sid), [msg("first"), msg("second")], "history at the end")
