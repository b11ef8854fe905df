"""The parts of ``sessions.temporal`` that need no Temporal server: the id rules, the
checks of the public entry points, and what the activities do against a real store
(SQLite and PostgreSQL)."""

from __future__ import annotations

from tests.temporal.need import need_temporal

need_temporal()

import uuid  # noqa: E402
from typing import Any  # noqa: E402

import orjson  # noqa: E402
import pytest  # noqa: E402

from sessions.temporal import (  # noqa: E402
    SessionCarry,
    SessionsPlugin,
    TemporalSession,
    activity_batch_id,
    activity_session,
    lineage_of,
    turn_tag,
    workflow_batch_id,
)
from sessions.temporal.ids import parse_turn_tag  # noqa: E402
from sessions.temporal.payloads import CommitRequest, LoadRequest  # noqa: E402
from sessions.temporal.storeside import commit, hide_replaced, load  # noqa: E402
from tests.conftest import Target  # noqa: E402


def test_a_workflow_batch_id_is_the_same_for_the_same_workflow_run_and_position_only() -> None:
    one = workflow_batch_id("wf", "run-1", 1)
    assert one == workflow_batch_id("wf", "run-1", 1)
    others = {
        workflow_batch_id("wf", "run-1", 2),
        workflow_batch_id("wf", "run-2", 1),
        workflow_batch_id("wf2", "run-1", 1),
    }
    assert one not in others and len(others) == 3
    assert one.startswith("twf-") and len(one) == 44


