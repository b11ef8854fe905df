"""Human in the loop over HTTP: a tool that needs approval, decided in a later request.

Run it with one command (uvicorn on http://127.0.0.1:8000)::

    python examples/approvals.py

then, in another terminal::

    curl -X POST 127.0.0.1:8000/chat/ops -H 'content-type: application/json' \\
         -d '{"message": "delete ann"}'
    # -> {"status": "needs_approval", "version": 1, "approvals": [...]}
    curl -X POST 127.0.0.1:8000/chat/ops/approval -H 'content-type: application/json' \\
         -d '{"version": 1, "approve": true}'
    # -> {"status": "done", "answer": "Done: deleted ann."}
    curl 127.0.0.1:8000/chat/ops

How it stays consistent (see ``docs/approvals.md``):

* Request 1 runs until the tool asks for approval. The run's items (the user's message,
  the tool call) and the run state (``result.to_state()``) are committed together, in one
  transaction: ``session.stage_run_state(...)`` inside ``session.transaction()``. The
  state is never handed to the client; the client gets its version, like an ETag.
* Request 2 decides. First it commits the decision alone (the state, approved or
  rejected, label ``decided``), checked against the version the client saw: two clicks
  on "approve" cannot both win. Only then does it resume the run, which runs the tool,
  and commits the tool's output, the answer and the removal of the state together.
* So the tool runs at most once per approval: a request that crashes after the decision
  was committed leaves the state ``decided``, and a retry with the old version is refused
  (409). Such an approval is closed with ``POST .../approval/abandon``, which records that
  the outcome is unknown instead of running the tool again.

The model is OpenAI's when ``OPENAI_API_KEY`` is set; otherwise an offline one built on
``agents.testing.ScriptedModel``: "delete NAME" calls the tool, anything else is echoed.
The tool appends a line per run to ``APPROVALS_TOOL_LOG`` (default ``tool-runs.log``).
``APPROVALS_PAUSE_AT`` names a point where a request stops (for the crash tests:
``run-before-commit``, ``decide-before-commit``, ``resume-start``, ``resume-before-commit``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agents import Agent, Model, RunConfig, RunContextWrapper, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from sessions import BufferedSession, Store, open_store
from sessions.errors import CommitConflictError, InvalidSessionIdError

logger = logging.getLogger("approvals")

DEFAULT_DATABASE_URL = "sqlite:///approvals.db"
WAITING, DECIDED = "waiting", "decided"


# --------------------------------------------------------------------------- the agent


@function_tool(needs_approval=True)
def delete_account(ctx: RunContextWrapper[Any], user: str) -> str:
    """Delete the user's account (irreversible)."""
    with open(os.environ.get("APPROVALS_TOOL_LOG", "tool-runs.log"), "a") as log:
        log.write(f"{ctx.context['conversation']} {user}\n")
        log.flush()
        os.fsync(log.fileno())
    return f"deleted {user}"


def _offline_reply(call: ModelCall) -> list[Any]:
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if last.get("type") == "function_call_output":
        output = str(last.get("output"))
        if output.startswith("deleted "):
            return [assistant_message(f"Done: {output}.")]
        return [assistant_message(f"Not done: {output}")]
    text = str(last.get("content", ""))
    match = re.fullmatch(r"delete (\w+)", text.strip())
    if match is None:
        return [assistant_message(f"You said: {text!r}.")]
    arguments = {"user": match.group(1)}
    return [function_call("delete_account", arguments, call_id=f"call-{len(call.input)}")]


class OfflineModel(Model):
    """Answers without a network: a fresh ``ScriptedModel`` per call, from the input."""

    def _script(self) -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(_offline_reply)])

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        return await self._script().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in self._script().stream_response(*args, **kwargs):
            yield event


def build_agent() -> tuple[Agent[Any], RunConfig]:
    instructions = "You administer accounts. Use delete_account when asked to delete one."
    if os.environ.get("OPENAI_API_KEY"):
        agent: Agent[Any] = Agent(name="admin", instructions=instructions, tools=[delete_account])
        return agent, RunConfig()
    agent = Agent(
        name="admin", instructions=instructions, model=OfflineModel(), tools=[delete_account]
    )
    return agent, RunConfig(tracing_disabled=True)


# --------------------------------------------------------------------------- the flow


async def _pause(point: str) -> None:
    """For the crash tests: stop here (forever) if ``APPROVALS_PAUSE_AT`` names ``point``."""
    if os.environ.get("APPROVALS_PAUSE_AT") == point:
        logger.warning("paused at %s", point)
        await asyncio.Event().wait()


def _pending(result_or_state: Any) -> list[dict[str, Any]]:
    items = getattr(result_or_state, "interruptions", None)
    if items is None:
        items = result_or_state.get_interruptions()
    return [
        {
            "tool": item.tool_name,
            "arguments": json.loads(item.arguments or "{}"),
            "call_id": item.call_id,
        }
        for item in items
    ]


