"""The run's proof as plain functions: what a repository's files say proves it
(checks/proof.py), and what the workflow makes of it (workflows/proof.py)."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from loopworks.checks.proof import READ_CAP_CHARS, declared_commands, detect
from loopworks.schemas.evaluation import CheckResult, Evaluation, RuleResult
from loopworks.schemas.graph import GraphRequest, GraphState, TaskState
from loopworks.schemas.proof import (
    MAX_PROOF_COMMANDS,
    PROOF_TIMEOUT_SECONDS,
    ProofFound,
    ProofSource,
    ProofStatus,
    RunProof,
)
from loopworks.schemas.rules import CommandCheck, Phase, PreparedCheck, Rule, RuleOwner, Severity
from loopworks.schemas.run import Approval, RunRequest, StopReason
from loopworks.schemas.tasks import Task
from loopworks.workflows import decisions, proof
from loopworks.workflows.graph.inputs import loop_request

pytestmark = pytest.mark.unit

# --- detection: what a repository's files plainly use ------------------------------------


def test_a_makefile_test_target_stands_alone() -> None:
    texts = {"Makefile": "build:\n\tcc x.c\n\ntest: build\n\t./run-tests\n", "package.json": "{}"}
    found = detect(["Makefile", "package.json", "tests/test_x.py"], texts)
    assert found.commands == ["make test"]
    assert found.basis == ["Makefile has a `test` target"]


def test_a_make_variable_named_test_is_no_target() -> None:
    assert detect(["Makefile"], {"Makefile": "test := unit\nall:\n\techo\n"}).commands == []


@pytest.mark.parametrize(
    ("script", "found"),
    [
        ("jest", ["npm test"]),
        ('echo "Error: no test specified" && exit 1', []),  # what `npm init` writes
        ("", []),
    ],
)
def test_package_json_test_script(script: str, found: list[str]) -> None:
    texts = {"package.json": json.dumps({"scripts": {"test": script}})}
    assert detect(["package.json"], texts).commands == found


def test_an_unreadable_package_json_shows_nothing() -> None:
    assert detect(["package.json"], {"package.json": "{not json"}).commands == []


def test_cargo_and_go_modules_each_add_their_command() -> None:
    found = detect(["Cargo.toml", "go.mod", "src/main.rs"], {})
    assert found.commands == ["cargo test", "go test ./..."]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pyproject.toml", "[project]\nname='x'\n\n[tool.pytest.ini_options]\naddopts='-q'\n"),
        ("setup.cfg", "[tool:pytest]\ntestpaths = tests\n"),
        ("tox.ini", "[tox]\n[pytest]\n"),
        ("pytest.ini", "[pytest]\n"),
    ],
)
def test_pytest_configured_anywhere_is_pytest(name: str, text: str) -> None:
    found = detect([name, "tests/test_x.py"], {name: text})
    assert found.commands == ["python3 -m pytest -q"]
    assert found.basis == [f"{name} configures pytest"]


def test_a_conftest_means_pytest() -> None:
    found = detect(["tests/conftest.py", "tests/test_x.py"], {})
    assert found.commands == ["python3 -m pytest -q"]


def test_a_pyproject_without_pytest_and_no_tests_shows_nothing() -> None:
    assert detect(["pyproject.toml", "pkg/x.py"], {"pyproject.toml": "[project]\n"}).commands == []


@pytest.mark.parametrize(
    ("paths", "commands"),
    [
        (["calc.py", "test_calc.py"], ["python3 -m unittest"]),
        (["calc.py", "tests/test_calc.py"], ["python3 -m unittest discover -s tests"]),
        (
            ["calc.py", "tests/__init__.py", "tests/test_calc.py"],
            ["python3 -m unittest discover -s tests -t ."],
        ),
        (["calc.py", "test/calc_test.py"], ["python3 -m unittest discover -s test"]),
        # A package of tests the root's discovery walks already: one command.
        (["test_a.py", "tests/__init__.py", "tests/test_b.py"], ["python3 -m unittest"]),
        (["pkg/__init__.py", "pkg/test_x.py"], ["python3 -m unittest"]),
        (["calc.py", "README.md"], []),
    ],
)
def test_unittest_discovery_where_the_test_modules_are(
    paths: list[str], commands: list[str]
) -> None:
    assert detect(paths, {}).commands == commands


def test_detection_reads_a_bounded_start_of_each_file() -> None:
    """A repository's files are untrusted: a huge one is read up to a cap, and what it
    states past the cap is not seen."""
    padding = "#" * READ_CAP_CHARS + "\n"
    assert detect(["Makefile"], {"Makefile": padding + "test:\n\tcheck\n"}).commands == []
    assert detect(["Makefile"], {"Makefile": "test:\n\tcheck\n" + padding}).commands == [
        "make test"
    ]
    assert declared_commands("make check\n" + padding + "rm -rf /\n") == ["make check"]


def test_declared_commands_skip_comments_and_blank_lines() -> None:
    text = "# how this repository is proven\n\npython3 -m pytest -q\n  make lint  \n#make docs\n"
    assert declared_commands(text) == ["python3 -m pytest -q", "make lint"]
    many = "\n".join(f"true {n}" for n in range(MAX_PROOF_COMMANDS + 5))
    assert len(declared_commands(many)) == MAX_PROOF_COMMANDS


# --- the plan: first found first ------------------------------------------------------------

FOUND = ProofFound(declared=None, detected=["python3 -m unittest"], basis="test_x.py")


def test_the_request_wins_even_empty() -> None:
    given = proof.planned(["make check"], FOUND, False)
    assert (given.source, given.commands) == (ProofSource.REQUEST, ["make check"])
    empty = proof.planned([], FOUND, True)
    assert (empty.source, empty.commands, empty.allow_unverified) == (
        ProofSource.REQUEST,
        [],
        True,
    )


def test_the_repositorys_declaration_wins_over_detection() -> None:
    found = FOUND.model_copy(update={"declared": ["./ci.sh"]})
    planned = proof.planned(None, found, False)
    assert (planned.source, planned.commands) == (ProofSource.REPOSITORY, ["./ci.sh"])
    # An empty declaration says nothing proves it: detection is not asked.
    none = proof.planned(None, found.model_copy(update={"declared": []}), False)
    assert (none.source, none.commands) == (ProofSource.REPOSITORY, [])


def test_detection_then_nothing() -> None:
    detected = proof.planned(None, FOUND, False)
    assert (detected.source, detected.commands, detected.basis) == (
        ProofSource.DETECTED,
        ["python3 -m unittest"],
        "test_x.py",
    )
    assert proof.planned(None, ProofFound(), False).source == ProofSource.NONE
    assert proof.planned(None, None, False).source == ProofSource.NONE


# --- the proof's rules: the orchestrator's own ------------------------------------------------


def run_rule(rule_id: str, **fields: object) -> Rule:
    return Rule.model_validate({"id": rule_id, "description": "d", "check": "c", **fields})


def test_each_command_is_a_fail_rule_of_phase_b_the_orchestrator_owns() -> None:
    plan = proof.planned(["make test", "make lint"], None, False)
    rules = proof.proof_rules(plan)
    assert [r.id for r in rules] == ["proof-1", "proof-2"]
    for rule, command in zip(rules, plan.commands, strict=True):
        assert (rule.severity, rule.phase, rule.owner) == (
            Severity.FAIL,
            Phase.B,
            RuleOwner.ORCHESTRATOR,
        )
        assert rule.check == CommandCheck(command=command, timeout_seconds=PROOF_TIMEOUT_SECONDS)


def test_no_drafted_rule_can_stand_for_the_proof() -> None:
    """A hydration (or an edit) that rewrites, drops or imitates the proof's rules gets the
    proof's own back: a rule named as one is dropped, one that claims the orchestrator too."""
    plan = proof.planned(["pytest -q"], None, False)
    forged = run_rule("proof-1", check={"kind": "command", "command": "true"})
    claiming = run_rule("mine", owner="orchestrator")
    rules = proof.with_proof([run_rule("title"), forged, claiming], plan)
    assert [r.id for r in rules] == ["title", "proof-1"]
    assert rules[-1].check == CommandCheck(command="pytest -q", timeout_seconds=600.0)
    # A new proof replaces the old one's rules whole: none of them is left over.
    longer = proof.with_proof(rules, proof.planned(["a", "b"], None, False))
    shorter = proof.with_proof(longer, plan)
    assert [r.id for r in shorter] == ["title", "proof-1"]
    # A run recorded before runs had a proof keeps its rules as they were.
    assert proof.with_proof([forged], None) == [forged]


