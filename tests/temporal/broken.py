"""A ``ChatWorkflow`` that commits after every second turn only: replaying a real
ChatWorkflow history against it must raise a nondeterminism error (the replay check of
the tests has teeth)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner

    from sessions.temporal import TemporalSession
    from tests.temporal.workflows import ChatInput, _options


@workflow.defn(name="ChatWorkflow")
class ChatWorkflow:
    @workflow.run
    async def run(self, job: ChatInput) -> list[str]:
        session = TemporalSession(job.session_id, **_options(job))
        agent = Agent(name="echo", instructions="Answer.", model="echo")
        answers: list[str] = []
        for done, text in enumerate(job.messages):
            result = await Runner.run(agent, text, session=session)
            if done % 2:
                await session.commit()
            answers.append(str(result.final_output))
        await session.commit()
        return answers
