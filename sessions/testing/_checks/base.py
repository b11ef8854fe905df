"""Base capabilities: the Agents SDK ``Session`` protocol. Every session must pass these.

A buffered session is committed where the protocol expects writes to be durable
(``ctx.flush``); everything else is the plain protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._capabilities import Capability
from .._spec import Context, check, expect, expect_equal, msg

__all__ = ["batch_items", "holding", "verify_batches"]


def batch_items(writer: int, batch: int, size: int) -> list[dict[str, Any]]:
    """The items of one writer's batch: ``"writer:batch:index"`` texts."""
    return [msg(f"{writer}:{batch}:{i}") for i in range(size)]


def verify_batches(items: list[Any], writers: int, batches: int, size: int) -> None:
    """Every batch of every writer present once, contiguous, and in each writer's order."""
    expect_equal(len(items), writers * batches * size, "number of items stored")
    next_batch = dict.fromkeys(range(writers), 0)
    for start in range(0, len(items), size):
        chunk = items[start : start + size]
        first = str(chunk[0].get("content", "")).split(":") if isinstance(chunk[0], dict) else []
        expect(len(first) == 3, f"item {start} is not one this check wrote: {chunk[0]!r}")
        writer, batch = int(first[0]), int(first[1])
        expect_equal(chunk, batch_items(writer, batch, size), f"items {start}..{start + size - 1}")
        expect(
            batch == next_batch[writer],
            f"writer {writer}: batch {batch} stored where batch {next_batch[writer]} was due "
            "(lost, duplicated or out of order)",
        )
        next_batch[writer] += 1


async def holding(ctx: Context, sid: str, *texts: str) -> Any:
    """A handle on ``sid`` whose storage holds ``texts``: written, then made durable
    (``ctx.flush``: committed, when the session is buffered)."""
    session = await ctx.open(sid)
    await session.add_items([msg(t) for t in texts])
    await ctx.flush(session)
    return session


async def popped(ctx: Context, sid: str, label: str) -> Any:
    """A handle on ``sid`` holding ``"1"``, ``"2"``, ``"3"`` whose ``pop_item()`` has
    returned ``"3"`` and which then reads ``"1"``, ``"2"`` (``label``: that read's name
    in a failure)."""
    session = await holding(ctx, sid, "1", "2", "3")
    expect_equal(await session.pop_item(), msg("3"), "pop_item()")
    expect_equal(await session.get_items(), [msg("1"), msg("2")], label)
    return session


# ------------------------------------------------------------------------ items


@check(Capability.ITEMS)
async def empty_session_reads_empty(ctx: Context) -> None:
    """A session nobody wrote to reads as empty, with or without a limit."""
    session = await ctx.open(ctx.new_id())
    expect_equal(await session.get_items(), [], "get_items() of a new session")
    expect_equal(await session.get_items(limit=3), [], "get_items(limit=3) of a new session")


@check(Capability.ITEMS)
async def items_round_trip_in_order(ctx: Context) -> None:
    """Items come back equal and in order, from the writer and from a fresh handle."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    nested = {
        "role": "user",
        "content": [{"type": "input_text", "text": 'h\u00e9llo \u2713 \U0001f680 "q" \\ \n end'}],
    }
    items = [msg("first"), nested, {"type": "message", "role": "assistant", "content": []}]
    await session.add_items(items)
    expect_equal(await session.get_items(), items, "get_items() after add_items")
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), items, "history read by a fresh handle")


@check(Capability.ITEMS)
async def add_items_snapshots_at_call_time(ctx: Context) -> None:
    """Mutating an item after add_items changes nothing stored or staged."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    item: dict[str, Any] = {"role": "user", "content": [{"type": "input_text", "text": "orig"}]}
    await session.add_items([item])
    item["content"][0]["text"] = "mutated"
    item["role"] = "assistant"
    expected = [{"role": "user", "content": [{"type": "input_text", "text": "orig"}]}]
    expect_equal(await session.get_items(), expected, "get_items() after mutating the item")
    await ctx.flush(session)
    item["content"].append("more")
    expect_equal(await ctx.stored(sid), expected, "history read by a fresh handle")


@check(Capability.ITEMS)
async def returned_items_are_copies(ctx: Context) -> None:
    """Mutating what get_items returned changes nothing."""
    session = await holding(ctx, ctx.new_id(), "a")
    first = await session.get_items()
    first[0]["content"] = "changed"
    expect_equal(await session.get_items(), [msg("a")], "get_items() after mutating a result")


@check(Capability.ITEMS)
async def adding_no_items_changes_nothing(ctx: Context) -> None:
    """add_items([]) is accepted and adds nothing."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    await session.add_items([])
    await session.add_items([msg("1")])
    await session.add_items([])
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), [msg("1")], "history after add_items([])")


async def _two_sessions(ctx: Context) -> tuple[str, str, Any]:
    """Two new session ids holding ``a`` and ``b``, and a handle on the first."""
    a, b = ctx.new_id(), ctx.new_id()
    one, two = await ctx.open(a), await ctx.open(b)
    await one.add_items([msg("a")])
    await two.add_items([msg("b")])
    await ctx.flush(one)
    await ctx.flush(two)
    return a, b, one


@check(Capability.ITEMS)
async def sessions_are_isolated_by_id(ctx: Context) -> None:
    """Two session ids on the same storage never see each other's items."""
    a, b, _ = await _two_sessions(ctx)
    expect_equal(await ctx.stored(a), [msg("a")], "history of the first session")
    expect_equal(await ctx.stored(b), [msg("b")], "history of the second session")


