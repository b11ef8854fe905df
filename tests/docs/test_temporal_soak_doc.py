"""docs/RELIABILITY.md quotes the Temporal soak's figures as the script wrote them
(``scripts/temporal_soak.py`` -> ``docs/generated/temporal_soak.md``), and they say what
the issue asks: nothing lost, nothing duplicated, no nondeterminism error."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "generated" / "temporal_soak.md"


def _figures() -> dict[str, dict[str, int]]:
    """backend -> figure -> value, from the table (a column per backend)."""
    lines = [line for line in FIGURES.read_text().splitlines() if line.startswith("| ")]
    backends = [cell.strip() for cell in lines[0].strip("|").split("|")[1:]]
    table: dict[str, dict[str, int]] = {backend: {} for backend in backends}
    for line in lines[1:]:
        name, *values = [cell.strip() for cell in line.strip("|").split("|")]
        for backend, value in zip(backends, values, strict=True):
            table[backend][name] = int(value)
    return table


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
    table = _figures()
    assert sorted(table) == ["postgres", "sqlite"]
    for figures in table.values():
        assert figures["turns lost"] == 0 and figures["turns duplicated"] == 0
        assert figures["nondeterminism errors (Replayer)"] == 0
        assert figures["turns stored"] == figures["turns sent"] > 0
        assert figures["worker SIGKILLs survived"] > 0
        assert figures["activity retries survived"] > 0
