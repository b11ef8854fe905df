"""The Temporal tests need the ``temporal-dev`` extra; where it is missing they skip,
unless ``TXS_REQUIRE_TEMPORAL`` is set (the matrix's temporal cells set it): then they
fail, so a cell that should run them can never pass by skipping them."""

from __future__ import annotations

import importlib
import os

import pytest

#: The skip reason's prefix (admitted in CI by tests/skip_policy.py's ALLOWED).
REASON = "needs the temporal extra"


def missing() -> str | None:
    """Why the Temporal tests cannot run here, or ``None``."""
    for module in ("temporalio", "temporalio.openai_agents", "sessions.temporal"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} does not import: {exc}"
    return None


def need_temporal(problem: str | None = None) -> None:
    """Call at the top of every module of tests/temporal/ (module level). ``problem``:
    why the Temporal tests cannot run (default: :func:`missing`)."""
    problem = problem or missing()
    if problem is None:
        return
    if os.environ.get("TXS_REQUIRE_TEMPORAL", "").strip() not in ("", "0"):
        pytest.fail(
            f"TXS_REQUIRE_TEMPORAL is set, so the Temporal tests must run: {problem}",
            pytrace=False,
        )
    pytest.skip(
        f"{REASON} (pip install 'txsessions[temporal-dev]'; its openai-agents line "
        f"cannot share this virtualenv): {problem}",
        allow_module_level=True,
    )
