"""What the Temporal tests share: a client with the OpenAI Agents plugin, workers in
this process or in child processes (killed with real signals), the Replayer, and the
checks of what the store holds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Replayer, Worker

from sessions import Store
from sessions.temporal import SessionsPlugin
from tests.temporal.faults import CommitFaults
from tests.temporal.model import EchoProvider
from tests.temporal.turn_activity import agent_turn
from tests.temporal.workflows import WORKFLOWS

ROOT = Path(__file__).resolve().parents[2]


def agents_plugin() -> OpenAIAgentsPlugin:
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=10)),
        model_provider=EchoProvider(),
    )


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[agents_plugin()])


def new_queue() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def worker(
    client: Client, queue: str, store_url: str, fault: str = "none"
) -> AsyncIterator[Worker]:
    """A worker in this process (its plugin opens the store at ``store_url``)."""
    running = Worker(
        client,
        task_queue=queue,
        workflows=WORKFLOWS,
        activities=[agent_turn],
        plugins=[SessionsPlugin(store_url)],
        interceptors=[CommitFaults(fault)],
    )
    # run() in a task of its own and shutdown(), not ``async with``: temporalio 1.33's
    # context manager leaves a cancellation on the task that leaves it.
    task = asyncio.create_task(running.run())
    try:
        yield running
    finally:
        await running.shutdown()
        await task


class WorkerProcess:
    """A worker in a child process (``worker_main.py``)."""

    def __init__(
        self, address: str, queue: str, store_url: str, log: Path, fault: str = "none"
    ) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.temporal.worker_main", address, queue, store_url]
                + [fault],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def wait_killed(self, timeout: float = 60.0) -> int:
        """Wait for the process to die (a fault's SIGKILL); its exit status."""
        code = await asyncio.to_thread(self.process.wait, timeout)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> str:
        """Stop it (SIGTERM, then SIGKILL); what it printed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.log.read_text(errors="replace")


async def replay_all(client: Client, workflow_id: str, runs: int = 1) -> int:
    """Replay every run of ``workflow_id`` (``runs`` of them, waited for in the
    visibility store) with temporalio's Replayer; a nondeterminism error raises. Returns
    how many runs were replayed."""
    replayer = Replayer(
        workflows=WORKFLOWS, plugins=[agents_plugin(), SessionsPlugin("sqlite:///:memory:")]
    )
    query = f"WorkflowId = '{workflow_id}'"
    for _ in range(100):  # the dev server's visibility store lags its history a little
        listed = [execution.run_id async for execution in client.list_workflows(query)]
        if len(listed) >= runs:
            break
        await asyncio.sleep(0.1)
    for run_id in listed:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        await replayer.replay_workflow(history)
    return len(listed)


@dataclass(frozen=True)
class Stored:
    """What the store holds for a session: its visible turns and items."""

    turns: int
    items: list[Any]

    def users(self) -> list[str]:
        return [str(i["content"]) for i in self.items if i.get("role") == "user"]

    def answers(self) -> list[str]:
        return [
            str(i["content"][0]["text"])
            for i in self.items
            if i.get("role") == "assistant" and isinstance(i.get("content"), list)
        ]

    def of_type(self, kind: str) -> list[Any]:
        return [i for i in self.items if i.get("type") == kind]


async def stored(store: Store[Any], session_id: str) -> Stored:
    session = store.session(session_id)
    try:
        turns = await session.turns()
        return Stored(len(turns), await session.get_items())
    finally:
        await session.close()


def assert_each_once(found: Sequence[str], expected: Sequence[str]) -> None:
    """Every expected message stored once, in order: nothing lost, nothing duplicated."""
    assert list(found) == list(expected), f"stored {found!r}, expected {expected!r}"


async def result_of(handle: WorkflowHandle[Any, Any], timeout: float = 45.0) -> Any:
    return await asyncio.wait_for(handle.result(), timeout)


@dataclass(frozen=True)
class ActivityRun:
    """One activity of a workflow history: its type, attempts, and result size."""

    name: str
    attempts: int
    result: bytes
    completed_event_id: int

    @property
    def result_bytes(self) -> int:
        return len(self.result)


def activity_runs(history: Any) -> list[ActivityRun]:
    """The completed activities of a history (``WorkflowHistory``), in order."""
    from temporalio.api.enums.v1 import EventType

    names: dict[int, str] = {}
    attempts: dict[int, int] = {}
    runs: list[ActivityRun] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            attempts[started.scheduled_event_id] = started.attempt
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            data = b"".join(p.data for p in done.result.payloads)
            scheduled = done.scheduled_event_id
            runs.append(ActivityRun(names[scheduled], attempts[scheduled], data, event.event_id))
    return runs


def task_completed_after(history: Any, event_id: int) -> int:
    """The id of the first WorkflowTaskCompleted event after ``event_id``."""
    from temporalio.api.enums.v1 import EventType

    for event in history.events:
        if (
            event.event_id > event_id
            and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ):
            return int(event.event_id)
    raise AssertionError(f"no workflow task completed after event {event_id}")


async def reset_to(client: Client, workflow_id: str, run_id: str, event_id: int) -> str:
    """Reset the run to the workflow task completed at ``event_id``; the new run's id."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest

    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            reason="test: go back to an earlier turn",
            workflow_task_finish_event_id=event_id,
            request_id=uuid.uuid4().hex,
        )
    )
    return str(response.run_id)