def test_people_give_the_proof_as_verify_not_as_rules() -> None:
    with pytest.raises(ValidationError, match="give the commands in `verify`"):
        RunRequest(task="t", rules=[run_rule("proof-2").model_dump()])
    with pytest.raises(ValidationError, match="is the run's proof"):
        Approval(rules=[run_rule("mine", owner="orchestrator").model_dump()])
    with pytest.raises(ValidationError, match="must not be blank"):
        RunRequest(task="t", verify=["  "])
    assert RunRequest(task="t", verify=[" make test "]).verify == ["make test"]
    assert RunRequest(task="t").verify is None


def test_rules_key_of_a_runs_own_rules_is_as_before_owners() -> None:
    """A run continued from before rules had owners finds its checks still prepared."""
    rule = run_rule("a")
    before = json.dumps([rule.model_dump(mode="json", exclude={"owner"})], sort_keys=True)

    assert decisions.rules_key([rule]) == hashlib.sha256(before.encode()).hexdigest()
    claimed = rule.model_copy(update={"owner": RuleOwner.ORCHESTRATOR})
    assert decisions.rules_key([claimed]) != decisions.rules_key([rule])


def test_an_approval_edits_the_proof_and_keeps_what_it_does_not_name() -> None:
    plan = proof.planned(None, FOUND, False)
    edited = proof.edited(plan, ["make check"], None)
    assert (edited.source, edited.commands, edited.allow_unverified) == (
        ProofSource.REQUEST,
        ["make check"],
        False,
    )
    allowed = proof.edited(plan, None, True)
    assert (allowed.commands, allowed.allow_unverified) == (plan.commands, True)


