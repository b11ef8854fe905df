"""Compaction by the SDK's ``OpenAIResponsesCompactionSession`` over our sessions.

Every test runs on our SQLite and PostgreSQL sessions, with autocommit and buffered
(inside a transaction), and on ``TransactionalSession`` over the SDK's own
``SQLiteSession`` in both modes, with the real compaction session and a fake client
(``tests.flows.FakeCompactClient``: ``responses.compact`` without a network).

What is checked: a compaction, whole or partial, is ONE write (one backend commit; over
the wrapper, one call of the wrapped session's own replacement hook); with autocommit
it is durable at once, buffered it is staged with the turn (reads see it, the stored
history does not change before ``commit()``, ``rollback()`` drops it); a replacement
whose end of history changed after the snapshot is refused whole, by our check before
the commit or by the database inside it; a subclass that overrides a ``Session`` method
is offered no hook, so the SDK's compaction goes through its overrides (one that
overrides none keeps the one write; one that overrides a hook itself opts back in).
Process kills are in ``tests/reliability/test_compaction_crash.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from sessions import BufferedSession
from sessions.errors import CommitConflictError
from tests.contract import raw
from tests.contract.proxy import install_proxy
from tests.flows import (
    BUFFERED_KINDS,
    KINDS,
    OUR_KINDS,
    FakeCompactClient,
    Opened,
    compaction_session,
    msg,
    need_sdk,
    open_kind,
)
from tests.sdk import ScriptedModel, assistant_message, function_call

pytestmark = pytest.mark.sdk_flow

NO_TRACE = RunConfig(tracing_disabled=True)
SEED = [msg("q1"), msg("a1", "assistant"), msg("q2"), msg("a2", "assistant")]


@pytest.fixture(params=KINDS)
async def opened(request: pytest.FixtureRequest, tmp_path: Path, sid: str) -> AsyncIterator[Opened]:
    async for o in open_kind(request.param, tmp_path, request, sid):
        yield o


@pytest.fixture(params=BUFFERED_KINDS)
async def buffered(
    request: pytest.FixtureRequest, tmp_path: Path, sid: str
) -> AsyncIterator[Opened]:
    async for o in open_kind(request.param, tmp_path, request, sid):
        yield o


@pytest.fixture(params=OUR_KINDS)
async def ours(request: pytest.FixtureRequest, tmp_path: Path, sid: str) -> AsyncIterator[Opened]:
    async for o in open_kind(request.param, tmp_path, request, sid):
        yield o


class Writes:
    """Counts the writes that reach storage: backend commits (ours) or calls that change
    the wrapped session (``add_items``, ``pop_item``, ``clear_session``, and one-step
    replacements through its own snapshot hook)."""

    def __init__(self, opened: Opened) -> None:
        self.count = 0
        self.kinds: list[str] = []
        if opened.store is not None:
            proxy = install_proxy(opened.store)

            async def counted() -> None:
                self.count += 1
                self.kinds.append("commit")

            proxy.after_apply = counted
            return
        inner = opened.inner
        for name in ("add_items", "pop_item", "clear_session"):
            setattr(inner, name, self._counting(name, getattr(inner, name)))
        snapshot = getattr(inner, "_get_compaction_snapshot", None)
        if snapshot is None:  # an SDK release without the hook
            return

        async def snapshot_counted(limit: int, **kwargs: Any) -> Any:
            snap = await snapshot(limit, **kwargs)
            if snap is None:
                return None
            replace = snap.replace_suffix

            async def replace_counted(start: int, output: list[Any]) -> bool:
                done: bool = await replace(start, output)
                if done:
                    self.count += 1
                    self.kinds.append("replace")
                return done

            return type(snap)(snap.items, snap.complete, replace_counted)

        inner._get_compaction_snapshot = snapshot_counted

    def _counting(self, name: str, method: Any) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            self.count += 1
            self.kinds.append(name)
            return result

        return call


def plain(items: list[Any]) -> list[Any]:
    return [json.loads(json.dumps(item)) for item in items]


def covered(item: dict[str, Any]) -> list[str]:
    assert item["type"] == "compaction", item
    texts: list[str] = json.loads(item["encrypted_content"])
    return texts


def settings(limit: int | None) -> RunConfig:
    if limit is None:
        return NO_TRACE
    from agents.memory.session_settings import SessionSettings

    return RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=limit))


async def turn(opened: Opened, session: Any, text: str, config: RunConfig = NO_TRACE) -> Any:
    """One run of ``text`` (answered "done"), committed as one transaction if buffered."""
    model = ScriptedModel([[assistant_message("done")]])
    agent = Agent(name="worker", model=model)
    async with AsyncExitStack() as stack:
        if opened.buffered:
            await stack.enter_async_context(opened.session.transaction())
        await Runner.run(agent, text, session=session, run_config=config)
    return model


# --------------------------------------------------------------------------- whole history


def snapshot_compaction() -> Any:
    """The SDK's compaction session class, where the SDK has snapshots and agents.testing."""
    Compaction = compaction_session()
    need_sdk("compaction_snapshot")
    need_sdk("agents.testing")
    return Compaction


