"""``activity_session``: a whole agent turn inside one activity (the OpenAI Agents
plugin only provides the client's data converter here). A retried activity runs the
turn again; its commit lands once, under the id of the workflow and activity, never
the attempt. Real dev server, SQLite and PostgreSQL, real SIGKILL."""

from __future__ import annotations

from tests.temporal.need import need_temporal

need_temporal()

import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from temporalio.client import Client  # noqa: E402

from tests.conftest import Target  # noqa: E402
from tests.temporal.harness import (  # noqa: E402
    WorkerProcess,
    activity_runs,
    assert_each_once,
    new_queue,
    replay_all,
    result_of,
    stored,
    worker,
)
from tests.temporal.workflows import ActivityChatInput, ActivityChatWorkflow  # noqa: E402

MESSAGES = ["alpha", "beta"]


@pytest.mark.parametrize("rerun", [False, True], ids=["answers-from-store", "runs-again"])
async def test_an_agent_turn_activity_failing_after_its_commit_is_retried_and_its_turn_lands_once(
    client: Client, target: Target, rerun: bool
) -> None:
    workflow_id, session_id = f"wf-{uuid.uuid4().hex[:10]}", f"s-{uuid.uuid4().hex}"
    queue = new_queue()
    async with worker(client, queue, target.url):
        handle = await client.start_workflow(
            ActivityChatWorkflow.run,
            ActivityChatInput(session_id, MESSAGES, fault="fail-after-commit", rerun=rerun),
            id=workflow_id,
            task_queue=queue,
        )
        answers = await result_of(handle)
    runs = activity_runs(await handle.fetch_history())
    assert [run.attempts for run in runs] == [2, 2]  # every turn's first attempt failed
    held = await stored(await target.open(), session_id)
    assert_each_once(held.users(), MESSAGES)
    assert held.turns == len(MESSAGES) and len(held.answers()) == len(MESSAGES)
    if not rerun:  # the retry answered with the committed turn: the workflow saw it
        assert held.answers() == answers
    else:  # the retry's own answer was never stored: the batch id was taken
        assert not set(held.answers()) & set(answers)
    assert await replay_all(client, workflow_id) == 1


async def test_an_agent_turn_whose_worker_is_sigkilled_after_the_commit_lands_once_on_the_replacement(
    client: Client, target: Target, temporal_address: str, worker_log: Path
) -> None:
    workflow_id, session_id = f"wf-{uuid.uuid4().hex[:10]}", f"s-{uuid.uuid4().hex}"
    queue = new_queue()
    doomed = WorkerProcess(temporal_address, queue, target.url, worker_log)
    try:
        handle = await client.start_workflow(
            ActivityChatWorkflow.run,
            ActivityChatInput(session_id, MESSAGES[:1], fault="kill-after-commit"),
            id=workflow_id,
            task_queue=queue,
        )
        assert await doomed.wait_killed() == -9, doomed.stop()
        replacement = WorkerProcess(temporal_address, queue, target.url, worker_log)
        try:
            answers = await result_of(handle)
        finally:
            replacement.stop()
    finally:
        doomed.kill()
    assert [run.attempts for run in activity_runs(await handle.fetch_history())] == [2]
    held = await stored(await target.open(), session_id)
    assert_each_once(held.users(), MESSAGES[:1])
    assert held.answers() == answers and held.turns == 1
    assert await replay_all(client, workflow_id) == 1
