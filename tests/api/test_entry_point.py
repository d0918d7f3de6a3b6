"""`python -m loopworks.api` with a setting it cannot use: a sentence naming it, exit 2."""

from __future__ import annotations

import logging

import pytest

from loopworks.api.__main__ import main

pytestmark = pytest.mark.unit


def test_a_bad_setting_is_named_not_a_traceback(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPS_API_PORT", "abc")
    with caplog.at_level(logging.ERROR, logger="loopworks.api"):
        assert main() == 2
    assert "cannot start: 1 validation error for Settings\nLOOPS_API_PORT" in caplog.text
