"""The oldest supported openai-agents release, in a virtualenv of its own.

The first run creates ``.venv-compat/sdk-<version>/`` in the repository root (about 20 s
with a warm package cache) with that SDK, this package installed editable without its
dependencies, and the few packages the check needs; later runs reuse it while its stamp
matches. Then ``tests/compat/sdk_race_check.py`` runs there in a subprocess: many
streamed runs whose run task the old SDK cancels under the session, ours and unbuffered
controls side by side.

When the virtualenv cannot be built (no package index reachable, say) the test is
skipped with the reason - or fails, when ``CI`` is set.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OLD_SDK = "0.2.11"  # the lower bound of openai-agents in pyproject.toml
VENVS = ROOT / ".venv-compat"
VENV = VENVS / f"sdk-{OLD_SDK}"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / "txs-compat-stamp.json"
IN_CI = bool(os.environ.get("CI"))

VENV_TIMEOUT = 60
PIP_TIMEOUT = 240
CHECK_TIMEOUT = 240


def _project_dependencies() -> list[str]:
    """pyproject's runtime dependencies other than the SDK itself."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return []  # no runtime dependency besides the SDK
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps: list[str] = tomllib.load(f)["project"]["dependencies"]
    return [d for d in deps if not d.replace("_", "-").lower().startswith("openai-agents")]


def _requirements() -> list[str]:
    return [
        f"openai-agents=={OLD_SDK}",
        *_project_dependencies(),
        f"pytest=={importlib.metadata.version('pytest')}",
        f"pytest-asyncio=={importlib.metadata.version('pytest-asyncio')}",
    ]


def _unavailable(why: str) -> NoReturn:
    if IN_CI:
        pytest.fail(
            f"CI is set, so the openai-agents {OLD_SDK} compatibility run must happen: {why}",
            pytrace=False,
        )
    pytest.skip(f"openai-agents {OLD_SDK} compatibility run not possible: {why}")


def _tail(text: str, lines: int = 25) -> str:
    kept = [line for line in text.splitlines() if "is ignored: it is neither" not in line]
    return "\n".join(kept[-lines:])


def _clean_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env["PYTHONNOUSERSITE"] = "1"
    return env


@contextmanager
def _locked() -> Iterator[None]:
    """One creator at a time (parallel test runs share the virtualenv)."""
    VENVS.mkdir(exist_ok=True)
    # Keep the whole folder out of git (and so out of ruff) whatever .gitignore says.
    (VENVS / ".gitignore").write_text("*\n")
    with open(VENVS / f"sdk-{OLD_SDK}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _step(what: str, cmd: list[str], timeout: int) -> str:
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        _unavailable(f"{what} did not finish within {timeout} s: {' '.join(cmd)}")
    if done.returncode != 0:
        _unavailable(
            f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n"
            f"{_tail(done.stdout + done.stderr)}"
        )
    return done.stdout


def ensure_venv() -> Path:
    """The old-SDK virtualenv, built once and reused while its stamp matches."""
    want: dict[str, Any] = {
        "requirements": _requirements(),
        "python": sys.version.split()[0],
        "root": str(ROOT),
    }
    with _locked():
        try:
            if PYTHON.exists() and json.loads(STAMP.read_text()) == want:
                return PYTHON
        except (OSError, ValueError):
            pass
        shutil.rmtree(VENV, ignore_errors=True)
        _step("creating the virtualenv", [sys.executable, "-m", "venv", str(VENV)], VENV_TIMEOUT)
        pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        _step(f"installing openai-agents=={OLD_SDK}", [*pip, *want["requirements"]], PIP_TIMEOUT)
        _step("installing this package", [*pip, "--no-deps", "-e", str(ROOT)], PIP_TIMEOUT)
        version = _step(
            "checking the SDK version",
            [
                str(PYTHON),
                "-c",
                "import importlib.metadata as m; print(m.version('openai-agents'))",
            ],
            VENV_TIMEOUT,
        ).strip()
        if version != OLD_SDK:
            _unavailable(f"the virtualenv has openai-agents {version}, not {OLD_SDK}")
        STAMP.write_text(json.dumps(want))
    return PYTHON


@pytest.mark.timeout(VENV_TIMEOUT + 2 * PIP_TIMEOUT + CHECK_TIMEOUT)
def test_streamed_run_race_on_the_oldest_supported_sdk(tmp_path: Path) -> None:
    python = ensure_venv()
    reports = tmp_path / "reports"
    reports.mkdir()
    env = _clean_env()
    env.update(TXS_EXPECT_RACE="1", TXS_COMPAT_REPORT_DIR=str(reports))
    cmd = [
        str(python),
        "-m",
        "pytest",
        "-c",
        str(HERE / "pytest-compat.ini"),
        "--rootdir",
        str(HERE),
        "--confcutdir",
        str(HERE),
        "-p",
        "no:cacheprovider",
        "-q",
        "-rA",
        "--basetemp",
        str(tmp_path / "basetemp"),
        str(HERE / "sdk_race_check.py"),
    ]
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the old-SDK check did not finish within {CHECK_TIMEOUT} s: {exc}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        f"the check failed on openai-agents {OLD_SDK}:\n{_tail(output, 80)}"
    )
    summary = output.strip().splitlines()[-1]
    assert re.fullmatch(r"7 passed in [0-9.]+s", summary), summary  # nothing skipped

    found = {p.stem: json.loads(p.read_text()) for p in reports.glob("*.json")}
    ours = ["txs-buffered", "txs-transaction", "txs-autocommit", "wrapper-over-stepwise"]
    assert sorted(found) == sorted([*ours, "control-stepwise", "control-sdk-sqlite"])
    assert {r["sdk"] for r in found.values()} == {OLD_SDK}
    for name in ours:  # the inner checks asserted these; the reports agree
        r = found[name]
        assert r["drained_missing"] == r["completed_missing"] == r["other_torn"] == 0, r
    control = found["control-stepwise"]
    assert control["drained_missing"] > 0 or control["orphan_inputs"] > 0, control
    for name, r in sorted(found.items()):
        print(
            f"{name:24} turns={r['turns']} drained={r['drained']} whole={r['whole']} "
            f"lost_drained={r['drained_missing']} orphans={r['orphan_inputs']} "
            f"torn={r['other_torn']} out_of_order={r['out_of_order']} "
            f"cancelled_but_whole={r['cancelled_but_whole']}"
        )
