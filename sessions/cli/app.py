"""The ``sessions`` command line: the typer app, its global ``--db``, and the run loop.

No postponed annotations here: typer reads the callback's signature at runtime.
"""

from collections.abc import Callable, Sequence
from typing import Annotated

import typer

from .demo import demo_cmd
from .doctor import doctor_cmd
from .inspect import list_cmd, show_cmd, stats_cmd
from .maintenance import delete_cmd, delete_user_cmd, migrate_cmd, purge_cmd
from .options import ENV_URL, Globals
from .render import CliError, exit_code
from .transfer import export_cmd, import_cmd
from .turns import fork_cmd, rewind_cmd, turns_cmd, usage_cmd

__all__ = ["build_app", "run"]

HELP = (
    "Inspect and maintain txsessions stores (SQLite or PostgreSQL).\n\n"
    f"The database is given with --db URL (before or after the command) or the {ENV_URL} "
    "environment variable: sqlite:///relative.db, sqlite:////abs/path.db, "
    "postgresql://user:password@host:5432/db?schema=public&table_prefix=txs_.\n\n"
    "\b\nExample:\n  sessions list --db sqlite:///chat.db\n"
    "  sessions --db sqlite:///chat.db show user-42"
)

COMMANDS: dict[str, Callable[..., int]] = {
    "list": list_cmd,
    "show": show_cmd,
    "stats": stats_cmd,
    "turns": turns_cmd,
    "fork": fork_cmd,
    "rewind": rewind_cmd,
    "usage": usage_cmd,
    "export": export_cmd,
    "import": import_cmd,
    "delete": delete_cmd,
    "delete-user": delete_user_cmd,
    "purge": purge_cmd,
    "migrate": migrate_cmd,
    "doctor": doctor_cmd,
    "demo": demo_cmd,
}


GlobalDb = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        help=f"Database URL (default: ${ENV_URL}); may also come after the command name.",
    ),
]


def _root(ctx: typer.Context, db: GlobalDb = None) -> None:
    ctx.obj = Globals(db=db)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="sessions",
        help=HELP,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name, command in COMMANDS.items():
        app.command(name)(command)
    return app


def run(args: Sequence[str]) -> int:
    """Run ``sessions ARGS``; every failure is one line on stderr and an exit status."""
    command = typer.main.get_command(build_app())
    try:
        result = command.main(list(args) or ["--help"], prog_name="sessions", standalone_mode=False)
    except CliError as exc:
        return exit_code(exc, args)
    except typer.Abort:
        return exit_code(CliError("aborted"), args)
    except Exception as exc:  # noqa: BLE001 - click usage errors (typer may vendor click)
        return exit_code(_usage_error(exc), args)
    except KeyboardInterrupt as exc:
        return exit_code(exc, args)
    return result if isinstance(result, int) else 0


def _usage_error(exc: Exception) -> BaseException:
    """A click usage error as a :class:`~.CliError` (anything else unchanged)."""
    message = getattr(exc, "format_message", None)
    code = getattr(exc, "exit_code", None)
    if not callable(message) or not isinstance(code, int):
        return exc
    ctx = getattr(exc, "ctx", None)
    where = getattr(ctx, "command_path", None) or "sessions"
    return CliError(f"{message()} (see '{where} --help')", code)
