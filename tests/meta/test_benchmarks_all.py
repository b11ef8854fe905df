"""``python -m benchmarks.all``: what it runs, step by step (the steps themselves are
the benchmark commands, each tested where it lives; here only what is passed to them)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from benchmarks import all as run_all


def _commands(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[list[str]]:
    ran: list[list[str]] = []

    def record(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        ran.append(command[1:])
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(run_all.subprocess, "run", record)
    assert run_all.main([*argv, "--force"]) == 0
    return ran


def test_require_peers_is_passed_to_the_benchmarks_step_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = _commands(monkeypatch, ["--require-peers"])
    assert ran[0] == ["-m", "benchmarks", "--require-postgres", "--require-peers"]
    assert all("--require-peers" not in command for command in ran[1:])
    assert ran[-1] == ["-m", "benchmarks.docs"]


def test_without_require_peers_a_missing_peer_is_reported_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = _commands(monkeypatch, ["--skip", "failover", "scale", "integrity", "handoff"])
    assert ran == [["-m", "benchmarks", "--require-postgres"], ["-m", "benchmarks.docs"]]