class Approvals:
    """Turns and decisions of many conversations over one store."""

    def __init__(self, store: Store[Any], agent: Agent[Any], config: RunConfig) -> None:
        self.store = store
        self.agent = agent
        self.config = config
        # One lock per conversation, forgotten when no request holds it.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _session(self, conversation_id: str) -> BufferedSession:
        session: BufferedSession = self.store.session(conversation_id)
        return session

    def _lock(self, conversation_id: str) -> asyncio.Lock:
        lock = self._locks.get(conversation_id)
        if lock is None:
            lock = self._locks[conversation_id] = asyncio.Lock()
        return lock

    async def _run(self, session: BufferedSession, run_input: Any) -> Any:
        """One run inside the caller's transaction; its state is saved if it stops."""
        context = {"conversation": session.session_id}
        result = await Runner.run(
            self.agent, run_input, session=session, context=context, run_config=self.config
        )
        resumed = not isinstance(run_input, str)
        if result.interruptions:
            session.stage_run_state(result.to_state(), label=WAITING)
        elif resumed:  # the run this state described is complete
            session.discard_run_state()
        await _pause("resume-before-commit" if resumed else "run-before-commit")
        return result

    async def _answer(self, session: BufferedSession, result: Any) -> dict[str, Any]:
        if not result.interruptions:
            return {"status": "done", "answer": str(result.final_output)}
        record = await session.run_state_record()
        return {
            "status": "needs_approval",
            "version": record.version,
            "approvals": _pending(result),
        }

    async def message(self, conversation_id: str, text: str) -> dict[str, Any]:
        session = self._session(conversation_id)
        async with self._lock(conversation_id):
            try:
                async with session.transaction():
                    record = await session.run_state_record()  # the version checked at commit
                    if record.text is not None:
                        raise HTTPException(409, f"an approval is pending ({record.label})")
                    result = await self._run(session, text)
            except CommitConflictError:
                raise HTTPException(409, "another request changed this conversation") from None
            return await self._answer(session, result)

    async def decide(self, conversation_id: str, version: int, approve: bool) -> dict[str, Any]:
        session = self._session(conversation_id)
        async with self._lock(conversation_id):
            await self._commit_decision(session, version, approve)
            await _pause("resume-start")
            async with session.transaction():
                state = await session.load_run_state(self.agent)
                result = await self._run(session, state)
            return await self._answer(session, result)

    async def _commit_decision(self, session: BufferedSession, version: int, approve: bool) -> None:
        """Commit the decision alone: once it is stored, the tool never runs a second time."""
        try:
            async with session.transaction():
                record = await session.run_state_record()
                if record.text is None:
                    raise HTTPException(404, "no approval is pending")
                if (record.version, record.label) != (version, WAITING):
                    raise HTTPException(
                        409,
                        f"version {version} was already acted on; now version "
                        f"{record.version} ({record.label})",
                    )
                state = await session.load_run_state(self.agent)
                for item in state.get_interruptions():
                    if approve:
                        state.approve(item)
                    else:
                        state.reject(item)
                session.stage_run_state(state, label=DECIDED)
                await _pause("decide-before-commit")
        except CommitConflictError:
            raise HTTPException(409, f"version {version} was just acted on") from None

    async def abandon(self, conversation_id: str, version: int) -> dict[str, Any]:
        """Close an approval whose resume did not finish: its outcome is unknown."""
        session = self._session(conversation_id)
        async with self._lock(conversation_id):
            try:
                async with session.transaction():
                    record = await session.run_state_record()
                    if record.text is None or record.version != version:
                        raise HTTPException(409, f"no approval at version {version}")
                    state = await session.load_run_state(self.agent)
                    await session.add_items(
                        [
                            {
                                "type": "function_call_output",
                                "call_id": item["call_id"],
                                "output": "outcome unknown: the server stopped while it ran",
                            }
                            for item in _pending(state)
                        ]
                    )
                    session.discard_run_state()
            except CommitConflictError:
                raise HTTPException(409, f"version {version} was just acted on") from None
        return {"status": "abandoned"}

    async def show(self, conversation_id: str) -> dict[str, Any]:
        session = self._session(conversation_id)
        async with self._lock(conversation_id):
            record = await session.run_state_record()
            items = await session.get_items()
        approval = None
        if record.text is not None:
            approval = {"version": record.version, "label": record.label}
        return {"items": items, "approval": approval}


# --------------------------------------------------------------------------- the app


class MessageRequest(BaseModel):
    message: str = Field(min_length=1, max_length=20_000)


class Decision(BaseModel):
    version: int = Field(ge=1)
    approve: bool = True


class Version(BaseModel):
    version: int = Field(ge=1)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    store = await open_store(os.environ.get("SESSIONS_DATABASE_URL", DEFAULT_DATABASE_URL))
    agent, config = build_agent()
    app.state.approvals = Approvals(store, agent, config)
    try:
        yield
    finally:
        await store.close()


app = FastAPI(title="txsessions approvals", lifespan=lifespan)


def _approvals(request: Request) -> Approvals:
    approvals: Approvals = request.app.state.approvals
    return approvals


async def _guard(call: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = await call
    except InvalidSessionIdError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    return result


@app.post("/chat/{conversation_id}")
async def post_message(conversation_id: str, body: MessageRequest, request: Request) -> Any:
    return await _guard(_approvals(request).message(conversation_id, body.message))


@app.post("/chat/{conversation_id}/approval")
async def post_decision(conversation_id: str, body: Decision, request: Request) -> Any:
    return await _guard(_approvals(request).decide(conversation_id, body.version, body.approve))


@app.post("/chat/{conversation_id}/approval/abandon")
async def post_abandon(conversation_id: str, body: Version, request: Request) -> Any:
    return await _guard(_approvals(request).abandon(conversation_id, body.version))


@app.get("/chat/{conversation_id}")
async def get_conversation(conversation_id: str, request: Request) -> Any:
    return await _guard(_approvals(request).show(conversation_id))


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
