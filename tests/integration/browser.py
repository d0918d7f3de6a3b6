"""A real browser for the dashboard's tests: Debian's chromium, driven by Playwright's
Python package with the system browser as its executable (never a downloaded one;
scripts/install-deploy-tools.sh installs chromium).

`browser` is one chromium per module; `page` is a fresh context per test, whose confirm
dialogs are accepted (and recorded), whose script errors and Content-Security-Policy
refusals fail the test, and which saves a screenshot under the test's tmp_path when the
test fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, sync_playwright

CHROMIUM = os.environ.get("LOOPS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Long enough for a run on the offline model under a loaded machine.
WAIT_MS = 90_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/install-deploy-tools.sh (as root), which "
            "installs Debian's chromium, or set LOOPS_TEST_CHROMIUM"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Watched:
    """What the page said besides its content: dialogs it asked, script errors."""

    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _console(watched: Watched, message: ConsoleMessage) -> None:
    if message.type == "error" and "Content Security Policy" in message.text:
        watched.errors.append(message.text)


def _dialog(watched: Watched, dialog: Dialog) -> None:
    watched.dialogs.append(dialog.message)
    dialog.accept()


@pytest.fixture
def watched() -> Watched:
    return Watched()


@pytest.fixture
def page(
    browser: Browser, watched: Watched, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    opened.on("dialog", lambda dialog: _dialog(watched, dialog))
    opened.on("pageerror", lambda error: watched.errors.append(str(error)))
    opened.on("console", lambda message: _console(watched, message))
    try:
        yield opened
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.passed:
            assert not watched.errors, f"the page reported errors: {watched.errors}"
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is None or not report.passed:
            shot = tmp_path / "failure.png"
            opened.screenshot(path=str(shot), full_page=True)
            print(f"screenshot of the failed test's page: {shot}")
        context.close()
