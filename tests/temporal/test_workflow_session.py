"""``TemporalSession`` in workflow code under the OpenAI Agents plugin, against a real
Temporal dev server, real SQLite files and PostgreSQL, real worker processes killed with
SIGKILL; the model is ``agents.testing``'s ScriptedModel (``model.py``). Every test
replays each history it made with temporalio's Replayer."""

from __future__ import annotations

from tests.temporal.need import need_temporal

need_temporal()

import asyncio  # noqa: E402
import json  # noqa: E402
import uuid  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import RetryPolicy  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402
from temporalio.workflow import NondeterminismError  # noqa: E402

from sessions.temporal import SessionsPlugin, lineage_of, turn_tag  # noqa: E402
from tests.conftest import Target  # noqa: E402
from tests.temporal import broken  # noqa: E402
from tests.temporal.harness import (  # noqa: E402
    WorkerProcess,
    activity_runs,
    agents_plugin,
    assert_each_once,
    new_queue,
    replay_all,
    reset_to,
    result_of,
    stored,
    task_completed_after,
    worker,
)
from tests.temporal.workflows import ApprovalWorkflow, ChatInput, ChatWorkflow  # noqa: E402

MESSAGES = ["one", "two", "three"]


def _ids() -> tuple[str, str]:
    return f"wf-{uuid.uuid4().hex[:10]}", f"s-{uuid.uuid4().hex}"


