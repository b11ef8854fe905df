"""The gate of tests/temporal/ (``tests/temporal/need.py``): without the temporal extra
its modules skip with a reason the CI skip policy admits, unless TXS_REQUIRE_TEMPORAL
is set (the matrix's temporal cells), where they fail."""

from __future__ import annotations

import pytest

from tests.skip_policy import allowed
from tests.temporal.need import REASON, need_temporal


def test_without_the_extra_the_temporal_tests_skip_with_a_reason_ci_admits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TXS_REQUIRE_TEMPORAL", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        need_temporal("temporalio does not import: No module named 'temporalio'")
    reason = str(skipped.value.msg)
    assert reason.startswith(REASON) and allowed(reason) == REASON


def test_where_the_extra_is_required_its_absence_fails_the_tests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TXS_REQUIRE_TEMPORAL", "1")
    with pytest.raises(pytest.fail.Exception, match="TXS_REQUIRE_TEMPORAL is set"):
        need_temporal("temporalio does not import: No module named 'temporalio'")
