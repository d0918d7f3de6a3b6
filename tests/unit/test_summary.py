from __future__ import annotations

import pytest

from loopworks.schemas.summary import IterationSummary, render_summary

pytestmark = pytest.mark.unit


def test_renders_the_documented_iteration_summary() -> None:
    text = render_summary(
        IterationSummary(
            iteration=2,
            max_iterations=4,
            phase="B",
            score=0.7778,
            passed=False,
            plan_focus="fix has-verification",
            artifact_hash="0123456789abcdef",
            changed=["## Verification"],
            failed=["has-verification"],
            warnings=["no-placeholders"],
            artifact="loops/run-1:artifact.md",
            critique=[("has-verification", "Add a Verification section")],
        )
    )
    assert text.splitlines() == [
        "── Iteration 2/4 | Phase B | Score: 0.78 | FAIL ──",
        "Plan: fix has-verification",
        "Hash: 01234567",
        "Changed: ## Verification",
        "Failed: has-verification",
        "Warnings: no-placeholders",
        "Artifact: loops/run-1:artifact.md",
        "Critique:",
        "  has-verification: Add a Verification section",
    ]


def test_passing_iteration_has_no_critique_and_says_none() -> None:
    text = render_summary(
        IterationSummary(
            iteration=1,
            max_iterations=4,
            phase="A",
            score=1.0,
            passed=True,
            critique=[("x", "ignored")],
        )
    )
    assert "| PASS ──" in text
    assert "Failed: none" in text and "Changed: none" in text
    assert "Critique" not in text
