"""The ``sessions`` command: inspect, export, import, purge and migrate session stores.

Needs the optional ``cli`` extra (typer and rich); without it :func:`main` prints how
to install it and exits with status 2. Every failure is one line on standard error and
a non-zero exit status: 1 for an operation that failed, 2 for a usage error (bad
option, bad URL), 130 when interrupted.

Layout: :mod:`.app` builds the command line; :mod:`.inspect` (list, show, stats),
:mod:`.transfer` (export, import), :mod:`.maintenance` (delete, purge, migrate) and
:mod:`.demo` hold one small function per command; :mod:`.render` is the one place that
prints user-controlled text and turns errors into one line and an exit status.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

INSTALL_HINT = "pip install 'txsessions[cli]'"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        import rich  # noqa: F401
        import typer  # noqa: F401
    except ImportError as exc:
        print(
            f"error: the sessions command needs {exc.name or 'typer and rich'}: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    from .app import run

    return run(list(sys.argv[1:] if argv is None else argv))
