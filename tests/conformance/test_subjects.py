"""``sessions.testing`` against every backend we ship or wrap: what each must pass.

Each subject's expected outcome per capability is in ``suite.EXPECTED``; a capability
that passes where it was expected not to be offered fails the test too (detection is
part of the contract).
"""

from __future__ import annotations

import pytest

from tests.conformance.suite import EXPECTED, SUBJECTS, report_of, subject_for


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", SUBJECTS)
async def test_subject_meets_its_expected_capabilities(
    name: str, request: pytest.FixtureRequest
) -> None:
    report = await report_of(name, subject_for(name, request))
    assert report.outcomes() == EXPECTED[name], report.render()
