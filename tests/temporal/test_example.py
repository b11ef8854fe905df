"""``examples/temporal_agent.py`` runs with one command, offline: it starts its own dev
server, runs the workflow with an approval, and prints the history read from the store."""

from __future__ import annotations

from tests.temporal.need import need_temporal

need_temporal()

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from tests.sdk import need_sdk  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_runs_offline_with_one_command_and_stores_each_turn_once(
    tmp_path: Path,
) -> None:
    need_sdk("agents.testing")  # the example's model is agents.testing's ScriptedModel
    env = {k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY")}
    env["SESSIONS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'agent.db'}"
    example = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "temporal_agent.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its dev server is in its process group
    )
    try:
        out, err = example.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(example.pid, signal.SIGKILL)
        out, err = example.communicate()
        raise AssertionError(f"the example did not finish in 90 s:\n{out}{err[-3000:]}") from None
    assert example.returncode == 0, out + err[-3000:]
    assert "decision: approved" in out
    assert "agent: Your refund is on its way." in out
    lines = out.splitlines()
    turns = [line for line in lines if line.startswith("  turn ")]
    assert len(turns) == 4, out  # Hello; refund (paused); refund (resumed); Thanks
    assert [line.strip() for line in lines if line.startswith("  user: ")] == [
        "user: Hello",
        "user: refund my order",
        "user: Thanks",
    ]
    assert sum(line.startswith("  function_call_output: ") for line in lines) == 1