async def test_a_workflow_commits_each_turn_once_and_its_history_holds_counts_not_conversations(
    client: Client, target: Target
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    async with worker(client, queue, target.url):
        handle = await client.start_workflow(
            ChatWorkflow.run, ChatInput(session_id, MESSAGES), id=workflow_id, task_queue=queue
        )
        answers = await result_of(handle)
    store = await target.open()
    held = await stored(store, session_id)
    assert_each_once(held.users(), MESSAGES)
    assert held.answers() == answers  # what the workflow saw is what was stored
    assert held.turns == len(MESSAGES)
    runs = activity_runs(await handle.fetch_history())
    commits = [run for run in runs if run.name == "txsessions.commit"]
    loads = [run for run in runs if run.name == "txsessions.load"]
    assert len(commits) == len(MESSAGES) and len(loads) == 1  # one load a run, then it knows
    assert all(run.result_bytes < 120 for run in commits), commits  # counts, not items
    assert await replay_all(client, workflow_id) == 1


async def test_a_commit_activity_failing_after_its_write_reached_the_database_is_retried_and_lands_once(
    client: Client, target: Target
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    async with worker(client, queue, target.url, fault="fail-after-commit"):
        handle = await client.start_workflow(
            ChatWorkflow.run, ChatInput(session_id, MESSAGES), id=workflow_id, task_queue=queue
        )
        answers = await result_of(handle)
    runs = activity_runs(await handle.fetch_history())
    assert [run.attempts for run in runs if run.name == "txsessions.commit"] == [2, 2, 2]
    held = await stored(await target.open(), session_id)
    assert_each_once(held.users(), MESSAGES)
    assert held.answers() == answers and held.turns == len(MESSAGES)
    assert await replay_all(client, workflow_id) == 1


@pytest.mark.parametrize("fault", ["kill-before-commit", "kill-after-commit"])
async def test_a_worker_sigkilled_mid_commit_activity_and_replaced_commits_each_turn_once(
    client: Client, target: Target, temporal_address: str, worker_log: Path, fault: str
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    doomed = WorkerProcess(temporal_address, queue, target.url, worker_log, fault)
    try:
        handle = await client.start_workflow(
            ChatWorkflow.run,
            ChatInput(session_id, MESSAGES[:2], timeout_seconds=3),
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
    runs = activity_runs(await handle.fetch_history())
    assert [run.attempts for run in runs if run.name == "txsessions.commit"] == [2, 1]
    held = await stored(await target.open(), session_id)
    assert_each_once(held.users(), MESSAGES[:2])
    assert held.answers() == answers and held.turns == 2
    assert await replay_all(client, workflow_id) == 1


async def test_the_replay_check_catches_a_workflow_that_commits_differently(
    client: Client, target: Target
) -> None:
    """The Replayer check of the other tests can fail: a history replayed against a
    workflow that commits once per two turns is a nondeterminism error."""
    workflow_id, session_id = _ids()
    queue = new_queue()
    async with worker(client, queue, target.url):
        handle = await client.start_workflow(
            ChatWorkflow.run, ChatInput(session_id, MESSAGES), id=workflow_id, task_queue=queue
        )
        await result_of(handle)
    history = await handle.fetch_history()
    replayer = Replayer(
        workflows=[broken.ChatWorkflow],
        plugins=[agents_plugin(), SessionsPlugin("sqlite:///:memory:")],
    )
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(history)


async def test_a_reset_to_an_earlier_turn_hides_the_replaced_runs_later_turns_and_commits_the_new_ones_once(
    client: Client, target: Target
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    async with worker(client, queue, target.url):
        handle = await client.start_workflow(
            ChatWorkflow.run, ChatInput(session_id, MESSAGES), id=workflow_id, task_queue=queue
        )
        first = await result_of(handle)
        history = await handle.fetch_history()
        commit_one = next(r for r in activity_runs(history) if r.name == "txsessions.commit")
        point = task_completed_after(history, commit_one.completed_event_id)
        new_run = await reset_to(client, workflow_id, handle.result_run_id or "", point)
        second = await result_of(client.get_workflow_handle(workflow_id, run_id=new_run))
    assert second[0] == first[0] and second[1:] != first[1:]  # turns 2, 3 answered anew
    store = await target.open()
    held = await stored(store, session_id)
    assert_each_once(held.users(), MESSAGES)
    assert held.answers() == second  # the new run's answers, the replaced run's hidden
    assert held.turns == 3
    history = await client.get_workflow_handle(workflow_id, run_id=new_run).fetch_history()
    commits = [r for r in activity_runs(history) if r.name == "txsessions.commit"]
    # The new run's first commit of its own (turn 2) hid the replaced run's turns 2 and 3.
    assert [json.loads(r.result)["hidden"] for r in commits] == [0, 2, 0]
    assert await replay_all(client, workflow_id, runs=2) == 2


async def test_a_retried_workflow_hides_its_failed_attempts_turns_and_commits_its_own_once(
    client: Client, target: Target
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    async with worker(client, queue, target.url):
        await client.start_workflow(
            ChatWorkflow.run,
            ChatInput(session_id, MESSAGES, fail_first_attempt_after=2),
            id=workflow_id,
            task_queue=queue,
            retry_policy=RetryPolicy(maximum_attempts=2, initial_interval=timedelta(seconds=0.2)),
        )
        answers = await result_of(client.get_workflow_handle(workflow_id))
    held = await stored(await target.open(), session_id)
    assert_each_once(held.users(), MESSAGES)  # the failed attempt's two turns are hidden
    assert held.answers() == answers and held.turns == len(MESSAGES)
    assert await replay_all(client, workflow_id, runs=2) == 2


async def test_an_approval_pauses_survives_a_worker_sigkill_and_resumes_on_the_update(
    client: Client, target: Target, temporal_address: str, worker_log: Path
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    first = WorkerProcess(temporal_address, queue, target.url, worker_log)
    try:
        handle = await client.start_workflow(
            ApprovalWorkflow.run,
            ChatInput(session_id, ["transfer five"], timeout_seconds=3),
            id=workflow_id,
            task_queue=queue,
        )
        await _until(lambda: handle.query(ApprovalWorkflow.waiting), first)
        paused = await stored(await target.open(), session_id)
        assert len(paused.of_type("function_call")) == 1 and not paused.of_type(
            "function_call_output"
        )
        first.kill()
        second = WorkerProcess(temporal_address, queue, target.url, worker_log)
        try:
            assert await handle.execute_update(ApprovalWorkflow.decide, True) == "approved"
            answer = await result_of(handle)
        finally:
            second.stop()
    finally:
        first.kill()
    held = await stored(await target.open(), session_id)
    assert len(held.of_type("function_call")) == 1
    outputs = held.of_type("function_call_output")
    assert [o["output"] for o in outputs] == ["transferred 5"]
    assert held.answers() == [answer] and held.users() == ["transfer five"]
    assert held.turns == 2  # the paused run's turn, the resumed run's turn
    assert await replay_all(client, workflow_id) == 1


async def test_continue_as_new_carries_the_session_on_without_its_items(
    client: Client, target: Target
) -> None:
    workflow_id, session_id = _ids()
    queue = new_queue()
    messages = ["m1", "m2", "m3", "m4", "m5"]
    async with worker(client, queue, target.url):
        handle = await client.start_workflow(
            ChatWorkflow.run,
            ChatInput(session_id, messages, per_run=2),
            id=workflow_id,
            task_queue=queue,
        )
        last = await result_of(client.get_workflow_handle(workflow_id))
    store = await target.open()
    held = await stored(store, session_id)
    assert_each_once(held.users(), messages)
    assert held.answers()[-1:] == last and held.turns == 5
    session = store.session(session_id)
    tags = [turn.run_id for turn in await session.turns()]
    await session.close()
    lineage = lineage_of(workflow_id, handle.first_execution_run_id or handle.result_run_id or "")
    assert tags == [turn_tag(lineage, n) for n in range(1, 6)]  # positions go on across runs
    assert await replay_all(client, workflow_id, runs=3) == 3


async def _until(check: Any, process: WorkerProcess, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if await check():
                return
        except Exception:  # noqa: BLE001 - the workflow has not run far enough yet
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never reached; worker said: {process.stop()}")
        await asyncio.sleep(0.2)
