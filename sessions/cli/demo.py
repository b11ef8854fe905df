"""``sessions demo``: an offline agent conversation whose history survives a cancelled turn.

No postponed annotations here: typer reads the command signatures at runtime.
"""

from typing import Annotated

import typer

from .._model.redact import redact
from .options import ENV_URL, given_db
from .render import UsageError, fail, run_sync

__all__ = ["demo_cmd"]


def demo_cmd(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="PATH",
            help="SQLite file to keep the demo's history in: a path or sqlite:///path.db "
            f"(default: a temporary file). ${ENV_URL} is not used: the demo writes only "
            "where --db says.",
        ),
    ] = None,
) -> int:
    """Run an offline demo: a streamed run cancelled midway leaves history whole.

    \b
    Example:
      sessions demo --db demo.db
    """
    path = demo_path(given_db(ctx, db))
    try:
        from .._tools.demo import run_demo
    except ImportError as exc:
        fail(
            "the demo needs an openai-agents release with agents.testing.ScriptedModel "
            f"(pip install -U openai-agents): {exc}"
        )
    return run_sync(lambda: run_demo(path), [db])


def demo_path(value: str | None) -> str | None:
    """The SQLite file ``--db`` names (a plain path, or a ``sqlite:///`` URL)."""
    if value is None or "://" not in value:
        return value
    from .._tools.url import parse_url

    try:
        parsed = parse_url(value)
    except ValueError as exc:
        raise UsageError(str(exc), "sessions demo") from None
    if parsed.kind != "sqlite" or parsed.target == ":memory:":
        raise UsageError(
            f"the demo runs on a SQLite file; --db {redact(value)!r} is not one "
            "(give a path or sqlite:///path.db)",
            "sessions demo",
        )
    return parsed.target
