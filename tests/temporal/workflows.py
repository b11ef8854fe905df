"""The workflows the Temporal tests and the soak run (workflow code: only temporalio,
agents and sessions.temporal, passed through the sandbox).

* ``ChatWorkflow``: one ``Runner.run`` per message under the OpenAI Agents plugin, a
  ``TemporalSession`` committed after each; continue-as-new every ``per_run`` messages.
* ``ApprovalWorkflow``: a tool that needs approval; the run pauses, the decision comes
  as an update, the run resumes from its state.
* ``ActivityChatWorkflow``: the other shape, each turn one activity (``agent_turn`` in
  ``turn_activity.py``) running the agent with ``activity_session``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner, function_tool

    from sessions.temporal import SessionCarry, TemporalSession

#: Quick retries: a killed worker's activity is retried once its timeout passes.
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=1.5,
    maximum_interval=timedelta(seconds=1),
)


@dataclass
class ChatInput:
    session_id: str
    messages: list[str]
    per_run: int = 0
    """Continue as new after this many messages (0: never)."""
    carry: SessionCarry | None = None
    timeout_seconds: float = 4.0
    """The session activities' start-to-close timeout (a killed worker's activity is
    retried on another after this long)."""
    fail_first_attempt_after: int = 0
    """The workflow's first attempt fails after committing this many turns (0: never);
    with a retry policy on the workflow, Temporal starts it over."""


@dataclass
class TurnInput:
    session_id: str
    text: str
    fault: str = "none"
    """``fail-after-commit`` / ``kill-after-commit``: the activity's first attempt fails
    (or its worker is SIGKILLed) after its commit reached the database."""
    rerun: bool = False
    """On a retry, run the turn again even though it was committed (its commit then
    lands nowhere: the batch id is taken)."""


@dataclass
class ActivityChatInput:
    session_id: str
    messages: list[str]
    fault: str = "none"
    rerun: bool = False


def _options(job: ChatInput) -> dict[str, Any]:
    return {"start_to_close_timeout": timedelta(seconds=job.timeout_seconds), "retry_policy": RETRY}


@workflow.defn
class ChatWorkflow:
    @workflow.run
    async def run(self, job: ChatInput) -> list[str]:
        if job.carry is not None:
            session = TemporalSession.from_carry(job.carry, **_options(job))
        else:
            session = TemporalSession(job.session_id, **_options(job))
        agent = Agent(name="echo", instructions="Answer.", model="echo")
        answers: list[str] = []
        for done, text in enumerate(job.messages):
            if job.per_run and done == job.per_run:
                rest = ChatInput(
                    job.session_id,
                    job.messages[done:],
                    job.per_run,
                    session.carry(),
                    job.timeout_seconds,
                )
                workflow.continue_as_new(rest)
            result = await Runner.run(agent, text, session=session)
            await session.commit()
            answers.append(str(result.final_output))
            failing = job.fail_first_attempt_after and workflow.info().attempt == 1
            if failing and len(answers) == job.fail_first_attempt_after:
                raise ApplicationError("injected: this workflow attempt fails after a commit")
        return answers


@function_tool(needs_approval=True)
async def transfer(amount: int) -> str:
    """Move money (needs a human's approval)."""
    return f"transferred {amount}"


@workflow.defn
class ApprovalWorkflow:
    def __init__(self) -> None:
        self._decision: bool | None = None
        self._waiting = False

    @workflow.run
    async def run(self, job: ChatInput) -> str:
        session = TemporalSession(job.session_id, **_options(job))
        agent = Agent(name="banker", instructions="Help.", model="echo", tools=[transfer])
        result = await Runner.run(agent, job.messages[0], session=session)
        await session.commit()
        while result.interruptions:
            self._waiting = True
            await workflow.wait_condition(lambda: self._decision is not None)
            self._waiting = False
            state = result.to_state()
            for interruption in result.interruptions:
                if self._decision:
                    state.approve(interruption)
                else:
                    state.reject(interruption)
            self._decision = None
            result = await Runner.run(agent, state, session=session)
            await session.commit()
        return str(result.final_output)

    @workflow.query
    def waiting(self) -> bool:
        return self._waiting

    @workflow.update
    async def decide(self, approve: bool) -> str:
        await workflow.wait_condition(lambda: self._waiting)
        self._decision = approve
        return "approved" if approve else "rejected"


@workflow.defn
class ActivityChatWorkflow:
    @workflow.run
    async def run(self, job: ActivityChatInput) -> list[str]:
        answers: list[str] = []
        for text in job.messages:
            answer = await workflow.execute_activity(
                "agent_turn",
                TurnInput(job.session_id, text, job.fault, job.rerun),
                result_type=str,
                start_to_close_timeout=timedelta(seconds=6),
                retry_policy=RETRY,
            )
            answers.append(answer)
        return answers


WORKFLOWS = [ChatWorkflow, ApprovalWorkflow, ActivityChatWorkflow]