def test_a_stop_in_phase_a_waits_for_the_proof() -> None:
    """Only warnings left in phase A would complete the run before its proof ran: with the
    proof pending, it switches to phase B instead."""
    warned = Evaluation(
        phase=Phase.A,
        threshold=0.8,
        score=0.5,
        passed=False,
        results=[
            RuleResult(rule_id="w", severity=Severity.WARN, weight=1, passed=False),
            RuleResult(rule_id="f", severity=Severity.FAIL, weight=1, passed=True),
        ],
    )
    rules = [run_rule("f"), *proof.proof_rules(proof.planned(["t"], None, False))]
    assert proof.pending(rules, Phase.A) and not proof.pending(rules, Phase.B)
    assert not proof.pending([run_rule("f")], Phase.A)
    waits = decisions.decide(warned, None, 1, 4, 0, proof_pending=True)
    assert waits.next == decisions.Next.SWITCH_TO_B
    stops = decisions.decide(warned, None, 1, 4, 0)
    assert (stops.next, stops.reason) == (decisions.Next.STOP, StopReason.NO_MAJOR_ISSUES)


# --- its results ---------------------------------------------------------------------------------


def checked(*results: tuple[str, bool, int | None]) -> list[tuple[PreparedCheck, CheckResult]]:
    return [
        (
            PreparedCheck(rule_id=rule_id, check=CommandCheck(command="x")),
            CheckResult(
                rule_id=rule_id, passed=passed, exit_code=code, detail=f"exit code {code}\nout"
            ),
        )
        for rule_id, passed, code in results
    ]


PLAN = RunProof(source=ProofSource.REQUEST, commands=["make test"])