# ------------------------------------------------------------------------ limit


@check(Capability.LIMIT)
async def limit_returns_latest_n_in_order(ctx: Context) -> None:
    """get_items(limit=n) is the latest n items, oldest first, for every n."""
    session = await ctx.open(ctx.new_id())
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await ctx.flush(session)
    await session.add_items([msg("4"), msg("5")])  # staged, if the session buffers
    everything = [msg(str(i)) for i in range(1, 6)]
    for limit in (0, 1, 2, 3, 4, 5, 6, 100):
        expected = everything[-limit:] if limit else []
        expect_equal(await session.get_items(limit=limit), expected, f"get_items(limit={limit})")


@check(Capability.LIMIT)
async def limit_applies_to_stored_history(ctx: Context) -> None:
    """A fresh handle's get_items(limit=n) is the latest n stored items."""
    sid = ctx.new_id()
    await holding(ctx, sid, *map(str, range(10)))
    other = await ctx.open(sid)
    expect_equal(await other.get_items(limit=3), [msg("7"), msg("8"), msg("9")], "limit=3")
    expect_equal(await other.get_items(limit=1), [msg("9")], "limit=1")


# ------------------------------------------------------------------------ pop_item


@check(Capability.POP)
async def pop_returns_the_newest_item_and_removes_it(ctx: Context) -> None:
    """pop_item returns the newest item; it is gone from the history."""
    sid = ctx.new_id()
    session = await popped(ctx, sid, "get_items() after the pop")
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), [msg("1"), msg("2")], "history after the pop")


@check(Capability.POP)
async def pop_of_an_empty_session_returns_none(ctx: Context) -> None:
    """pop_item on an empty session returns None and changes nothing."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    expect_equal(await session.pop_item(), None, "pop_item() of a new session")
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), [], "history after popping nothing")


@check(Capability.POP)
async def popping_everything_then_adding_works(ctx: Context) -> None:
    """Popping every item empties the session; items added afterwards are kept."""
    sid = ctx.new_id()
    session = await holding(ctx, sid, "1", "2")
    popped = [await session.pop_item() for _ in range(3)]
    expect_equal(popped, [msg("2"), msg("1"), None], "three pop_item() calls")
    await session.add_items([msg("x")])
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), [msg("x")], "history after popping all, then adding")


# ------------------------------------------------------------------------ clear_session


@check(Capability.CLEAR)
async def clear_removes_the_whole_history(ctx: Context) -> None:
    """clear_session empties the session; it takes new items afterwards."""
    sid = ctx.new_id()
    session = await holding(ctx, sid, "1", "2")
    await session.clear_session()
    expect_equal(await session.get_items(), [], "get_items() after clear_session()")
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), [], "history after clear_session()")
    await session.add_items([msg("3")])
    await ctx.flush(session)
    expect_equal(await ctx.stored(sid), [msg("3")], "history after clearing, then adding")


@check(Capability.CLEAR)
async def clear_leaves_other_sessions_alone(ctx: Context) -> None:
    """Clearing one session id leaves every other one untouched."""
    _, b, one = await _two_sessions(ctx)
    await one.clear_session()
    await ctx.flush(one)
    expect_equal(await ctx.stored(b), [msg("b")], "history of the session not cleared")


# ------------------------------------------------------------------------ ordering


@check(Capability.ORDERING)
async def many_writes_keep_their_order(ctx: Context) -> None:
    """Twelve writes of one to three items each are read back in call order."""
    sid = ctx.new_id()
    session = await ctx.open(sid)
    written: list[Any] = []
    for call in range(12):
        items = [msg(f"{call}.{i}") for i in range(call % 3 + 1)]
        await session.add_items(items)
        written.extend(items)
        if call % 2:
            await ctx.flush(session)
    await ctx.flush(session)
    expect_equal(await session.get_items(), written, "get_items() of the writer")
    expect_equal(await ctx.stored(sid), written, "history read by a fresh handle")


@check(Capability.ORDERING)
async def concurrent_writers_keep_batches_contiguous(ctx: Context) -> None:
    """Six writers on three handles: each batch whole, each writer's in order."""
    sid = ctx.new_id()
    handles = [await ctx.open(sid) for _ in range(3)]
    writers, batches, size = 6, 8, 5

    async def writer(w: int) -> None:
        session = handles[w % len(handles)]
        for b in range(batches):
            await session.add_items(batch_items(w, b, size))
            await ctx.flush(session)

    await asyncio.gather(*(writer(w) for w in range(writers)))
    verify_batches(await ctx.stored(sid), writers, batches, size)
