"""The PostgreSQL backend's schema: creating the tables and migrating them
(:data:`~sessions.postgres.MIGRATIONS`).

Migrations run once per store open under ``pg_advisory_xact_lock``, so many processes
may start at once.
"""

from __future__ import annotations

from typing import Any

from ..errors import StorageError
from .connect import Connections
from .faults import _Phase
from .sql import MIGRATIONS, SCHEMA_VERSION


class SchemaPart(Connections):
    """``migrate()``: the schema created or brought up to :data:`SCHEMA_VERSION`."""

    async def migrate(self, *, create: bool = True) -> int:
        """Create the schema and tables if needed; return the schema version.

        Cheap when up to date (one catalog lookup). Otherwise runs every pending
        migration in one transaction under ``pg_advisory_xact_lock``, so processes
        starting at the same time apply each migration exactly once. With
        ``create=False`` nothing is created: a missing or outdated schema is an error.
        """

        async def run(conn: Any, phase: _Phase) -> int:
            version = await self._current_version(conn)
            if version == SCHEMA_VERSION:
                return version
            if not create:
                where = f"schema {self._names.schema!r} (table prefix {self._names.prefix!r})"
                raise StorageError(
                    f"no txsessions tables in {where}"
                    if version is None
                    else f"{where} is at version {version} and needs migrating to "
                    f"{SCHEMA_VERSION}; open it with create=True"
                )
            await conn.execute("BEGIN")
            await conn.execute("SELECT pg_advisory_xact_lock($1)", self._names.lock_key)
            exists = await conn.fetchval(
                "SELECT 1 FROM pg_namespace WHERE nspname = $1", self._names.schema
            )
            if not exists:
                await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._names.schema}"')
            await conn.execute(self._sql.version_table)
            rows = await conn.fetch(self._sql.versions)
            recorded = {int(row[0]) for row in rows}
            self._check_version(max(recorded, default=0))
            for number, statements in MIGRATIONS:
                # Every migration not recorded, a gap below the newest one included:
                # branches numbered their migrations apart (3: quarantine, 5: catalogue)
                # and a schema may have met them in either order.
                if number in recorded:
                    continue
                for statement in statements:
                    await conn.execute(self._names.sql(statement))
                await conn.execute(self._sql.version_insert, number)
            phase.commit_sent = True
            await conn.execute("COMMIT")
            return SCHEMA_VERSION

        return await self._run("schema setup", run)

    async def _current_version(self, conn: Any) -> int | None:
        table = await conn.fetchval(
            "SELECT to_regclass($1)::text", self._names.table("schema_version")
        )
        if table is None:
            return None
        rows = await conn.fetch(self._sql.versions)
        if not rows:
            return None
        recorded = {int(row[0]) for row in rows}
        self._check_version(max(recorded))
        # The newest migration up to which none is missing (a gap is still to apply).
        complete = 0
        for number, _ in MIGRATIONS:
            if number not in recorded:
                break
            complete = number
        return complete

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"PostgreSQL schema {self._names.schema!r} (prefix {self._names.prefix!r}) "
                f"is at version {version}, newer than this version of txsessions supports "
                f"({SCHEMA_VERSION}); upgrade txsessions"
            )
