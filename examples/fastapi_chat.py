"""A streaming chat server (FastAPI, server-sent events) whose history survives clients
that disconnect mid-answer.

Run it with one command (uvicorn on http://127.0.0.1:8000)::

    python examples/fastapi_chat.py

then, in another terminal::

    curl -N -X POST 127.0.0.1:8000/chat/alice -H 'content-type: application/json' \\
         -d '{"message": "Hello!"}'
    curl 127.0.0.1:8000/chat/alice/history

How it stays whole:

* One store, opened at startup (lifespan) from ``SESSIONS_DATABASE_URL`` - for example
  ``sqlite:///chat.db`` or ``postgresql://user@host/db`` - else ``sqlite:///chat.db``,
  is shared by every request; each request takes a cheap ``store.session(id)``.
* Each turn runs in a task of its own, not in the response generator: the agent run and
  the ``session.transaction()`` around it finish (and commit) whether or not the client
  is still listening. The response only relays the run's events from a queue; when the
  client disconnects, the server drops the relay, never the turn.
* The turns of one conversation run one after another (a lock per conversation), so a
  turn always sees the whole previous turn; ``GET .../history`` waits for them too.
* At shutdown, running turns get ``CHAT_SHUTDOWN_GRACE`` seconds (default 10) to finish;
  any still running are cancelled, which rolls them back whole.

The model is OpenAI's (the SDK default, or ``OPENAI_MODEL``) when ``OPENAI_API_KEY`` is
set; otherwise an offline one built on ``agents.testing.ScriptedModel`` that replies from
the conversation history, word by word (``CHAT_STREAM_DELAY`` seconds apart, default
0.05), so that the streaming and the disconnects are easy to watch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agents import Agent, Model, RunConfig, Runner
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from openai.types.responses import ResponseTextDeltaEvent
from pydantic import BaseModel, Field

from sessions import Store, open_store
from sessions.errors import InvalidSessionIdError

logger = logging.getLogger("fastapi_chat")

DEFAULT_DATABASE_URL = "sqlite:///chat.db"
INSTRUCTIONS = "You are a helpful, concise assistant."


# --------------------------------------------------------------------------- the model


def _user_texts(model_input: Any) -> list[str]:
    if isinstance(model_input, str):
        return [model_input]
    return [
        str(item.get("content"))
        for item in model_input
        if isinstance(item, dict) and item.get("role") == "user"
    ]


class OfflineModel(Model):
    """Replies without a network: a fresh ``ScriptedModel`` per call, answering from the
    history it is given, its text deltas split into words ``delay`` seconds apart."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    @staticmethod
    def reply(call: ModelCall) -> list[Any]:
        said = _user_texts(call.input)
        text = f"Turn {len(said)}. You said: {said[-1]!r}."
        if len(said) > 1:
            text += f" Before that you said: {said[-2]!r}."
        text += " (This is the offline model; set OPENAI_API_KEY for a real one.)"
        return [assistant_message(text)]

    def _script(self) -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(self.reply)])

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        return await self._script().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        sequence = 0
        async for event in self._script().stream_response(*args, **kwargs):
            if isinstance(event, ResponseTextDeltaEvent):
                for word in re.findall(r"\S+\s*", event.delta):
                    await asyncio.sleep(self.delay)
                    yield event.model_copy(update={"delta": word, "sequence_number": sequence})
                    sequence += 1
                continue
            yield event.model_copy(update={"sequence_number": sequence})
            sequence += 1


def build_agent() -> tuple[Agent[Any], RunConfig]:
    if os.environ.get("OPENAI_API_KEY"):
        agent: Agent[Any] = Agent(
            name="assistant", instructions=INSTRUCTIONS, model=os.environ.get("OPENAI_MODEL")
        )
        return agent, RunConfig()
    delay = float(os.environ.get("CHAT_STREAM_DELAY", "0.05"))
    agent = Agent(name="assistant", instructions=INSTRUCTIONS, model=OfflineModel(delay))
    return agent, RunConfig(tracing_disabled=True)