def test_an_evaluation_records_each_commands_result_on_its_commit() -> None:
    results = checked(("t", True, 0), ("proof-1", False, 2))
    failed = proof.evaluated(PLAN, results, ["a.py"], "c1", 2)
    assert failed.status == ProofStatus.FAILED and failed.commit == "c1"
    [result] = failed.results
    assert (result.command, result.passed, result.exit_code, result.iteration) == (
        "make test",
        False,
        2,
        2,
    )
    assert proof.failures(failed) == ["`make test` (exit code 2)"]
    passed = proof.evaluated(failed, checked(("proof-1", True, 0)), ["a.py"], "c2", 3)
    assert (passed.status, passed.changed_code, proof.failures(passed)) == (
        ProofStatus.PASSED,
        ["a.py"],
        [],
    )


def test_work_without_code_needs_no_proof_and_phase_a_changes_nothing() -> None:
    spared = proof.evaluated(PLAN, checked(("proof-1", True, None)), [], "c1", 1)
    assert spared.status == ProofStatus.NOT_NEEDED
    # Results reused on the same commit keep what was found there.
    again = proof.evaluated(spared, checked(("proof-1", True, None)), None, "c1", 1)
    assert again.status == ProofStatus.NOT_NEEDED
    assert proof.evaluated(PLAN, checked(("title", True, None)), ["a.py"], "c1", 1) == PLAN


def test_a_long_output_keeps_its_exit_line_and_its_end() -> None:
    detail = "exit code 1 (expected 0)\n" + "x" * 5000 + "FAILED (failures=1)"
    [(check, result)] = checked(("proof-1", False, 1))
    result = result.model_copy(update={"detail": detail})
    [kept] = proof.evaluated(PLAN, [(check, result)], ["a.py"], "c", 1).results
    assert kept.detail.startswith("exit code 1 (expected 0)\n")
    assert kept.detail.endswith("FAILED (failures=1)") and len(kept.detail) <= 2000


# --- the end: completed, or unverified ----------------------------------------------------------


def test_code_nothing_proves_ends_unverified_unless_allowed() -> None:
    none = RunProof(source=ProofSource.REQUEST)
    reason, message, final = proof.completed(none, StopReason.THRESHOLD_REACHED, ["calc.py"])
    assert reason == StopReason.UNVERIFIED and "calc.py" in message and "`verify`" in message
    assert final is not None and final.status == ProofStatus.UNVERIFIED
    allowed = none.model_copy(update={"allow_unverified": True})
    reason, message, final = proof.completed(allowed, StopReason.THRESHOLD_REACHED, ["calc.py"])
    assert (reason, message) == (StopReason.THRESHOLD_REACHED, "")
    assert final is not None and final.status == ProofStatus.UNVERIFIED
    # A change that could not be read counts as code.
    assert proof.completed(none, StopReason.NO_MAJOR_ISSUES, None)[0] == StopReason.UNVERIFIED


def test_a_document_task_needs_no_proof_and_a_proven_run_completes() -> None:
    none = RunProof(source=ProofSource.NONE)
    reason, _, final = proof.completed(none, StopReason.THRESHOLD_REACHED, [])
    assert reason == StopReason.THRESHOLD_REACHED
    assert final is not None and final.status == ProofStatus.NOT_NEEDED
    passed = PLAN.model_copy(update={"status": ProofStatus.PASSED})
    assert proof.completed(passed, StopReason.THRESHOLD_REACHED, ["a.py"]) == (
        StopReason.THRESHOLD_REACHED,
        "",
        passed,
    )
    assert proof.completed(None, StopReason.NO_MAJOR_ISSUES, ["a.py"]) == (
        StopReason.NO_MAJOR_ISSUES,
        "",
        None,
    )


def test_a_graph_task_is_proven_by_its_verification_command() -> None:
    task = Task.model_validate(
        {
            "id": "T-001",
            "title": "Add mul",
            "description": "Add mul to calc.py",
            "acceptance_criteria": ["mul works"],
            "verification_command": "python3 -m unittest",
        }
    )
    graph = GraphState.model_validate(
        {"graph_id": "g", "goal": "g", "origin": "/o", "integration_branch": "graphs/g"}
    )
    request = loop_request(TaskState(task=task), GraphRequest(goal="g"), graph)
    assert (request.verify, request.allow_unverified) == (["python3 -m unittest"], True)
