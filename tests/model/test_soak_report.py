"""The model soak's region of docs/RELIABILITY.md is what docs/generated/model.json says."""

from __future__ import annotations

import json

from tests.model import report


def test_reliability_doc_region_is_the_rendering_of_model_json() -> None:
    data = json.loads(report.JSON_PATH.read_text(encoding="utf-8"))
    text = report.DOC_PATH.read_text(encoding="utf-8")
    assert report.region(text) == report.render(data), "run python -m tests.model.soak"


def test_rendering_names_commit_date_seeds_and_every_backend_figure() -> None:
    data = json.loads(report.JSON_PATH.read_text(encoding="utf-8"))
    body = report.render(data)
    assert data["commit"] in body and data["date"] in body
    for kind, row in data["backends"].items():
        first, last = row["seeds"]
        line = f"| {kind} | {row['steps']:,} | {row['programs']:,} | {first} to {last} | "
        assert line + f"{row['violations']:,} |" in body
