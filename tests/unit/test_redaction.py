"""What leaves a command is redacted of the worker's secrets and capped (SECURITY.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loopworks.agent.tools.workspace_tools import run_command
from loopworks.checks.redaction import (
    MIN_SECRET_CHARS,
    REDACTED,
    SECRET_ENV_VARS,
    cap,
    environ_secrets,
    redact,
    remember,
    settings_secrets,
    worker_secrets,
)
from loopworks.checks.runner import run_command_check
from loopworks.schemas.rules import CommandCheck
from loopworks.schemas.settings import SECRET_FIELDS, Settings

pytestmark = pytest.mark.unit

KEY = "sk-ant-fake-0123456789abcdef"

# Fields whose name sounds like a credential but is not one, each with why.
NOT_SECRET = {
    "anthropic_max_tokens": "a count of model output tokens",
    "playbook_max_tokens": "the playbook's size budget, in tokens",
    "playbook_context_tokens": "how much of the playbook hydration is given, in tokens",
    "api_tokens_file": "the path of the API's tokens file, not a token",
    "run_budget_tokens": "a run's budget, in model tokens",
    "graph_budget_tokens": "a graph's total budget, in model tokens",
    "client_day_tokens": "what a client may spend in a day, in model tokens",
}


def test_every_settings_field_that_sounds_secret_is_marked_secret() -> None:
    sounds_secret = re.compile(r"key|token|secret|password|credential", re.IGNORECASE)
    for name, field in Settings.model_fields.items():
        if sounds_secret.search(f"{name} {field.alias or ''}") and name not in NOT_SECRET:
            assert name in SECRET_FIELDS, f"Settings.{name} looks like a secret: list it"
    assert set(SECRET_FIELDS) <= set(Settings.model_fields)
    assert not set(SECRET_FIELDS) & set(NOT_SECRET)


def test_settings_secrets_are_the_key_and_each_api_token() -> None:
    settings = Settings(
        ANTHROPIC_API_KEY=KEY, LOOPS_API_TOKENS=" token-one-abcdef , token-two-abcdef,short"
    )
    found = settings_secrets(settings)
    assert {KEY, "token-one-abcdef", "token-two-abcdef"} <= found
    assert "short" not in found
    assert settings_secrets(Settings(LOOPS_LLM="offline")) == frozenset()


def test_a_named_api_tokens_secret_is_redacted_without_its_name() -> None:
    settings = Settings(
        LOOPS_API_TOKENS="alice:alice-secret-abcdef,ci:ci-secret-abcdef",
        LOOPS_API_READ_TOKENS="board:board-secret-abcdef",
    )
    found = settings_secrets(settings)
    assert {"alice-secret-abcdef", "ci-secret-abcdef", "board-secret-abcdef"} <= found
    assert redact("sent ci-secret-abcdef", found) == "sent [REDACTED]"


def test_environment_secrets_are_the_well_known_variables_and_the_settings_aliases() -> None:
    environ = {
        "GITHUB_TOKEN": "ghp_faketoken123",
        "LOOPS_API_TOKENS": "api-token-abcdef",
        "PATH": "/usr/local/bin:/usr/bin",
    }
    assert environ_secrets(environ) == {"ghp_faketoken123", "api-token-abcdef"}
    assert "ANTHROPIC_API_KEY" in SECRET_ENV_VARS and "TEMPORAL_API_KEY" in SECRET_ENV_VARS


def test_worker_secrets_are_the_remembered_ones_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-from-env")
    remember(["remembered-secret-xyz", "tiny"])
    secrets = worker_secrets()
    assert {"aws-secret-from-env", "remembered-secret-xyz"} <= secrets
    assert "tiny" not in secrets


def test_redact_replaces_every_occurrence_longest_first() -> None:
    text = f"ANTHROPIC_API_KEY={KEY}\nagain {KEY}; prefix {KEY[:12]}"
    assert redact(text, [KEY, KEY[:12]]) == (
        f"ANTHROPIC_API_KEY={REDACTED}\nagain {REDACTED}; prefix {REDACTED}"
    )


def test_redact_ignores_values_too_short_to_be_secrets() -> None:
    short = "x" * (MIN_SECRET_CHARS - 1)
    assert redact(f"the {short} and the test", [short, "test", ""]) == f"the {short} and the test"


def test_redact_removes_the_end_of_a_secret_a_cut_left_at_the_start() -> None:
    tail = KEY[10:] + "\nrest of the output"
    assert redact(tail, [KEY], cut_at_start=True) == f"{REDACTED}\nrest of the output"
    # Too short an end to tell from ordinary output stays as it is.
    assert redact(KEY[-3:] + " ok", [KEY], cut_at_start=True) == KEY[-3:] + " ok"
    # Without a cut, the start of a text is text like any other.
    assert redact(tail, [KEY]) == tail


def test_cap_keeps_the_end_and_says_what_was_cut() -> None:
    assert cap("short", 10) == "short"
    assert cap("0123456789abcdef", 6) == "[10 characters cut]\nabcdef"
    assert cap("abc", 0) == "[3 characters cut]\n"


def test_a_command_check_output_is_redacted(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(KEY)
    workdir = tmp_path / "work"
    workdir.mkdir()
    check = CommandCheck(command=f"cat {secret_file}; echo; cat {secret_file}")
    outcome = run_command_check(check, workdir, secrets=[KEY])
    assert KEY not in outcome.detail
    assert outcome.detail.count(REDACTED) == 2


def test_a_truncated_command_output_leaves_no_part_of_a_secret(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    # The kept tail (32 bytes) starts inside the key.
    secret_file.write_text(KEY + "-" * 20)
    check = CommandCheck(command=f"cat {secret_file}")
    outcome = run_command_check(check, tmp_path, output_cap=32, secrets=[KEY])
    assert "[output truncated" in outcome.detail
    assert KEY[-MIN_SECRET_CHARS:] not in outcome.detail
    assert outcome.detail.endswith(REDACTED + "-" * 20)


def test_the_agents_run_command_redacts_the_worker_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tool never sees the settings: the runner uses what the worker remembered and its
    # environment. A secrets file outside the workspace stands for any way to reach one.
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    secret_file = tmp_path / "secret.env"
    secret_file.write_text(f"ANTHROPIC_API_KEY={KEY}\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    split = str(secret_file).replace("/", "'+'/'+'")  # past the guard's path rules
    result = run_command(workspace, f"python3 -c \"print(open('{split}').read())\"")
    assert result.ok, result.content
    assert KEY not in result.content
    assert f"ANTHROPIC_API_KEY={REDACTED}" in result.content
