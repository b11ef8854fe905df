"""The ``sessions`` command with values out of range (issue 28: findings 2, 9, 11), run as
a real child process: a usage error (exit 2) naming the option or parameter, never a
traceback or an ``OverflowError``; values stored by older versions break no command."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import Target

from .test_cli import SECRET, cli, fresh_url, one_error_line, seed, white_box

HUGE = "9" * 400  # as a float: infinity


async def test_out_of_range_durations_are_usage_errors_naming_the_option() -> None:
    db = "sqlite://"
    results = await asyncio.gather(
        cli("usage", "--since", "99999999999d", "--db", db),
        cli("usage", "some-id", "--since", "36526d", "--db", db),
        cli("usage", "--since", f"{HUGE}s", "--db", db),
        cli("purge", "--older-than", "99999999999d", "--db", db),
        cli("purge", "--older-than", "5218w", "--dry-run", "--db", db),
        cli("purge", "--older-than", f"1d{HUGE}h", "--yes", "--db", db),
    )
    for result, option in zip(results, ["--since"] * 3 + ["--older-than"] * 3, strict=True):
        one_error_line(result, option, "at most 36525d (100 years)")
        assert result.code == 2, result
        assert "Overflow" not in result.err
    # 100 years is accepted.
    assert (await cli("usage", "--since", "36525d", "--db", db)).code == 0
    assert (await cli("purge", "--older-than", "36525d", "--dry-run", "--db", db)).code == 0


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("list", "--limit", HUGE[:20]), "--limit"),
        (("list", "-n", str(2**63)), "--limit"),
        (("fork", "a", "b", "--at-turn", HUGE[:30]), "--at-turn"),
        (("rewind", "a", "--to-turn", str(2**64)), "--to-turn"),
    ],
)
async def test_integers_past_64_bits_are_usage_errors_naming_the_option(
    args: tuple[str, ...], option: str
) -> None:
    result = await cli(*args, "--db", "sqlite://")
    one_error_line(result, option, "9223372036854775807")
    assert result.code == 2


async def test_a_url_with_a_repeated_parameter_or_a_ttl_over_100_years_is_a_usage_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    await seed(f"sqlite:///{path}", {"a": [{"role": "user", "content": "x"}]})
    repeated, too_long, pg_repeated = await asyncio.gather(
        cli("list", "--db", f"sqlite:///{path}?ttl=100&ttl=200"),
        cli("purge", "--dry-run", "--db", f"sqlite:///{path}?ttl=99999999999999"),
        cli("list", "--db", f"postgresql://u:{SECRET}@127.0.0.1:1/db?sslmode=a&sslmode=b"),
    )
    one_error_line(repeated, "parameter 'ttl' is given more than once")
    one_error_line(too_long, "ttl must be a number of seconds > 0 and at most 3155760000")
    one_error_line(pg_repeated, "parameter 'sslmode' is given more than once")
    assert SECRET not in pg_repeated.err
    assert (repeated.code, too_long.code, pg_repeated.code) == (2, 2, 2)


async def test_list_and_purge_work_when_a_ttl_past_100_years_was_stored_before(
    target: Target, tmp_path: Path
) -> None:
    """b92b180 let ``set_info(ttl=timedelta(days=999999999))`` store this: ``list``
    then raised OverflowError (``--json`` printed ``[`` first) and ``purge`` failed for
    the whole store on PostgreSQL. It now reads as 100 years, the longest TTL."""
    url = fresh_url(target, tmp_path)
    await seed(url, {"old": [{"role": "user", "content": "x"}]})
    await white_box(
        url,
        "UPDATE {sessions} SET ttl = $1 WHERE session_id = 'old'",
        "UPDATE {sessions} SET ttl = :p1 WHERE session_id = 'old'",
        86_400.0 * 999_999_999,
    )
    table, as_json, purge, purge_expired = await asyncio.gather(
        cli("list", "--db", url),
        cli("list", "--json", "--db", url),
        cli("purge", "--dry-run", "--db", url),
        cli("purge", "--dry-run", "--db", f"{url}{'&' if '?' in url else '?'}ttl=60"),
    )
    assert table.code == 0, table.err
    assert "old" in table.out and "Overflow" not in table.err
    assert as_json.code == 0, as_json.err
    rows = {row["session_id"]: row for row in json.loads(as_json.out)}
    assert rows["old"]["ttl_seconds"] == 36525 * 86400  # 100 years, the longest TTL
    assert rows["old"]["expires_at"] is not None
    assert purge.code == 0, purge.err
    assert "nothing to purge" in purge.out
    assert purge_expired.code == 0, purge_expired.err
    assert "nothing to purge" in purge_expired.out  # its own TTL wins over the URL's
