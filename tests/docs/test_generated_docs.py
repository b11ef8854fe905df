"""Figures in the docs are written by the commands that measured them, never retyped.

``python -m benchmarks.docs`` renders fragments from the committed results into
``docs/generated/`` and into the marked regions of README.md and docs/*.md. These tests
fail when a document or a fragment is not what the committed results say, and when a
measured-looking figure (a ratio, a rate, a latency) appears outside a generated region.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import catalogue, docs

ROOT = Path(__file__).resolve().parents[2]

# A ratio ("0.82x"), a rate ("1,616 turns/s") or a latency ("245 µs", "0.57 ms").
MEASURED = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?x\b|\d[\d,]*(?:\.\d+)?\s*(?:turns/s|runs/s|µs|ms\b)"
)
# Documents whose every figure must come from a results file.
NO_TYPED_FIGURES = ("README.md", "docs/benchmarks.md", "docs/postgres.md")


def test_docs_and_fragments_are_what_the_committed_results_say() -> None:
    assert docs.problems() == [], "run `python -m benchmarks.docs` and commit the result"


@pytest.mark.parametrize("document", docs.DOCUMENTS)
def test_every_generated_region_has_a_fragment_of_the_same_text(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    for name, body in docs.regions(text).items():
        fragment = ROOT / "docs" / "generated" / f"{name}.md"
        assert fragment.exists(), f"{document}: region {name!r} has no docs/generated/{name}.md"
        assert body == fragment.read_text(encoding="utf-8"), (document, name)


def test_readme_and_benchmark_docs_include_the_benchmark_figures() -> None:
    for document, names in (
        ("README.md", {"benchmarks-summary", "failover-summary", "catalogue-claim"}),
        ("docs/catalogue.md", {"catalogue-claim"}),
        ("docs/benchmarks.md", {"benchmarks-results"}),
        ("docs/postgres.md", {"benchmarks-postgres"}),
    ):
        found = set(docs.regions((ROOT / document).read_text(encoding="utf-8")))
        assert names <= found, (document, sorted(names - found))


@pytest.mark.parametrize("document", NO_TYPED_FIGURES)
def test_no_measured_figure_is_typed_outside_generated_regions(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    typed = [m.group(0) for m in MEASURED.finditer(docs.strip_regions(text))]
    assert typed == [], f"{document}: figures typed by hand: {typed}"


def test_the_measured_figure_pattern_catches_what_it_should() -> None:
    sample = "0.82x raw; 1,616 turns/s; 245 µs; 0.57 ms; 12 runs/s"
    assert len(MEASURED.findall(sample)) == 5
    assert MEASURED.findall("5-turn run, 4 items, 100 sessions, pool of 2, 60 s timeout") == []


def _catalogue_results(count_user: float) -> dict[str, object]:
    ratios = {"first_page": 0.99, "count_user": count_user}
    backend = {"sizes": {"small": 1000, "large": 100000}, "large_over_small": ratios}
    return {
        "meta": {"date": "2026-12-03 12:43 UTC"},
        "backends": {"sqlite": backend, "postgres": {**backend, "large_over_small": {}}},
    }


def test_the_catalogue_claim_says_no_for_a_backend_with_a_query_over_the_target() -> None:
    over = catalogue.claim(_catalogue_results(1.6))
    assert over.startswith("no on SQLite (`count_user`: 1.60x); yes on PostgreSQL. ")
    assert catalogue.claim(_catalogue_results(1.5)).startswith("yes on SQLite; yes on PostgreSQL. ")


def test_the_readme_catalogue_row_is_the_generated_claim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| page cost independent"))
    claim = (ROOT / "docs" / "generated" / "catalogue-claim.md").read_text(encoding="utf-8")
    assert row.split(" | ")[1].endswith(f"-->{claim}<!-- /generated:catalogue-claim -->")
