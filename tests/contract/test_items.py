"""Contract lines 1-3 and 8, the parts specific to this package: item validation,
``session_settings``, ``limit`` validation, plain data only.

The storage semantics of these lines (snapshots, read-your-writes, ``limit``, staged
pops) are spec checks of ``sessions.testing``, run on every backend by
``tests/conformance/``. Every test here runs on every backend (the ``target`` fixture).
"""

from __future__ import annotations

import enum
import gc
import types
import uuid
from typing import Any

import pytest

from sessions import Store
from sessions.errors import InvalidItemError
from tests.helpers import msg
from tests.sdk import sdk_import


class Colour(enum.Enum):
    RED = "red"


# ------------------------------------------------------------------ line 1: add_items


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [
        ({"x": {1, 2}}, "dict"),
        ({"x": b"bytes"}, "dict"),
        ({"x": float("nan")}, "dict"),
        ({"x": float("inf")}, "dict"),
        ({"x": object()}, "dict"),
        ({"x": uuid.UUID(int=1)}, "dict"),
        ({"x": [Colour.RED]}, "dict"),
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


async def test_items_beyond_the_fast_encoder_are_stored_and_read_back_equal(
    store: Store[Any], sid: str
) -> None:
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    items = [
        {"n": 2**70, "m": -(2**64)},
        {"deep": deep},
        {"f": [1e16, 1e-7, -0.0, 5e-324], "t": "é \u2028 \x00"},
    ]
    session = store.session(sid)
    await session.add_items(items)
    await session.commit()
    assert await store.session(sid).get_items() == items


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


@pytest.mark.sdk_flow
async def test_limit_defaults_to_session_settings(store: Store[Any], sid: str) -> None:
    SessionSettings = sdk_import(
        "SessionSettings", "agents.memory.session_settings", "SessionSettings"
    )
    session = store.session(sid, session_settings=SessionSettings(limit=2))
    await session.add_items([msg("1"), msg("2"), msg("3")])
    await session.commit()
    assert await session.get_items() == [msg("2"), msg("3")]
    assert await session.get_items(limit=3) == [msg("1"), msg("2"), msg("3")]


@pytest.mark.sdk_flow
async def test_session_settings_as_a_dict_and_unknown_keys_refused(
    store: Store[Any], sid: str
) -> None:
    sdk_import("SessionSettings", "agents.memory.session_settings", "SessionSettings")
    session = store.session(sid, session_settings={"limit": 1})
    assert session.session_settings is not None and session.session_settings.limit == 1
    await session.add_items([msg("1"), msg("2")])
    await session.commit()
    assert await session.get_items() == [msg("2")]
    with pytest.raises(TypeError, match="Unknown session_settings settings: colour"):
        store.session(sid, session_settings={"limit": 1, "colour": "red"})


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
async def test_bad_limit_is_refused(store: Store[Any], sid: str, bad: Any) -> None:
    session = store.session(sid)
    with pytest.raises((TypeError, ValueError), match="limit"):
        await session.get_items(limit=bad)


# ------------------------------------------------------------------ line 8: plain data only


def _reaches(root: object, target: object, limit: int = 200_000) -> bool:
    """Whether ``target`` is reachable from ``root`` through references other than
    frames, code, modules and classes (bounded)."""
    skip = (types.FrameType, types.CodeType, types.ModuleType, type)
    seen: set[int] = set()
    stack = [root]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if obj is target:
            return True
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        stack.extend(gc.get_referents(obj))
    return False


async def test_session_holds_plain_text_only(store: Store[Any], sid: str) -> None:
    class Heavy:
        pass

    heavy = Heavy()
    session = store.session(sid)
    item: dict[str, Any] = {"role": "user", "content": "hi"}
    await session.add_items([item])
    with pytest.raises(InvalidItemError):
        await session.add_items([{"role": "user", "content": heavy}])
    _, _, staged = session._staging.view()
    assert staged and all(type(text) is str for text in staged)
    # Nothing reachable from the session (its attributes, staging, store, backend) is the
    # object. Frames are not followed: the running test's own frame holds it, and how long
    # an interpreter keeps a raised error's frames is not the session's doing.
    assert not _reaches(session, heavy), "the session holds a live object"


async def test_pydantic_objects_are_not_stored(store: Store[Any], sid: str) -> None:
    from pydantic import BaseModel

    class Part(BaseModel):
        text: str

    session = store.session(sid)
    with pytest.raises(InvalidItemError, match="item 0"):
        await session.add_items([{"role": "user", "content": Part(text="x")}])
    assert not session.has_pending
