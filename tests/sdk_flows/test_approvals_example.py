"""``examples/approvals.py`` under a real uvicorn server, killed with SIGKILL at every step.

The server runs as its own process on a real SQLite file, with the offline model; a
real httpx client talks to it. Request 1 ("delete NAME") stops for approval; request 2
approves or rejects and resumes. The server is killed between the requests and in the
middle of each (``APPROVALS_PAUSE_AT`` stops a request at a named point: just before the
commit of request 1, just before the commit of the decision, after the decision was
committed and before the resume, after the tool ran and before the resume's commit) and
restarted on the same database. After every step:

* history and saved state agree: a waiting or decided state exists exactly when the
  history ends with the tool call it is about (no orphan call, no state for history
  that was rolled back);
* the tool ran at most once per approval (it appends a line per run to a file), and
  exactly once when an approval went through.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.helpers import free_port, wait_until_healthy  # noqa: E402
from tests.sdk import need_sdk  # noqa: E402

pytestmark = pytest.mark.sdk_flow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals.py"
START_TIMEOUT = 60.0


class Server:
    """The example as a process of its own, on a database that outlives it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.db = tmp_path / "approvals.db"
        self.tool_log = tmp_path / "tool-runs.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = tmp_path / "server.log"
        self.base = ""
        self.starts = 0

    def start(self, pause_at: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",)}
        env.update(
            SESSIONS_DATABASE_URL=f"sqlite:///{self.db}", APPROVALS_TOOL_LOG=str(self.tool_log)
        )
        env.pop("APPROVALS_PAUSE_AT", None)
        if pause_at is not None:
            env["APPROVALS_PAUSE_AT"] = pause_at
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.starts += 1
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes to it
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.tmp_path,
        )
        log.close()
        wait_until_healthy(self.proc, self.base, START_TIMEOUT, self.log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", json=body, timeout=30)

    def show(self, conversation: str) -> dict[str, Any]:
        response = httpx.get(f"{self.base}/chat/{conversation}", timeout=30)
        assert response.status_code == 200, response.text
        shown: dict[str, Any] = response.json()
        return shown

    def post_and_kill_when_paused(self, path: str, body: dict[str, Any], point: str) -> None:
        """Send a request that the server stops at ``point``; kill the server there."""
        marker = f"paused at {point}"
        before = self.log().count(marker)
        outcome: list[BaseException | httpx.Response] = []

        def send() -> None:
            try:
                outcome.append(httpx.post(f"{self.base}{path}", json=body, timeout=START_TIMEOUT))
            except httpx.TransportError as exc:  # the server died under the request
                outcome.append(exc)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        deadline = time.monotonic() + START_TIMEOUT
        while self.log().count(marker) == before:
            assert time.monotonic() < deadline, f"never {marker}:\n{self.log()}"
            time.sleep(0.05)
        self.kill()
        sender.join(START_TIMEOUT)
        assert len(outcome) == 1 and isinstance(outcome[0], httpx.TransportError), outcome

    def tool_runs(self, conversation: str) -> int:
        if not self.tool_log.exists():
            return 0
        return sum(
            1 for line in self.tool_log.read_text().splitlines() if line.split()[0] == conversation
        )


@pytest.fixture
def server(tmp_path: Path) -> Any:
    need_sdk("approvals")
    need_sdk("agents.testing")  # the example's offline model
    s = Server(tmp_path)
    yield s
    s.stop()


def consistent(server: Server, conversation: str) -> dict[str, Any]:
    """History and state agree; returns what the server shows."""
    shown = server.show(conversation)
    items, approval = shown["items"], shown["approval"]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    open_calls = [call for call in calls if call not in outputs]
    if approval is None:
        assert open_calls == [], f"a tool call without output and no state: {items}"
    else:
        assert items and items[-1].get("type") == "function_call", items
        assert open_calls == [items[-1]["call_id"]], items
    assert len(outputs) == len(set(outputs)), items  # no output twice
    return shown


def ask(server: Server, conversation: str, user: str) -> int:
    response = server.post(f"/chat/{conversation}", {"message": f"delete {user}"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "needs_approval", body
    assert body["approvals"][0]["arguments"] == {"user": user}
    version: int = body["version"]
    return version


def decide(server: Server, conversation: str, version: int, approve: bool) -> httpx.Response:
    return server.post(f"/chat/{conversation}/approval", {"version": version, "approve": approve})


def test_approvals_survive_kills_between_and_during_requests_and_tools_run_at_most_once(
    server: Server,
) -> None:
    # Killed during request 1, just before its commit: nothing of it remains.
    server.start(pause_at="run-before-commit")
    server.post_and_kill_when_paused("/chat/a", {"message": "delete ann"}, "run-before-commit")

    # Killed between the requests: every approval waits in the database.
    server.start()
    assert consistent(server, "a") == {"items": [], "approval": None}
    versions = {
        c: ask(server, c, user)
        for c, user in zip("abcde", ["ann", "bob", "cy", "di", "eve"], strict=True)
    }
    server.kill()
    server.start()
    for conversation, version in versions.items():
        assert consistent(server, conversation)["approval"] == {
            "version": version,
            "label": "waiting",
        }
    done = decide(server, "a", versions["a"], approve=True)
    assert done.json() == {"status": "done", "answer": "Done: deleted ann."}, done.text
    assert server.tool_runs("a") == 1 and consistent(server, "a")["approval"] is None
    assert decide(server, "a", versions["a"], approve=True).status_code == 404  # spent
    rejected = decide(server, "e", versions["e"], approve=False)  # the tool never runs
    assert rejected.json()["status"] == "done" and "Not done" in rejected.json()["answer"]
    assert server.tool_runs("e") == 0 and consistent(server, "e")["approval"] is None
    server.stop()

    # Killed during request 2: before its decision was committed (b); after it was
    # committed, before the tool ran (c); after the tool ran, before its output was
    # committed (d).
    for conversation, point in (
        ("b", "decide-before-commit"),
        ("c", "resume-start"),
        ("d", "resume-before-commit"),
    ):
        server.start(pause_at=point)
        body = {"version": versions[conversation], "approve": True}
        server.post_and_kill_when_paused(f"/chat/{conversation}/approval", body, point)

    server.start()
    # b: the decision never happened; approving now works, and the tool runs once.
    assert consistent(server, "b")["approval"] == {"version": versions["b"], "label": "waiting"}
    assert decide(server, "b", versions["b"], approve=True).json()["status"] == "done"
    assert server.tool_runs("b") == 1
    # c and d: the approval is spent. A retry is refused and the tool does not run (again).
    for conversation, runs in (("c", 0), ("d", 1)):
        version = versions[conversation]
        shown = consistent(server, conversation)
        assert shown["approval"] == {"version": version + 1, "label": "decided"}, conversation
        assert server.tool_runs(conversation) == runs, conversation
        retry = decide(server, conversation, version, approve=True)
        assert retry.status_code == 409 and "already acted on" in retry.text, retry.text
        assert server.tool_runs(conversation) == runs, conversation
        # Closed out: the history says the outcome is unknown, and nothing is pending.
        abandon = server.post(f"/chat/{conversation}/approval/abandon", {"version": version + 1})
        assert abandon.status_code == 200, abandon.text
        after = consistent(server, conversation)
        assert after["approval"] is None
        assert after["items"][-1]["output"].startswith("outcome unknown")
    assert {c: server.tool_runs(c) for c in "abcde"} == {"a": 1, "b": 1, "c": 0, "d": 1, "e": 0}
    server.stop()
    assert "Traceback" not in server.log(), server.log()
