"""The soak's figures: ``docs/generated/model.json`` and the region of
docs/RELIABILITY.md rendered from it (``python -m tests.model.soak --check``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JSON_PATH = ROOT / "docs" / "generated" / "model.json"
DOC_PATH = ROOT / "docs" / "RELIABILITY.md"
BEGIN = "<!-- generated:model (python -m tests.model.soak; do not edit) -->"
END = "<!-- /generated:model -->"
_REGION = re.compile(re.escape(BEGIN) + r"\n(?P<body>.*?)" + re.escape(END), re.S)


def render(data: dict[str, Any]) -> str:
    """The region's text (between the markers) for the figures ``data``."""
    lines = [
        f"`{data['command']}` at commit `{data['commit']}`, {data['date']}: programs of "
        f"up to {data['steps_per_program']} steps, {data['programs_per_seed']} programs per "
        "hypothesis seed.",
        "",
        "| backend | steps | programs | seeds | violations | first violation |",
        "|---|---:|---:|---|---:|---|",
    ]
    for kind, row in sorted(data["backends"].items(), key=lambda kv: _order(kv[0])):
        first = row["examples"][0] if row["examples"] else "-"
        first = first.replace("|", "\\|")
        seeds = f"{row['seeds'][0]} to {row['seeds'][1]}"
        lines.append(
            f"| {kind} | {row['steps']:,} | {row['programs']:,} | {seeds} "
            f"| {row['violations']:,} | {first} |"
        )
    return "\n".join(lines) + "\n"


def _order(kind: str) -> tuple[int, str]:
    known = ("memory", "sqlite", "postgres")
    return (known.index(kind) if kind in known else len(known), kind)


def region(text: str) -> str | None:
    match = _REGION.search(text)
    return None if match is None else match.group("body")


def write(data: dict[str, Any]) -> None:
    JSON_PATH.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    text = DOC_PATH.read_text(encoding="utf-8")
    body = render(data)
    if region(text) is None:
        raise SystemExit(f"{DOC_PATH}: no {BEGIN} region to write into")
    DOC_PATH.write_text(_REGION.sub(lambda _: f"{BEGIN}\n{body}{END}", text), encoding="utf-8")


def problems() -> list[str]:
    """Why the region is not what the json says (empty: it is)."""
    if not JSON_PATH.exists():
        return [f"{JSON_PATH} is missing: run python -m tests.model.soak"]
    data = json.loads(JSON_PATH.read_text(encoding="utf-8"))
    found = region(DOC_PATH.read_text(encoding="utf-8"))
    if found is None:
        return [f"{DOC_PATH}: no generated:model region"]
    if found != render(data):
        return [f"{DOC_PATH}: the generated:model region differs from {JSON_PATH.name}"]
    return []
