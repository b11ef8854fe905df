"""``examples/fastapi_chat.py`` under a real uvicorn server, with real clients that hang up.

The server runs as its own process (``python examples/fastapi_chat.py --port N``) on a
real SQLite file, with the offline model streaming word by word. A real httpx client
starts 30 turns and disconnects from each at a different point of its answer (from
right after the headers to a few words in). Then:

* most of the 30 disconnects land while their turn is still running (the server logs
  each dropped relay, saying whether its turn had ended), so they really cut turns;
* every one of the 30 turns is stored whole (user message + its complete answer), each
  as one batch of two contiguous rows - the commits did not depend on the responses;
* the next request continues the conversation: its answer is built from the history;
* the server shuts down cleanly on SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from sessions import SQLiteStore  # noqa: E402
from tests.helpers import free_port, wait_until_healthy  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_chat.py"
DISCONNECTS = 30
CONVERSATION = "alice"


def read_events(lines: Any, stop_after_deltas: int | None) -> list[tuple[str, Any]]:
    """Parse server-sent events; stop once ``stop_after_deltas`` deltas were read."""
    events: list[tuple[str, Any]] = []
    name = None
    if stop_after_deltas == 0:
        return events
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((str(name), json.loads(line.removeprefix("data: "))))
            deltas = sum(1 for kind, _ in events if kind == "delta")
            if stop_after_deltas is not None and deltas >= stop_after_deltas:
                break
    return events


def answer_text(item: dict[str, Any]) -> str:
    return "".join(part["text"] for part in item["content"])


def _read_from_start(log: IO[str]) -> str:
    log.seek(0)
    return log.read()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    port = free_port()
    db = tmp_path / "chat.db"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # offline model
    env.update(SESSIONS_DATABASE_URL=f"sqlite:///{db}", CHAT_STREAM_DELAY="0.005")
    log = open(tmp_path / "server.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(proc, base, 30, lambda: _read_from_start(log))
        yield proc, base, db, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_turns_survive_clients_that_disconnect_and_the_conversation_continues(
    server: Any,
) -> None:
    proc, base, db, log = server
    url = f"{base}/chat/{CONVERSATION}"
    with httpx.Client(timeout=20) as client:
        for i in range(1, DISCONNECTS + 1):
            with client.stream("POST", url, json={"message": f"message {i}"}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                events = read_events(response.iter_lines(), stop_after_deltas=i % 4)
            # We hung up before the answer was complete.
            assert all(kind == "delta" for kind, _ in events), events
            assert len(events) == i % 4

        # /history waits for the turns already started, then reads the store.
        stored = client.get(f"{url}/history").json()["items"]
        assert len(stored) == 2 * DISCONNECTS
        for i in range(1, DISCONNECTS + 1):
            user, answer = stored[2 * i - 2], stored[2 * i - 1]
            assert user == {"role": "user", "content": f"message {i}"}
            assert answer["role"] == "assistant"
            assert answer_text(answer).startswith(f"Turn {i}. You said: 'message {i}'.")

        # A client that stays to the end gets an answer built from the whole history.
        with client.stream("POST", url, json={"message": "still there?"}) as response:
            events = read_events(response.iter_lines(), stop_after_deltas=None)
        assert events[-1][0] == "done", events
        streamed = "".join(data["text"] for kind, data in events if kind == "delta")
        assert streamed == events[-1][1]["text"]
        assert streamed.startswith(
            f"Turn {DISCONNECTS + 1}. You said: 'still there?'. "
            f"Before that you said: 'message {DISCONNECTS}'."
        )

    # Clean shutdown: lifespan closes the store after the turns finished.
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    log.seek(0)
    server_log = log.read()
    assert "Application shutdown complete" in server_log, server_log
    assert "Traceback" not in server_log, server_log
    # Count the disconnects that landed while their turn was still running (the server
    # says so when it drops a relay): most must, or the test did not test disconnects.
    mid_answer = server_log.count("went away mid-answer; the turn runs on")
    late = server_log.count("went away after its turn had ended")
    print(f"server: {mid_answer} of {DISCONNECTS} clients left mid-answer, {late} after the turn")
    assert mid_answer > DISCONNECTS // 2, server_log

    # No torn batch: each turn is one batch of two contiguous rows, in order.
    with sqlite3.connect(db) as conn:
        batches = conn.execute(
            "SELECT min(seq), max(seq), count(*) FROM txs_items WHERE session_id = ? "
            "GROUP BY batch_id ORDER BY min(seq)",
            (CONVERSATION,),
        ).fetchall()
    assert len(batches) == DISCONNECTS + 1
    assert all(count == 2 and last == first + 1 for first, last, count in batches), batches

    async def reread() -> list[Any]:
        store = await SQLiteStore.open(db)
        try:
            return await store.session(CONVERSATION).get_items()
        finally:
            await store.close()

    items = asyncio.run(reread())
    assert len(items) == 2 * (DISCONNECTS + 1)
    assert items[:-2] == stored
