"""What must hold after every step: fresh readers, listings and counts equal the model."""

from __future__ import annotations

import json
from typing import Any

from sessions._model.turns import build_turns, window_turns

from .harness import POOL, USERS, Harness, skip
from .spec import ZERO, Item, SessionModel, defects, info_of
from .world import World


class Violation(AssertionError):
    """The implementation disagrees with the model."""


def expect(what: str, got: Any, want: Any) -> None:
    if got != want:
        raise Violation(f"{what}: got {got!r}, the model says {want!r}")


def check_read(what: str, items: list[Item]) -> None:
    """Every read is valid input: no item twice, no output without its call. A call
    without its output that a later turn went past may be read (docs/history.md: a
    stored call left pending is not judged at a later commit; the SDK drops calls
    without outputs when it builds the next input)."""
    texts = [json.dumps(i, sort_keys=True) for i in items]
    if len(set(texts)) != len(texts):
        raise Violation(f"{what}: an item appears twice: {items!r}")
    found = {d for d in defects(items) if d[0] != "missing_output"}
    if found:
        raise Violation(f"{what}: not valid input ({sorted(found)}): {items!r}")


def info_fields(info: Any) -> dict[str, Any]:
    return {
        "user_id": info.user_id,
        "title": info.title,
        "tags": info.tags or None,
        "metadata": info.metadata,
        "ttl": info.ttl,
    }


def model_info(sess: SessionModel, harness: Harness) -> dict[str, Any]:
    fields = info_of(sess)
    if fields["user_id"] is not None:
        fields["user_id"] = harness.uid(fields["user_id"])
    fields["tags"] = tuple(sorted(fields["tags"])) if fields["tags"] else None
    return fields


async def check_session(harness: Harness, world: World, sid: str, store_index: int) -> None:
    store = harness.stores[store_index]
    sess = world.s(sid)
    reader = store.session(harness.rid(sid))
    items = await reader.get_items()
    check_read(f"get_items() of {sid}", items)
    expect(f"get_items() of {sid}", items, sess.items())
    turns = await reader.turns()
    expect(
        f"turns() of {sid}",
        [(t.number, t.items, t.pending, t.run_id) for t in turns],
        [(n, len(t.items), False, t.run_id) for n, t in enumerate(sess.turns, 1)],
    )
    await check_turn_index(store, harness.rid(sid), sid)
    info = await store.session_info(harness.rid(sid))
    expect(f"session_info({sid}) exists", info is not None, sess.exists)
    usage = (await reader.usage()).values()
    expect(f"usage() of {sid}", usage, sess.usage if sess.exists else ZERO)
    branches = [(b.session_id, b.at_turn) for b in await reader.branches()]
    if not (skip("source_branches") and sess.life > 0):
        expect(f"branches() of {sid}", branches, [(harness.rid(d), n) for d, n in sess.branches])
    if info is None:
        return
    expect(f"catalogue of {sid}", info_fields(info), model_info(sess, harness))
    if sess.version is None:
        sess.version = info.version  # a fork or an import: the docs give no count
    expect(f"SessionInfo.version of {sid}", info.version, sess.version)
    expect(f"item_count of {sid}", info.item_count, len(sess.items()))


async def check_turn_index(store: Any, rid: str, sid: str) -> None:
    """Where the turn index answers (docs/turns.md), it answers what the full path
    (every record, every key) does: the counts every write keeps are right."""
    window = await store.backend.load_turn_window(rid)
    if window is None:
        return
    records, keys = await store.backend.load_turns(rid)
    full = build_turns(records, keys, clear=False, pops=(), staged=0)
    expect(f"turn index of {sid}", window_turns(window, newest=False), full)
    expect(f"turn count of {sid}", window.count, len(full))


async def check_world(harness: Harness, world: World, store_index: int) -> None:
    for sid in POOL:
        await check_session(harness, world, sid, store_index)
    store = harness.stores[store_index]
    listed = [
        i.session_id
        for i in await store.list_sessions(limit=1000, after=harness.prefix[:-1])
        if i.session_id.startswith(harness.prefix)
    ]
    expect("list_sessions()", listed, sorted(harness.rid(s) for s in POOL if world.s(s).exists))
    for user in USERS:
        count = await store.count_sessions(user_id=harness.uid(user))
        want = sum(1 for s in POOL if world.s(s).exists and world.s(s).info.get("user_id") == user)
        expect(f"count_sessions(user_id={user})", count, want)
