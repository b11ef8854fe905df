"""docs/RELIABILITY.md quotes the Temporal soak's figures as the script wrote them
(``scripts/temporal_soak.py`` -> ``docs/generated/temporal_soak.md``), and they say what
the issue asks: nothing lost, nothing duplicated, no nondeterminism error."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "generated" / "temporal_soak.md"


def _figures() -> dict[str, int]:
    rows = re.findall(r"^\| ([^|]+?) \| (\d+) \|$", FIGURES.read_text(), re.M)
    return {name: int(value) for name, value in rows}


def test_reliability_md_shows_the_temporal_soak_file_unchanged() -> None:
    doc = (ROOT / "docs" / "RELIABILITY.md").read_text()
    region = doc.split("<!-- temporal-soak:begin -->\n", 1)[1].split("<!-- temporal-soak:end -->")[
        0
    ]
    assert region == FIGURES.read_text()


def test_the_temporal_soak_names_its_commit_and_lost_nothing_duplicated_nothing() -> None:
    text = FIGURES.read_text()
    assert re.match(
        r"Written by `python scripts/temporal_soak.py .*` on commit `[0-9a-f]{10}", text
    )
    figures = _figures()
    assert figures["turns lost"] == 0 and figures["turns duplicated"] == 0
    assert figures["nondeterminism errors (Replayer)"] == 0
    assert figures["turns stored"] == figures["turns sent"] > 0
    assert figures["worker SIGKILLs survived"] > 0 and figures["activity retries survived"] > 0
