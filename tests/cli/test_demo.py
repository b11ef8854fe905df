"""The README demo: offline, on a real SQLite file, and honest about what it checks."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.sdk import need_sdk

# The demo's scripted model is agents.testing's (sessions/_tools/demo.py imports it).
need_sdk("agents.testing")

from sessions import BufferedSession, SQLiteStore  # noqa: E402
from sessions._tools.demo import run_demo  # noqa: E402
from tests.helpers import histories  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_ROLES = [
    "user",
    "function_call",
    "function_call_output",
    "assistant",
    "user",
    "function_call",
    "function_call_output",
    "assistant",
    "user",
    "assistant",
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def stored_sessions(path: Path) -> dict[str, list[dict[str, Any]]]:
    async def read() -> dict[str, list[dict[str, Any]]]:
        store = await SQLiteStore.open(path)
        try:
            return await histories(store)
        finally:
            await store.close()

    return asyncio.run(read())


def roles(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("role") or i.get("type")) for i in items]


def test_demo_keeps_history_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "demo.db"
    assert run_demo(str(db)) == 0
    out = capsys.readouterr().out
    assert str(db) in out
    assert "history whole: 10 items in 3 turns, every turn complete" in out
    assert "late writes refused: 2" in out
    assert "rolled the whole turn back" in out
    for shown in ("tool call", "tool result", "add(", "multiply(", "17 + 25 = 42."):
        assert shown in out
    # The cancelled turn's prompt is printed as a turn heading, never as stored history.
    assert "NOT whole" not in out
    # The file holds exactly what was printed: one session, three whole turns.
    (items,) = stored_sessions(db).values()
    assert roles(items) == EXPECTED_ROLES
    assert not any("1000" in str(i) for i in items)


def test_demo_plain_output_without_rich(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("rich", "rich.console", "rich.table"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    assert run_demo(str(tmp_path / "plain.db")) == 0
    out = capsys.readouterr().out
    assert "━" not in out and "│" not in out  # no rich table
    lines = out.splitlines()
    assert any(line.split()[:3] == ["1", "user", "What"] for line in lines)
    assert any(line.split()[1:3] == ["tool", "call"] for line in lines if line.strip())
    assert lines[-1].startswith("history whole: 10 items")


def test_demo_default_database_is_temporary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert run_demo() == 0
    out = capsys.readouterr().out
    assert "(temporary; pass --db PATH to keep it)" in out
    assert str(tmp_path) in out
    assert list(tmp_path.iterdir()) == []  # cleaned up


def test_demo_twice_on_one_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "again.db"
    assert run_demo(str(db)) == 0
    assert run_demo(str(db)) == 0
    sessions = stored_sessions(db)
    assert len(sessions) == 2
    assert all(roles(items) == EXPECTED_ROLES for items in sessions.values())
    assert capsys.readouterr().out.count("history whole: 10 items") == 2


def test_demo_check_fails_when_late_writes_leak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's final check is not decorative: break late-write refusal and it says so."""
    monkeypatch.setattr(BufferedSession, "_refuse_late_write", lambda self, op, n: False)
    assert run_demo(str(tmp_path / "broken.db")) == 1
    out = capsys.readouterr().out
    assert "history NOT whole" in out
    assert "history whole:" not in out


def test_python_m_sessions_demo(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        [sys.executable, "-m", "sessions", "demo", "--db", str(db)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "history whole: 10 items in 3 turns" in proc.stdout
    assert str(db) in proc.stdout
    (items,) = stored_sessions(db).values()
    assert roles(items) == EXPECTED_ROLES