def test_an_activity_batch_id_names_the_workflow_run_activity_and_part() -> None:
    one = activity_batch_id("wf", "run-1", "7")
    assert one == activity_batch_id("wf", "run-1", "7", 1)
    assert one != activity_batch_id("wf", "run-1", "8")
    assert one != activity_batch_id("wf", "run-1", "7", 2)
    assert one != activity_batch_id("wf", "run-2", "7")
    assert one.startswith("tac-")
    # The ids of the two shapes never meet, nor do fields run into each other.
    assert workflow_batch_id("a", "b", 1)[4:] != activity_batch_id("a", "b", "1")[4:]
    assert workflow_batch_id("ab", "c", 1) != workflow_batch_id("a", "bc", 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: workflow_batch_id("", "r", 1), "workflow_id must be a non-empty str"),
        (lambda: workflow_batch_id("w", 5, 1), "run_id must be a str, got int"),
        (lambda: workflow_batch_id("w", "r", 0), "position must be >= 1, got 0"),
        (lambda: workflow_batch_id("w", "r", True), "position must be an int, got bool"),
        (lambda: activity_batch_id("w", "r", "a\0b"), "activity_id must be a non-empty str"),
        (lambda: activity_batch_id("w", "r", "1", -2), "part must be >= 1, got -2"),
        (lambda: turn_tag("", 1), "lineage must be a non-empty str"),
    ],
)
def test_id_inputs_are_checked_and_the_error_names_the_argument(call: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_turn_tags_parse_back_and_other_run_ids_are_not_taken_for_them() -> None:
    lineage = lineage_of("wf", "first-run")
    assert lineage == lineage_of("wf", "first-run") != lineage_of("wf", "another-run")
    assert parse_turn_tag(turn_tag(lineage, 12)) == (lineage, 12)
    for other in (None, "run-7", "temporal:", "temporal:abc:", "temporal:abc:07", "temporal::3"):
        assert parse_turn_tag(other) is None, other


def test_a_temporal_session_made_outside_a_workflow_is_refused_pointing_at_activity_session() -> (
    None
):
    with pytest.raises(RuntimeError, match="activity_session"):
        TemporalSession("user-1")


async def test_activity_session_outside_an_activity_is_refused() -> None:
    with pytest.raises(RuntimeError, match="inside a Temporal activity only"):
        async with activity_session("user-1"):
            pass


@pytest.mark.parametrize(
    ("store", "error", "message"),
    [
        (42, TypeError, "store must be a store URL .str. or an async callable.*got int"),
        ("", ValueError, "store must be a store URL or an async callable, got ''"),
    ],
)
def test_the_plugin_refuses_a_store_that_is_neither_a_url_nor_a_callable(
    store: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        SessionsPlugin(store)


def _texts(*items: dict[str, Any]) -> list[str]:
    return [orjson.dumps(item).decode() for item in items]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _request(session_id: str, lineage: str, position: int, *texts: str, **kw: Any) -> CommitRequest:
    return CommitRequest(
        session_id=session_id,
        batch_id=workflow_batch_id("wf", "run", position) + kw.pop("salt", ""),
        lineage=lineage,
        position=position,
        clear=kw.pop("clear", False),
        pops=kw.pop("pops", 0),
        items=_texts(*(_user(t) for t in texts)),
    )


async def test_a_commit_request_sent_again_after_it_landed_applies_nothing_more(
    target: Target,
) -> None:
    store = await target.open()
    sid, lineage = f"s-{uuid.uuid4().hex}", "lineage-a"
    request = _request(sid, lineage, 1, "hello", "world")
    first = await commit(store, request)
    again = await commit(store, request)
    assert (first.applied_before, again.applied_before) == (False, True)
    loaded = await load(store, LoadRequest(sid, None, lineage, 2))
    assert [orjson.loads(t)["content"] for t in loaded.items] == ["hello", "world"]
    session = store.session(sid)
    assert [turn.run_id for turn in await session.turns()] == [turn_tag(lineage, 1)]
    await session.close()


async def test_pops_and_a_clear_are_applied_with_the_batch(target: Target) -> None:
    store = await target.open()
    sid, lineage = f"s-{uuid.uuid4().hex}", "lineage-b"
    await commit(store, _request(sid, lineage, 1, "a", "b", "c"))
    await commit(store, _request(sid, lineage, 2, "d", pops=2))
    loaded = await load(store, LoadRequest(sid, None, lineage, 3))
    assert [orjson.loads(t)["content"] for t in loaded.items] == ["a", "d"]
    await commit(store, _request(sid, lineage, 3, "e", clear=True))
    loaded = await load(store, LoadRequest(sid, None, lineage, 4))
    assert [orjson.loads(t)["content"] for t in loaded.items] == ["e"]


async def test_a_replaced_runs_turns_are_hidden_from_the_position_a_reset_went_back_to_and_kept(
    target: Target,
) -> None:
    store = await target.open()
    sid, lineage = f"s-{uuid.uuid4().hex}", "lineage-c"
    for position, text in enumerate(["t1", "t2", "t3"], start=1):
        await commit(store, _request(sid, lineage, position, text))
    session = store.session(sid)
    assert await hide_replaced(session, lineage, 4) == 0  # nothing at or after 4
    assert await hide_replaced(session, "another-lineage", 1) == 0  # not its turns
    assert await hide_replaced(session, lineage, 2) == 2  # t2 and t3 ...
    assert await session.undo_rewind() == 2  # ... kept: they come back
    await session.close()
    await commit(store, _request(sid, "another-workflow", 1, "foreign", salt="f"))
    # A reset run: its second commit, under a new run id (another batch id).
    result = await commit(store, _request(sid, lineage, 2, "t2-again", salt="x"))
    assert result.hidden == 3  # t2, t3 and the turn committed after them
    loaded = await load(store, LoadRequest(sid, None, lineage, 3))
    assert [orjson.loads(t)["content"] for t in loaded.items] == ["t1", "t2-again"]


async def test_hiding_a_replaced_turn_may_part_an_approved_call_from_its_output(
    target: Target,
) -> None:
    """A reset back to a paused approval: the call stays (the run waits on it), the
    output of the replaced run goes, which ``rewind()`` alone would refuse."""
    store = await target.open()
    sid, lineage = f"s-{uuid.uuid4().hex}", "lineage-d"
    call = {"type": "function_call", "call_id": "c1", "name": "transfer", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "done"}
    paused = CommitRequest(
        sid, workflow_batch_id("wf", "r", 1), lineage, 1, False, 0, _texts(_user("go"), call)
    )
    resumed = CommitRequest(
        sid, workflow_batch_id("wf", "r", 2), lineage, 2, False, 0, _texts(output)
    )
    await commit(store, paused)
    await commit(store, resumed)
    session = store.session(sid)
    with pytest.raises(ValueError, match="split"):
        await session.rewind(to_turn=1)
    assert await hide_replaced(session, lineage, 2) == 1
    assert [item.get("type") for item in await session.get_items()] == [None, "function_call"]
    await session.close()


def test_a_carry_for_another_session_is_refused() -> None:
    from sessions.temporal.workflow import _check_carry

    with pytest.raises(ValueError, match="carry is for session 'a', not 'b'"):
        _check_carry(SessionCarry("a", "l", 1), "b")
    with pytest.raises(ValueError, match="carry.position must be an int >= 0"):
        _check_carry(SessionCarry("b", "l", -1), "b")
