"""The same race check on the installed (latest) SDK, in this process.

Only our sessions are asserted here: later SDK releases wait for the run task before
cleaning up, so the unbuffered controls are not expected to fail on them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import sdk_race_check as race


@pytest.fixture(autouse=True)
def fewer_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(race, "TURNS", 100)  # the old-SDK run does 200 per variant


@pytest.mark.parametrize("name", race.OURS)
async def test_our_sessions_keep_every_turn_whole_on_the_latest_sdk(
    name: str, tmp_path: Path
) -> None:
    race.check_ours(await race.drive(name, tmp_path), expect_race=False)
