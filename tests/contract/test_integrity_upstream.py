"""The upstream shape of issue 14 (openai-agents-python issue 4827), with ScriptedModel.

An agent with an output guardrail and ``tool_use_behavior`` other than
``run_llm_again`` parks on a ``needs_approval`` tool; openai-agents 0.22 defers the
interrupted turn's items (the park-time write is ``[]``) and, on an approved resume that
runs the model again, writes only the tool's output: a ``function_call_output`` whose
``function_call`` was never stored. Every later turn then fails with HTTP 400.

On the openai-agents release installed here (0.24.0) the runner no longer leaves the
orphan: the full flow ends valid on the SDK's own ``SQLiteSession`` too, so the first test
checks our sessions end valid and agree with the SDK's, without claiming the SDK's ends
poisoned. The second replays the affected releases' writes (the same calls the 0.22
runner makes on the session) against both: the SDK's ``SQLiteSession`` stores the orphan
(poisoned), ours refuses it (``reject``) or quarantines it, and the history stays valid.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from sessions import Store
from sessions._model.history import check_history
from sessions.errors import InvalidHistoryError
from tests.conftest import Target
from tests.sdk import ScriptedModel, assistant_message, function_call, need_sdk


def _agent() -> Agent[Any]:
    from agents import GuardrailFunctionOutput, StopAtTools, function_tool, output_guardrail

    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    @function_tool
    def finish(text: str) -> str:
        """End the conversation."""
        return text

    @output_guardrail
    async def allow(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)

    model = ScriptedModel(
        [
            [function_call("refund", {"order": "o-1"}, call_id="call_ORPHAN")],
            [assistant_message("refunded", item_id="msg_2")],
        ]
    )
    return Agent(
        name="support",
        model=model,
        tools=[refund, finish],
        tool_use_behavior=StopAtTools(stop_at_tool_names=["finish"]),
        output_guardrails=[allow],
    )


async def _approval_flow(session: Any, commit: Any) -> list[Any]:
    """Run until the approval, approve, resume; ``commit`` after each run."""
    agent = _agent()
    config = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "refund o-1", session=session, run_config=config)
    assert first.interruptions
    await commit()
    state = first.to_state()
    for interruption in state.get_interruptions():
        state.approve(interruption)
    second = await Runner.run(agent, state, session=session, run_config=config)
    assert second.final_output == "refunded"
    await commit()
    items: list[Any] = await session.get_items()
    return items


async def _nothing() -> None:
    return None


def _shape(items: list[Any]) -> list[tuple[str, Any]]:
    return [(item.get("type", item.get("role")), item.get("call_id")) for item in items]


@pytest.mark.sdk_flow
async def test_the_upstream_approval_flow_ends_valid_on_our_sessions_and_agrees_with_the_sdk(
    store: Store[Any], sid: str
) -> None:
    need_sdk("approvals")
    from agents import SQLiteSession as SDKSQLiteSession

    theirs = await _approval_flow(SDKSQLiteSession(sid), _nothing)
    ours_session = store.session(sid, integrity="reject")
    ours = await _approval_flow(ours_session, ours_session.commit)
    assert check_history(ours) == []
    assert await store.read_quarantine(sid) == []
    assert _shape(ours) == _shape(theirs)


#: The session writes of the affected releases (0.22.x): the turn input, the park-time
#: write of the deferred turn (``[]``), then on resume only the approved tool's output and
#: the final answer. Taken from the issue's trace; no runner involved.
_AFFECTED_WRITES: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "refund o-1"}],
    [],
    [{"type": "function_call_output", "call_id": "call_ORPHAN", "output": "refunded o-1"}],
    [{"type": "message", "role": "assistant", "id": "msg_2", "content": "refunded"}],
]


@pytest.mark.sdk_flow
async def test_the_affected_releases_writes_poison_the_sdk_session_but_not_ours(
    target: Target, sid: str
) -> None:
    from agents import SQLiteSession as SDKSQLiteSession

    sdk_session = SDKSQLiteSession(sid)
    for write in _AFFECTED_WRITES:
        await sdk_session.add_items(write)
    poisoned = check_history(await sdk_session.get_items())
    assert [d.kind for d in poisoned] == ["orphan_output"]  # every later turn: HTTP 400

    strict = (await target.open(integrity="reject")).session(sid, autocommit=True)
    await strict.add_items(_AFFECTED_WRITES[0])
    with pytest.raises(InvalidHistoryError):
        await strict.add_items(_AFFECTED_WRITES[2])
    await strict.rollback()
    await strict.add_items(_AFFECTED_WRITES[3])
    assert check_history(await strict.get_items()) == []

    store = await target.open()
    other = f"{sid}-q"
    kept = store.session(other, autocommit=True)
    for write in _AFFECTED_WRITES:
        await kept.add_items(write)
    stored = await kept.get_items()
    assert check_history(stored) == []
    assert _shape(stored) == [("user", None), ("message", None)]
    (entry,) = await store.read_quarantine(other)
    assert entry.reason.startswith("orphan_output") and "call_ORPHAN" in entry.reason
