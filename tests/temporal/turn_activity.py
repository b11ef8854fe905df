"""The activity of the other shape: a whole agent turn inside one activity, its session
from ``activity_session`` (the worker's store), its model ``model.EchoModel``."""

from __future__ import annotations

import os
import signal
from typing import Any

from agents import Agent, Runner
from temporalio import activity

from sessions.temporal import activity_session
from tests.temporal.model import EchoModel
from tests.temporal.workflows import TurnInput


def _last_answer(items: list[Any]) -> str:
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "assistant":
            content = item.get("content")
            if isinstance(content, list) and content:
                return str(content[0].get("text", ""))
    raise AssertionError(f"no assistant message in the committed turn: {items!r}")


@activity.defn(name="agent_turn")
async def agent_turn(job: TurnInput) -> str:
    agent = Agent(name="echo", instructions="Answer.", model=EchoModel())
    async with activity_session(job.session_id) as turn:
        if turn.committed and not job.rerun:
            # An earlier attempt committed this turn: answer with what it stored.
            return _last_answer(await turn.session.get_items(turns=1))
        result = await Runner.run(agent, job.text, session=turn.session)
        answer = str(result.final_output)
    if activity.info().attempt == 1:
        if job.fault == "kill-after-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if job.fault == "fail-after-commit":
            raise RuntimeError("injected: the turn was committed, then the activity failed")
    return answer