# --------------------------------------------------------------------------- the turns


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class ChatService:
    """Runs turns to completion in tasks of their own and relays their events."""

    def __init__(self, store: Store[Any], agent: Agent[Any], config: RunConfig) -> None:
        self.store = store
        self.agent = agent
        self.config = config
        self._tasks: set[asyncio.Task[None]] = set()
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def _turn_of(self, conversation_id: str) -> AsyncIterator[None]:
        """Serialize the turns of one conversation; forget the lock when idle."""
        lock, users = self._locks.get(conversation_id, (asyncio.Lock(), 0))
        self._locks[conversation_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[conversation_id]
            if users == 1:
                del self._locks[conversation_id]
            else:
                self._locks[conversation_id] = (lock, users - 1)

    def start_turn(
        self, conversation_id: str, message: str
    ) -> tuple[asyncio.Queue[bytes | None], asyncio.Task[None]]:
        """Start a turn now; its events arrive on the returned queue (``None`` ends it)."""
        session = self.store.session(conversation_id)  # validates the id, no I/O
        events: asyncio.Queue[bytes | None] = asyncio.Queue()
        task = asyncio.create_task(self._run_turn(session, message, events))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return events, task

    async def _run_turn(
        self, session: Any, message: str, events: asyncio.Queue[bytes | None]
    ) -> None:
        try:
            async with self._turn_of(session.session_id):
                # Commits on normal exit, rolls back on any error or cancellation. It
                # runs in this task, so a client that goes away cannot interrupt it.
                async with session.transaction():
                    result = Runner.run_streamed(
                        self.agent, message, session=session, run_config=self.config
                    )
                    async for event in result.stream_events():
                        if event.type == "raw_response_event" and isinstance(
                            event.data, ResponseTextDeltaEvent
                        ):
                            events.put_nowait(_sse("delta", {"text": event.data.delta}))
                events.put_nowait(_sse("done", {"text": str(result.final_output)}))
        except Exception as exc:
            logger.exception("turn of conversation %r failed; rolled back", session.session_id)
            events.put_nowait(_sse("error", {"error": f"{type(exc).__name__}: {exc}"}))
        finally:
            events.put_nowait(None)
            await session.close()

    async def history(self, conversation_id: str) -> list[Any]:
        """The stored history, after the turns already started for it have finished."""
        session = self.store.session(conversation_id)
        try:
            async with self._turn_of(conversation_id):
                items: list[Any] = await session.get_items()
                return items
        finally:
            await session.close()

    async def aclose(self, grace: float) -> None:
        """Let running turns finish (cancel, and so roll back, those that do not)."""
        if self._tasks:
            logger.info("waiting up to %.1fs for %d running turn(s)", grace, len(self._tasks))
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self.store.close()


# --------------------------------------------------------------------------- the app


class ChatRequest(BaseModel):
    message: str = Field(min_length=1, max_length=20_000)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = os.environ.get("SESSIONS_DATABASE_URL", DEFAULT_DATABASE_URL)
    store = await open_store(url)
    agent, config = build_agent()
    service = ChatService(store, agent, config)
    app.state.chat = service
    try:
        yield
    finally:
        await service.aclose(float(os.environ.get("CHAT_SHUTDOWN_GRACE", "10")))


app = FastAPI(title="txsessions streaming chat", lifespan=lifespan)


def _service(request: Request) -> ChatService:
    service: ChatService = request.app.state.chat
    return service


@app.post("/chat/{conversation_id}")
async def chat(conversation_id: str, body: ChatRequest, request: Request) -> StreamingResponse:
    """Stream the answer as server-sent events: ``delta`` ..., then ``done`` or ``error``."""
    try:
        events, turn = _service(request).start_turn(conversation_id, body.message)
    except InvalidSessionIdError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None

    async def relay() -> AsyncIterator[bytes]:
        finished = False
        try:
            while (chunk := await events.get()) is not None:
                yield chunk
            finished = True
        finally:
            if not finished:
                logger.info(
                    "client of conversation %r went away %s",
                    conversation_id,
                    "after its turn had ended"
                    if turn.done()
                    else "mid-answer; the turn runs on and commits",
                )

    return StreamingResponse(
        relay(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@app.get("/chat/{conversation_id}/history")
async def history(conversation_id: str, request: Request) -> dict[str, Any]:
    try:
        items = await _service(request).history(conversation_id)
    except InvalidSessionIdError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    return {"conversation_id": conversation_id, "items": items}


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
