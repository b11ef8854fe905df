"""Contract lines 1-3 and 8: staging, read-your-writes, limit, pop, plain data.

Every test runs on every backend (the ``target`` fixture).
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from agents.memory.session_settings import SessionSettings

from sessions import Store
from sessions.errors import InvalidItemError
from tests.conftest import Target


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


async def stored(target: Target, session_id: str) -> list[Any]:
    """What a fresh store (a new connection) sees: the durable history."""
    other = await target.open()
    return await other.session(session_id).get_items()


# ------------------------------------------------------------------ line 1: add_items


async def test_add_items_snapshots_at_call_time(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    item = {"role": "user", "content": [{"type": "input_text", "text": "original"}]}
    await session.add_items([item])
    item["content"][0]["text"] = "mutated"
    item["role"] = "assistant"
    expected = [{"role": "user", "content": [{"type": "input_text", "text": "original"}]}]
    assert await session.get_items() == expected
    await session.commit()
    item["content"].append("more")
    assert await stored(target, sid) == expected


async def test_returned_items_are_copies(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("a")])
    first = await session.get_items()
    first[0]["content"] = "changed"
    assert await session.get_items() == [msg("a")]


async def test_add_items_never_suspends_when_buffered(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    coro = session.add_items([msg("a"), msg("b")])
    # Driving the coroutine one step must finish it: it has no suspension point at all,
    # so no cancellation can land inside it.
    with pytest.raises(StopIteration):
        coro.send(None)
    assert session.pending.items == 2


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [
        ({"x": {1, 2}}, "dict"),
        ({"x": b"bytes"}, "dict"),
        ({"x": float("nan")}, "dict"),
        ({"x": float("inf")}, "dict"),
        ({"x": object()}, "dict"),
        ({1: "non-str key"}, "dict"),
        ({"x": "lone \ud800 surrogate"}, "dict"),
        ({"x": "\ud800\udc00"}, "dict"),
        ("just a string", "str"),
        (["a", "list"], "list"),
        (None, "NoneType"),
    ],
)
async def test_invalid_item_raises_typeerror_naming_index_and_type_and_stages_nothing(
    store: Store[Any], sid: str, bad: Any, type_name: str
) -> None:
    session = store.session(sid)
    await session.add_items([msg("kept")])
    with pytest.raises(TypeError) as info:
        await session.add_items([msg("ok"), msg("ok too"), bad])
    assert isinstance(info.value, InvalidItemError)
    assert info.value.index == 2
    assert info.value.item_type == type_name
    assert "item 2" in str(info.value) and type_name in str(info.value)
    assert session.pending.items == 1
    assert await session.get_items() == [msg("kept")]


async def test_add_items_rejects_a_non_list(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    with pytest.raises(TypeError, match="list of items"):
        await session.add_items(msg("not wrapped in a list"))  # type: ignore[arg-type]
    assert not session.has_pending


async def test_circular_item_is_refused(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    item: dict[str, Any] = {"role": "user"}
    item["self"] = item
    with pytest.raises(InvalidItemError, match="item 0"):
        await session.add_items([item])
    assert not session.has_pending


# ------------------------------------------------------------------ line 2: read-your-writes, limit


async def test_reads_see_committed_then_staged(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2")])
    await session.commit()
    await session.add_items([msg("3")])
    assert await session.get_items() == [msg("1"), msg("2"), msg("3")]
    assert session.pending.items == 1


async def test_staged_clear_hides_committed_history(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    await session.add_items([msg("old")])
    await session.commit()
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items([msg("new")])
    assert await session.get_items() == [msg("new")]
    assert await stored(target, sid) == [msg("old")]
    await session.commit()
    assert await stored(target, sid) == [msg("new")]


async def test_staged_pop_removes_the_tail(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await session.commit()
    assert await session.pop_item() == msg("3")
    assert await session.get_items() == [msg("1"), msg("2")]
    assert await session.get_items(limit=1) == [msg("2")]


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 4, 5, 6, 100])
async def test_limit_returns_latest_n_in_order_across_committed_and_staged(
    store: Store[Any], sid: str, limit: int
) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await session.commit()
    await session.add_items([msg("4"), msg("5")])
    everything = [msg(str(i)) for i in range(1, 6)]
    expected = everything[-limit:] if limit else []
    assert await session.get_items(limit=limit) == expected


async def test_limit_defaults_to_session_settings(store: Store[Any], sid: str) -> None:
    session = store.session(sid, session_settings=SessionSettings(limit=2))
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await session.commit()
    assert await session.get_items() == [msg("2"), msg("3")]
    assert await session.get_items(limit=3) == [msg("1"), msg("2"), msg("3")]


async def test_limit_with_staged_pops_of_committed_items(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg(str(i)) for i in range(10)])
    await session.commit()
    await session.pop_item()
    await session.pop_item()
    assert await session.get_items(limit=3) == [msg("5"), msg("6"), msg("7")]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
async def test_bad_limit_is_refused(store: Store[Any], sid: str, bad: Any) -> None:
    session = store.session(sid)
    with pytest.raises((TypeError, ValueError), match="limit"):
        await session.get_items(limit=bad)


async def test_empty_session_reads_empty(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    assert await session.get_items() == []
    assert await session.get_items(limit=5) == []
    assert await session.pop_item() is None


# ------------------------------------------------------------------ line 3: pop_item


async def test_pop_returns_staged_items_first_then_committed(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = store.session(sid)
    await session.add_items([msg("c1"), msg("c2")])
    await session.commit()
    await session.add_items([msg("s1")])
    assert await session.pop_item() == msg("s1")
    assert await session.pop_item() == msg("c2")
    assert session.pending.pops == 1
    assert await stored(target, sid) == [msg("c1"), msg("c2")]  # staged, not applied yet
    await session.commit()
    assert await stored(target, sid) == [msg("c1")]


async def test_pop_then_rollback_restores_committed_item(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2")])
    await session.commit()
    assert await session.pop_item() == msg("2")
    await session.rollback()
    assert await session.get_items() == [msg("1"), msg("2")]


async def test_pop_after_staged_clear_returns_none(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("1")])
    await session.commit()
    await session.clear_session()
    assert await session.pop_item() is None


async def test_pops_then_adds_in_one_batch(store: Store[Any], target: Target, sid: str) -> None:
    session = store.session(sid)
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await session.commit()
    await session.pop_item()
    await session.pop_item()
    await session.add_items([msg("x"), msg("y")])
    assert await session.get_items() == [msg("1"), msg("x"), msg("y")]
    await session.commit()
    assert await stored(target, sid) == [msg("1"), msg("x"), msg("y")]


# ------------------------------------------------------------------ line 8: plain data only


async def test_session_holds_plain_text_only(store: Store[Any], sid: str) -> None:
    class Heavy:
        pass

    heavy = Heavy()
    ref = weakref.ref(heavy)
    session = store.session(sid)
    item: dict[str, Any] = {"role": "user", "content": "hi"}
    await session.add_items([item])
    with pytest.raises(InvalidItemError):
        await session.add_items([{"role": "user", "content": heavy}])
    _, _, staged = session._staging.view()
    assert staged and all(type(text) is str for text in staged)
    del heavy
    gc.collect()
    assert ref() is None, "the session kept a live object alive"


async def test_pydantic_objects_are_not_stored(store: Store[Any], sid: str) -> None:
    from pydantic import BaseModel

    class Part(BaseModel):
        text: str

    session = store.session(sid)
    with pytest.raises(InvalidItemError, match="item 0"):
        await session.add_items([{"role": "user", "content": Part(text="x")}])
    assert not session.has_pending