def always_compacting(
    Compaction: Any, opened: Opened, sid: str, mode: str
) -> tuple[Any, FakeCompactClient]:
    """A compaction session over ``opened`` that compacts every turn (``mode``), and its
    fake client."""
    client = FakeCompactClient()
    return every_turn(Compaction, sid, opened.session, client, mode), client


def every_turn(Compaction: Any, sid: str, session: Any, client: Any, mode: str = "input") -> Any:
    """A compaction session over ``session`` that compacts (``mode``) after every turn."""
    return Compaction(
        sid, session, client=client, compaction_mode=mode, should_trigger_compaction=lambda _: True
    )


async def test_manual_compaction_replaces_the_whole_history_in_one_write(
    opened: Opened, sid: str
) -> None:
    Compaction = compaction_session()
    if not opened.buffered:
        # Before 0.24 the SDK replaces with clear_session() then add_items(): two writes.
        need_sdk("atomic_replace_items")
    if opened.inner is not None:
        # The wrapper's commit is one write only through the wrapped session's own hook
        # (the SDK's SQLiteSession has it from 0.23); before, clear and add are two calls.
        need_sdk("compaction_snapshot")
    await opened.seed(SEED)
    client = FakeCompactClient()
    compacting = Compaction(sid, opened.session, client=client, compaction_mode="input")
    writes = Writes(opened)
    if opened.buffered:
        async with opened.session.transaction():
            await compacting.run_compaction({"force": True})
            assert await opened.stored() == SEED  # nothing durable before the commit
            (staged,) = await opened.session.get_items()  # reads see the replacement
            assert covered(staged) == ["q1", "a1", "q2", "a2"]
            assert writes.count == 0
    else:
        await compacting.run_compaction({"force": True})
    (stored,) = await opened.stored()
    assert covered(stored) == ["q1", "a1", "q2", "a2"]
    assert writes.count == 1, writes.kinds


async def test_buffered_compaction_is_dropped_by_rollback(buffered: Opened, sid: str) -> None:
    Compaction = compaction_session()
    await buffered.seed(SEED)
    compacting = Compaction(sid, buffered.session, client=FakeCompactClient())
    await compacting.run_compaction({"force": True, "compaction_mode": "input"})
    assert len(await buffered.session.get_items()) == 1
    await buffered.session.rollback()
    assert await buffered.session.get_items() == SEED
    assert await buffered.stored() == SEED


# --------------------------------------------------------------------------- after a turn


@pytest.mark.parametrize("limit", [None, 1], ids=["model-saw-everything", "model-saw-the-end"])
async def test_automatic_compaction_after_a_turn_is_one_replacement(
    opened: Opened, sid: str, limit: int | None
) -> None:
    Compaction = compaction_session()
    need_sdk("compaction_snapshot")
    need_sdk("agents.testing")  # the stand-in model gives no response id: no compaction
    await opened.seed(SEED)
    compacting, client = always_compacting(Compaction, opened, sid, "input")
    writes = Writes(opened)
    await turn(opened, compacting, "q3", settings(limit))
    stored = await opened.stored()
    (call,) = client.calls
    if limit is None:  # the model saw the whole history: all of it is replaced
        assert [item.get("content") for item in call["input"][:5]] == [
            "q1",
            "a1",
            "q2",
            "a2",
            "q3",
        ]
        assert stored == [stored[-1]] and covered(stored[-1])[:5] == ["q1", "a1", "q2", "a2", "q3"]
    else:  # it saw the end: the older history stays, the end from a user message on goes
        assert call["input"][0] == msg("q3")
        assert stored[:-1] == SEED
        assert covered(stored[-1]) == ["q3", "done"]
    # Autocommit: the input, the answer, then the replacement. Buffered: one commit.
    assert writes.count == (1 if opened.buffered else 3), writes.kinds
    if opened.inner is not None and not opened.buffered:  # the wrapper, autocommit: replaced
        # through the SDK session's own hook
        assert writes.kinds == ["add_items", "add_items", "replace"]


