"""The test matrix (tools/matrix.py): its published table, its cells against what
pyproject declares, and the parts of the script that decide things."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("txs_matrix", ROOT / "tools" / "matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


matrix = _load_matrix()
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    ("generated", "begin", "end"),
    [
        ("docs/generated/matrix.md", matrix.MATRIX_BEGIN, matrix.MATRIX_END),
        ("docs/generated/ci.md", matrix.CI_BEGIN, matrix.CI_END),
    ],
)
def test_readme_shows_the_generated_file_unchanged(generated: str, begin: str, end: str) -> None:
    written = (ROOT / generated).read_text()
    assert written.strip(), f"{generated} is empty: run the matrix (or .ci/run)"
    assert matrix.between(README, begin, end) == written


def test_the_published_matrix_is_a_run_of_every_cell() -> None:
    """A table from an older set of cells (or a partial run) is not published; whether
    the cells passed is the matrix's own verdict (its exit status fails .ci/run)."""
    table = (ROOT / "docs/generated/matrix.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    cells = [row.split("|")[1].strip() for row in rows[1:]]
    assert cells == [cell.name for cell in matrix.CELLS]
    assert re.match(r"Written by `python tools/matrix.py` on commit `[0-9a-f]{10}", table)


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    commands = re.findall(r"^python3 -m venv .*pytest.*$", README, re.M)
    assert len(commands) == 1, commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[0] in ci.splitlines()
    assert "export CI=true" in ci
    assert "tools/matrix.py --ci-started-at" in ci


def _lower_bound(name: str) -> str:
    pyproject = (ROOT / "pyproject.toml").read_text()
    found = re.findall(rf'"{re.escape(name)}>=([0-9][0-9a-z.]*)[",]', pyproject)  # 0.66b0 too
    assert found, f"no lower bound for {name} in pyproject.toml"
    return str(found[0])


def _pin(cell_name: str, package: str) -> str:
    (pin,) = [p for p in matrix.BY_NAME[cell_name].pins if p.startswith(f"{package}==")]
    return str(pin.split("==")[1])


def test_the_cells_start_at_the_declared_lower_bounds() -> None:
    requires = re.search(r'requires-python = ">=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert requires is not None
    pythons = sorted({c.python for c in matrix.CELLS}, key=lambda v: tuple(map(int, v.split("."))))
    assert pythons[0] == requires.group(1)
    assert pythons[-1] == "3.13"
    oldest_sdk = min(
        (c for c in matrix.CELLS if any(p.startswith("openai-agents==") for p in c.pins)),
        key=lambda c: tuple(map(int, _pin(c.name, "openai-agents").split("."))),
    )
    assert _pin(oldest_sdk.name, "openai-agents") == _lower_bound("openai-agents")
    for package in (
        "asyncpg",
        "typer",
        "rich",
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-instrumentation",
        "opentelemetry-distro",
    ):
        assert _pin("lowest-deps", package).startswith(_lower_bound(package)), package


def test_the_temporal_cells_span_the_declared_bounds_and_fail_rather_than_skip() -> None:
    lowest, latest = matrix.BY_NAME["temporal-lowest"], matrix.BY_NAME["temporal-latest"]
    for package in ("temporalio", "temporalio-openai-agents"):
        assert _pin("temporal-lowest", package).startswith(_lower_bound(package)), package
    assert not latest.pins  # the newest releases pip finds
    for cell in (lowest, latest):
        assert "temporal-dev" in cell.extras.split(",")  # the dev server's binary too
        assert cell.tests[0] == "tests/temporal"
        # tests/temporal/need.py fails (not skips) a module when this is set.
        assert dict(cell.env).get("TXS_REQUIRE_TEMPORAL") == "1"


def test_every_sdk_cell_runs_the_sdk_flow_tests() -> None:
    for cell in matrix.CELLS:
        if cell.name.startswith("sdk-"):
            assert cell.tests == ("tests", "-m", "sdk_flow"), cell


def test_junit_counts(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    path.write_text(
        '<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10"'
        ' time="1.0"></testsuite></testsuites>'
    )
    assert matrix.read_junit(path) == (4, 3, 3)


def test_a_virtualenv_is_reused_only_while_its_stamp_matches(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp.json"
    want = {"python": "/py", "install": ["-e", "x[test]"], "dependencies_sha256": "ab"}
    now = time.time()
    assert not matrix.reusable(stamp, want, now)  # no stamp
    stamp.write_text(
        '{"python": "/py", "install": ["-e", "x[test]"], '
        f'"dependencies_sha256": "ab", "built_at": {now - 60}}}'
    )
    assert matrix.reusable(stamp, want, now)
    assert not matrix.reusable(stamp, {**want, "dependencies_sha256": "cd"}, now)
    assert not matrix.reusable(stamp, {**want, "install": ["-e", "x[test]", "asyncpg==0.29"]}, now)
    assert not matrix.reusable(stamp, want, now + matrix.STAMP_MAX_AGE)  # too old
    stamp.write_text("not json")
    assert not matrix.reusable(stamp, want, now)


def test_splice_replaces_exactly_one_marked_block() -> None:
    text = "a\n<!-- x:begin -->\nold\n<!-- x:end -->\nb\n"
    assert matrix.splice(text, "<!-- x:begin -->", "<!-- x:end -->", "new\n") == (
        "a\n<!-- x:begin -->\nnew\n<!-- x:end -->\nb\n"
    )
    with pytest.raises(SystemExit, match="exactly one"):
        matrix.splice(text * 2, "<!-- x:begin -->", "<!-- x:end -->", "new\n")
    with pytest.raises(SystemExit, match="exactly one"):
        matrix.splice("a\n", "<!-- x:begin -->", "<!-- x:end -->", "new\n")


def test_run_all_runs_the_longest_cells_first_side_by_side_and_the_wheel_alone_last() -> None:
    import threading

    lock = threading.Lock()
    running: set[str] = set()
    seen: list[tuple[str, frozenset[str]]] = []  # each start, with what ran beside it
    release = threading.Barrier(2, timeout=10)

    def one(cell: Any) -> Any:
        with lock:
            running.add(cell.name)
            seen.append((cell.name, frozenset(running)))
        if cell.name in ("py3.10", "py3.13"):
            release.wait()  # both of the longest cells started before either ends
        with lock:
            running.discard(cell.name)
        return matrix.Result(cell)

    done = matrix.run_all(matrix.CELLS, one, jobs=2)
    assert sorted(done) == sorted(cell.name for cell in matrix.CELLS)
    order = [name for name, _ in seen]
    assert order[:2] == ["py3.10", "py3.13"] and order[-1] == "wheel"
    assert dict(seen)["wheel"] == frozenset({"wheel"})
