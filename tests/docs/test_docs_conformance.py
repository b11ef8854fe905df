"""The runnable example of docs/conformance.md runs, and prints what the page says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- example: conformance -->\n```python\n"


def test_the_conformance_example_runs_and_reports_what_the_docs_say(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    code = doc.split(MARK, 1)[1].split("\n```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    plain, wrapped = result.stdout.split("Conformance of wrapped DictSession")
    for cap in ("items", "limit", "pop_item", "clear_session", "ordering"):
        assert f"{cap:<16} base     passed" in plain
        assert f"{cap:<16} base     passed" in wrapped
    assert "buffered         extended not offered: DictSession has no commit()" in plain
    for cap in ("buffered", "staged_pops", "shielded_commit"):
        assert f"{cap:<16} extended passed" in wrapped
    assert "FAILED" not in result.stdout