async def test_a_write_after_the_snapshot_cancels_the_replacement(
    opened: Opened, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream: test_new_backend_write_invalidates_snapshot (tests/memory/test_compaction_suffix.py)."""
    Compaction = snapshot_compaction()
    await opened.seed(SEED)

    async def meanwhile() -> None:
        await opened.session.add_items([msg("newer")])

    compacting = every_turn(Compaction, sid, opened.session, FakeCompactClient(during=meanwhile))
    with caplog.at_level(logging.WARNING):
        await turn(opened, compacting, "q3", settings(1))
    assert "Skipped compaction replacement" in caplog.text
    stored = await opened.stored()
    assert plain(stored[:5]) == [*SEED, msg("q3")]
    assert stored[6] == msg("newer") and len(stored) == 7


async def test_another_writer_between_snapshot_and_commit_is_refused_by_the_database(
    ours: Opened, sid: str
) -> None:
    """Our check before the commit passed; the database's check inside it does not.

    The model saw the last two stored items, so the replacement removes stored rows
    (buffered too, where the turn itself is still staged) and carries the condition that
    nothing was stored after them.
    """
    Compaction = snapshot_compaction()
    assert ours.store is not None and ours.target is not None
    await ours.seed(SEED)
    proxy = install_proxy(ours.store)
    other = await ours.target.open()
    armed = {"on": False}

    async def other_writer_commits_first() -> None:
        if armed["on"]:
            armed["on"] = False
            await other.session(sid, autocommit=True).add_items([msg("other writer")])

    proxy.before_apply = other_writer_commits_first

    async def arm() -> None:
        armed["on"] = True  # the next commit is the replacement's (or the transaction's)

    compacting = every_turn(Compaction, sid, ours.session, FakeCompactClient(during=arm))
    if ours.buffered:
        with pytest.raises(CommitConflictError):
            await turn(ours, compacting, "q3", settings(2))
        # Nothing of the transaction was applied (the turn was in it too), and
        # transaction() rolled back the batch that can never commit.
        assert await ours.stored() == [*SEED, msg("other writer")]
        assert not ours.session.has_pending
    else:
        await turn(ours, compacting, "q3", settings(2))
        stored = await ours.stored()
        assert plain(stored[:5]) == [*SEED, msg("q3")]
        assert stored[5]["content"][0]["text"] == "done"
        assert stored[6:] == [msg("other writer")]


async def test_a_replacement_the_database_rejects_leaves_the_history_as_it_was(
    ours: Opened, sid: str
) -> None:
    """Upstream: test_suffix_transaction_rolls_back_failed_insert."""
    Compaction = snapshot_compaction()
    assert ours.target is not None
    await ours.seed([msg("poison 1"), *SEED[1:]])
    await ours.target.add_poison_trigger(sid)  # the summary quotes "poison 1"
    try:
        compacting = every_turn(Compaction, sid, ours.session, FakeCompactClient())
        with pytest.raises(Exception, match="poisoned item"):
            await turn(ours, compacting, "q3")
    finally:
        await ours.target.drop_poison_trigger()
    stored = await ours.stored()
    if ours.buffered:
        assert stored == [msg("poison 1"), *SEED[1:]]
    else:  # the turn's own writes were commits of their own, before the compaction
        assert plain(stored[:5]) == [msg("poison 1"), *SEED[1:], msg("q3")]
        assert len(stored) == 6


async def test_partial_previous_response_id_compaction_keeps_the_history(
    opened: Opened, sid: str
) -> None:
    """Upstream: test_partial_previous_response_mode_preserves_history."""
    Compaction = snapshot_compaction()
    await opened.seed(SEED)
    compacting, client = always_compacting(Compaction, opened, sid, "previous_response_id")
    await turn(opened, compacting, "q3", settings(1))
    assert client.calls == []
    assert len(await opened.stored()) == 6


async def test_partial_compaction_never_splits_a_tool_call_from_its_output(
    opened: Opened, sid: str
) -> None:
    """Upstream: test_partial_compaction_does_not_split_tool_call_and_output."""
    Compaction = snapshot_compaction()
    call = function_call("lookup", {}, call_id="call-1")
    pair = [
        json.loads(call.model_dump_json(exclude_unset=True)),
        {"type": "function_call_output", "call_id": "call-1", "output": "result"},
    ]
    await opened.seed(pair)
    compacting, client = always_compacting(Compaction, opened, sid, "input")
    await turn(opened, compacting, "continue", settings(1))
    (call_kwargs,) = client.calls
    assert call_kwargs["input"][0] == msg("continue")  # the pair is not sent to compact
    stored = await opened.stored()
    assert stored[:2] == pair  # ... and stays stored whole
    assert covered(stored[2]) == ["continue", "done"]


# --------------------------------------------------------------------------- the hook itself


def texts_of(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


async def five_items(opened: Opened) -> None:
    """q1..q5: all stored with autocommit; q1..q3 stored and q4, q5 staged if buffered."""
    await opened.seed([msg("q1"), msg("q2"), msg("q3")])
    await opened.session.add_items([msg("q4"), msg("q5")])


async def snapshot(opened: Opened, limit: int, **options: Any) -> Any:
    need_sdk("compaction_snapshot")
    return await opened.session._get_compaction_snapshot(limit, **options)


async def test_the_snapshot_holds_the_latest_items_and_says_whether_that_is_all(
    opened: Opened,
) -> None:
    await five_items(opened)
    for limit, expected, complete in [
        (1, ["q5"], False),
        (3, ["q3", "q4", "q5"], False),
        (5, ["q1", "q2", "q3", "q4", "q5"], True),
        (9, ["q1", "q2", "q3", "q4", "q5"], True),
    ]:
        snap = await snapshot(opened, limit)
        assert (texts_of(snap.items), snap.complete) == (expected, complete), limit


async def test_replace_suffix_swaps_the_end_of_the_history_in_one_write(opened: Opened) -> None:
    await five_items(opened)
    snap = await snapshot(opened, 4)  # q2..q5
    writes = Writes(opened)
    assert await snap.replace_suffix(1, [msg("summary")]) is True  # q3..q5 go
    assert texts_of(await opened.session.get_items()) == ["q1", "q2", "summary"]
    if opened.buffered:
        assert texts_of(await opened.stored()) == ["q1", "q2", "q3"]
        await opened.session.commit()
    assert texts_of(await opened.stored()) == ["q1", "q2", "summary"]
    assert writes.count == 1, writes.kinds


async def test_replace_suffix_refuses_once_the_end_changed(opened: Opened) -> None:
    await five_items(opened)
    appended = await snapshot(opened, 2)
    await opened.session.add_items([msg("q6")])
    assert await appended.replace_suffix(0, [msg("summary")]) is False
    popped = await snapshot(opened, 2)
    assert await opened.session.pop_item() == msg("q6")
    assert await popped.replace_suffix(0, [msg("summary")]) is False
    assert await appended.replace_suffix(2, [msg("summary")]) is False  # nothing to replace
    expected = ["q1", "q2", "q3", "q4", "q5"]
    assert texts_of(await opened.session.get_items()) == expected
    if opened.buffered:
        await opened.session.commit()
    assert texts_of(await opened.stored()) == expected


async def test_a_replacement_inside_the_staged_items_leaves_stored_history_alone(
    buffered: Opened,
) -> None:
    await five_items(buffered)
    snap = await snapshot(buffered, 2)  # q4, q5: both staged
    writes = Writes(buffered)
    assert await snap.replace_suffix(1, [msg("summary")]) is True
    assert texts_of(await buffered.session.get_items()) == ["q1", "q2", "q3", "q4", "summary"]
    assert writes.count == 0
    await buffered.session.commit()
    assert texts_of(await buffered.stored()) == ["q1", "q2", "q3", "q4", "summary"]


def is_old(item: dict[str, Any]) -> bool:
    return str(item["content"]).startswith("old")


async def test_prune_prefix_removes_the_oldest_matching_items_with_the_replacement(
    ours: Opened,
) -> None:
    """What EncryptedSession asks for (``prune_prefix``: items past their time to live)."""
    await ours.seed([msg("old 1"), msg("old 2"), msg("kept"), msg("old 3"), msg("q1")])
    await ours.session.add_items([msg("q2")])
    snap = await snapshot(ours, 2, prune_prefix=is_old)
    writes = Writes(ours)
    assert await snap.replace_suffix(0, [msg("summary")]) is True
    # The oldest run of matching items goes; it stops at the first one that does not match.
    expected = ["kept", "old 3", "summary"]
    assert texts_of(await ours.session.get_items()) == expected
    if ours.buffered:
        await ours.session.commit()
    assert texts_of(await ours.stored()) == expected
    assert writes.count == 1, writes.kinds


async def test_the_wrapper_gives_no_snapshot_that_would_prune_its_oldest_items(
    tmp_path: Path, request: pytest.FixtureRequest, sid: str
) -> None:
    """The wrapped session's pop_item() removes only the newest items, so a pruning
    replacement is left to the SDK's generic path."""
    for kind in ("wrapper-autocommit", "wrapper-buffered"):
        (tmp_path / kind).mkdir()
        async for opened in open_kind(kind, tmp_path / kind, request, sid):
            await opened.seed([msg("old 1"), msg("q1")])
            assert await snapshot(opened, 1, prune_prefix=is_old) is None
            assert await snapshot(opened, 1) is not None


async def test_no_snapshot_when_an_item_in_it_is_unreadable(ours: Opened, sid: str) -> None:
    assert ours.target is not None
    await ours.seed([msg("q1"), msg("q2"), msg("q3")])
    await raw.corrupt_newest(ours.target, sid)
    # A replacement would remove the unreadable row with its neighbours: no snapshot, and
    # the SDK then keeps the history as it is.
    assert await snapshot(ours, 2) is None
    assert texts_of(await ours.session.get_items()) == ["q1", "q2"]  # reads skip it


async def test_a_pairing_rule_in_the_hook_can_refuse_a_replacement(
    opened: Opened, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sessions._engine.compaction.PAIRING_CHECK``: where issue 14's tool-pairing rules plug in."""
    from sessions._engine import compaction as _compaction

    await five_items(opened)
    asked: list[list[str]] = []

    def refuse(removed: list[Any]) -> bool:
        asked.append(texts_of(removed))
        return False

    monkeypatch.setattr(_compaction, "PAIRING_CHECK", refuse)
    snap = await snapshot(opened, 2)
    assert await snap.replace_suffix(0, [msg("summary")]) is False
    assert asked == [["q4", "q5"]]
    assert texts_of(await opened.session.get_items()) == ["q1", "q2", "q3", "q4", "q5"]


# --------------------------------------------------------------------------- subclasses
#
# A subclass that overrides get_items / add_items / pop_item / clear_session (to redact,
# encrypt, index or refuse what is stored) is not offered the hooks, which would bypass
# its overrides: the SDK then takes its generic path through them, as it does for
# subclasses of its own sessions. A subclass that overrides none keeps the one-write
# path; one that overrides a hook itself opts back in.

SECRET = "hunter2"


def redact(value: Any) -> Any:
    """What a redacting subclass stores: ``value`` with the secret blanked everywhere."""
    return json.loads(json.dumps(value).replace(SECRET, "[redacted]"))


def redacting(base: type[BufferedSession]) -> type[BufferedSession]:
    """``base`` with an ``add_items`` that redacts what it stores."""

    class Redacting(base):  # type: ignore[valid-type,misc]
        async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
            await super().add_items(redact(items), wrapper=wrapper)

    return Redacting


class RedactingMixin:
    """The same redaction as a mixin, placed before the session class in the bases."""

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        await super().add_items(redact(items), wrapper=wrapper)  # type: ignore[misc]


def redacting_by_mixin(base: type[BufferedSession]) -> type[BufferedSession]:
    class RedactingByMixin(RedactingMixin, base):  # type: ignore[valid-type,misc]
        pass

    return RedactingByMixin


def redacting_with_its_own_snapshot(base: type[BufferedSession]) -> type[BufferedSession]:
    """Opted back in for the suffix hook only (it then answers for what that stores)."""

    class RedactingSnapshot(redacting(base)):  # type: ignore[misc]
        async def _get_compaction_snapshot(self, limit: int, **options: Any) -> Any:
            return await super()._get_compaction_snapshot(limit, **options)

    return RedactingSnapshot


def redacting_with_its_own_hook(base: type[BufferedSession]) -> type[BufferedSession]:
    """Opted back in: redacts in ``add_items`` and in the whole-history hook it overrides."""

    class RedactingHook(redacting(base)):  # type: ignore[misc]
        async def _atomic_replace_items(self, items: list[Any]) -> bool:
            done: bool = await super()._atomic_replace_items(redact(items))
            return done

    return RedactingHook


class ClearRefused(RuntimeError):
    pass


def refusing_to_clear(base: type[BufferedSession]) -> type[BufferedSession]:
    class RefusingToClear(base):  # type: ignore[valid-type,misc]
        async def clear_session(self, *, wrapper: Any = None) -> None:
            raise ClearRefused("this subclass never clears its history")

    return RefusingToClear


def blocking_clear(
    base: type[BufferedSession], entered: Any, release: Any
) -> type[BufferedSession]:
    class BlockingClear(base):  # type: ignore[valid-type,misc]
        async def clear_session(self, *, wrapper: Any = None) -> None:
            entered.set()
            await release.wait()
            await super().clear_session(wrapper=wrapper)

    return BlockingClear


def plain_subclass(base: type[BufferedSession]) -> type[BufferedSession]:
    class Plain(base):  # type: ignore[valid-type,misc]
        def describe(self) -> str:  # a helper of its own; no Session method overridden
            return f"session {self.session_id}"

    return Plain


@asynccontextmanager
async def as_subclass(
    opened: Opened, make: Callable[[type[BufferedSession]], type[BufferedSession]]
) -> AsyncIterator[Opened]:
    """``opened`` with its session replaced by one of ``make(type(session))`` on the same
    storage (the same store, or the same wrapped session)."""
    cls = make(type(opened.session))
    autocommit = opened.session.autocommit
    session: BufferedSession
    if opened.inner is not None:
        session = cls(opened.inner, autocommit=autocommit)
    else:
        session = cls(opened.session.session_id, store=opened.store, autocommit=autocommit)
    try:
        yield dataclasses.replace(opened, session=session)
    finally:
        await session.rollback()
        await session.close()


class SummaryWithASecret(FakeCompactClient):
    """Its summary repeats a secret of the conversation, as a model's summary may."""

    async def compact(self, **kwargs: Any) -> Any:
        response = await super().compact(**kwargs)
        response.output[0]["encrypted_content"] += f" password={SECRET}"
        return response


async def compact(opened: Opened, compacting: Any, how: str) -> None:
    """A whole-history compaction: by hand, or after a turn whose model saw everything."""
    if how == "manual":
        async with AsyncExitStack() as stack:
            if opened.buffered:
                await stack.enter_async_context(opened.session.transaction())
            await compacting.run_compaction({"force": True})
    else:
        await turn(opened, compacting, "q3")


@pytest.mark.parametrize("how", ["manual", "after-a-turn"])
async def test_a_subclass_that_redacts_in_add_items_redacts_the_compaction_summary(
    opened: Opened, sid: str, how: str
) -> None:
    Compaction = compaction_session()
    if how == "after-a-turn":
        need_sdk("agents.testing")  # the stand-in model gives no response id: no compaction
    async with as_subclass(opened, redacting) as sub:
        await sub.seed(SEED)
        compacting = every_turn(Compaction, sid, sub.session, SummaryWithASecret())
        await compact(sub, compacting, how)
        (stored,) = await sub.stored()
        assert SECRET not in json.dumps(stored)
        assert stored["encrypted_content"].endswith(" password=[redacted]"), stored


@pytest.mark.parametrize("behaviour", ["raises", "blocks"])
async def test_compaction_goes_through_a_subclass_clear_session_that_raises_or_blocks(
    opened: Opened, sid: str, behaviour: str
) -> None:
    """The subclass's ``clear_session`` runs: its error reaches the caller of the
    compaction (not swallowed), and its wait holds the compaction (nothing replaced
    meanwhile)."""
    Compaction = compaction_session()
    entered, release = asyncio.Event(), asyncio.Event()
    if behaviour == "raises":
        make = refusing_to_clear
    else:

        def make(base: type[BufferedSession]) -> type[BufferedSession]:
            return blocking_clear(base, entered, release)

    async with as_subclass(opened, make) as sub:
        await sub.seed(SEED)
        compacting = Compaction(sid, sub.session, client=FakeCompactClient())
        task = asyncio.ensure_future(compact(sub, compacting, "manual"))
        if behaviour == "raises":
            with pytest.raises(ClearRefused):
                await task
            assert await sub.stored() == SEED
            return
        waiting = asyncio.ensure_future(entered.wait())
        await asyncio.wait({task, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        assert entered.is_set(), f"compaction never called clear_session (done: {task.done()})"
        assert await sub.stored() == SEED  # held in the subclass's clear_session
        release.set()
        await task
        (stored,) = await sub.stored()
        assert covered(stored) == ["q1", "a1", "q2", "a2"]


@pytest.mark.parametrize(
    "make", [redacting, redacting_by_mixin], ids=["override-in-the-class", "override-in-a-mixin"]
)
async def test_a_subclass_that_overrides_a_session_method_is_offered_no_hook(
    opened: Opened, make: Callable[[type[BufferedSession]], type[BufferedSession]]
) -> None:
    """The hooks answer "not here" (``None`` / ``False``, nothing changed) on every SDK
    release, so the SDK cannot bypass the override through them."""
    async with as_subclass(opened, make) as sub:
        await sub.seed(SEED)
        assert await sub.session._get_compaction_snapshot(5) is None
        assert await sub.session._atomic_replace_items([msg(SECRET)]) is False
        assert await sub.session.get_items() == SEED
        if sub.buffered:
            await sub.session.commit()
        assert await sub.stored() == SEED


def one_write_compaction(opened: Opened) -> Any:
    """The SDK's compaction session class, where the SDK has snapshots and (for an
    unbuffered session) replaces in one write."""
    Compaction = compaction_session()
    need_sdk("compaction_snapshot")
    if not opened.buffered:
        need_sdk("atomic_replace_items")
    return Compaction


async def test_a_subclass_that_overrides_no_session_method_keeps_the_one_write_path(
    opened: Opened, sid: str
) -> None:
    Compaction = one_write_compaction(opened)
    async with as_subclass(opened, plain_subclass) as sub:
        await sub.seed(SEED)
        assert await sub.session._get_compaction_snapshot(5) is not None
        compacting = Compaction(sid, sub.session, client=FakeCompactClient())
        writes = Writes(sub)
        await compact(sub, compacting, "manual")
        (stored,) = await sub.stored()
        assert covered(stored) == ["q1", "a1", "q2", "a2"]
        assert writes.count == 1, writes.kinds


async def test_a_subclass_that_overrides_the_hook_itself_is_offered_it(
    opened: Opened, sid: str
) -> None:
    """The opt-in: a subclass that redacts in ``add_items`` and in its own
    ``_atomic_replace_items`` (calling ours) gets the one-write replacement."""
    Compaction = one_write_compaction(opened)
    async with as_subclass(opened, redacting_with_its_own_hook) as sub:
        await sub.seed(SEED)
        assert await sub.session._get_compaction_snapshot(5) is None  # not overridden
        compacting = Compaction(
            sid, sub.session, client=SummaryWithASecret(), compaction_mode="input"
        )
        writes = Writes(sub)
        await compact(sub, compacting, "manual")
        (stored,) = await sub.stored()
        assert stored["encrypted_content"].endswith(" password=[redacted]"), stored
        assert writes.count == 1, writes.kinds


async def test_a_subclass_that_overrides_the_snapshot_hook_itself_is_offered_that_hook_only(
    opened: Opened,
) -> None:
    need_sdk("compaction_snapshot")
    async with as_subclass(opened, redacting_with_its_own_snapshot) as sub:
        await sub.seed(SEED)
        assert await sub.session._get_compaction_snapshot(5) is not None
        assert await sub.session._atomic_replace_items([msg("summary")]) is False
