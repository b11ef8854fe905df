"""The soak's figures reach the docs only through the soak: nothing retyped.

``docs/RELIABILITY.md`` and ``README.md`` include fragments that
``tests/reliability/report.py`` renders from the figures the soak wrote to
``docs/generated/reliability.md``.
"""

from __future__ import annotations

from . import report


def test_the_docs_include_exactly_what_the_soak_figures_say() -> None:
    assert report.problems() == [], "run `python -m tests.reliability.report` and commit"


def test_each_document_includes_its_fragment_text_verbatim() -> None:
    for document, names in report.DOCUMENTS.items():
        found = report.regions((report.REPO / document).read_text(encoding="utf-8"))
        for name in names:
            path, _ = report.FRAGMENTS[name]
            assert found[name] == path.read_text(encoding="utf-8"), (document, name)


def test_the_summary_names_the_command_the_commit_and_what_hit_a_commit() -> None:
    def figure(backend: str, scenario: str, tries: int, **notes: int) -> dict[str, object]:
        return {
            "backend": backend,
            "scenario": scenario,
            "unit": "u",
            "tries": tries,
            "violations": 0,
            "seconds": 1.0,
            "command": "python -m tests.reliability.soak --full",
            "source": "abc123",
            "date": "2026-12-03",
            "notes": notes,
            "examples": [],
        }

    data = {
        "sqlite/cancellation sweep": figure(
            "sqlite", "cancellation sweep", 20, **{"commit in flight": 3}
        ),
        "postgres/cancellation sweep": figure(
            "postgres", "cancellation sweep", 10, **{"commit in flight": 2}
        ),
        "postgres/pg_terminate_backend": figure("postgres", "pg_terminate_backend", 7),
    }
    text = report.render_readme(data)
    assert "0 violations in 20 (SQLite) + 10 (PostgreSQL) cancellations" in text
    assert "(5 of them while a commit's database call was in flight)" in text
    assert "7 PostgreSQL commit attempts cut by `pg_terminate_backend`" in text
    assert "`python -m tests.reliability.soak --full` at commit `abc123`" in text
    table = report.render_table(data)
    assert "1. `python -m tests.reliability.soak --full` at commit `abc123`, 2026-12-03" in table
    assert "| postgres | pg_terminate_backend | 7 u | 0 | 1.0 s | 1 |  |" in table
