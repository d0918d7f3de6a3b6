"""A run's proof (docs/loop.md#the-runs-proof): the commands the orchestrator runs itself,
in the sandbox, on the tree the run pushes, where they came from, and what they showed.

The proof is the run's own: no model writes, edits or answers it. It becomes the run's
`fail`-severity phase B rules (`proof-1`, `proof-2`, ...), owned by the orchestrator
(`RuleOwner.ORCHESTRATOR`), so the scoring and the decisions treat it as any other rule.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter, ValidationError

# The file a repository declares its proof in, one command a line (`#` starts a comment),
# read at the base commit: a run's own work cannot change what proves it.
PROOF_FILE = ".loops/verify"
# The proof's rules are `proof-1`, `proof-2`, ... in the order of the commands.
PROOF_RULE_PREFIX = "proof-"
# A proof may run a whole test suite: longer than a rule's command check by default. A
# graph task's verification command has this one limit wherever it runs (its loop's rule,
# its loop's proof, the merge queue), so a command its loop passes the merge passes too.
PROOF_TIMEOUT_SECONDS = 600.0
MAX_PROOF_COMMANDS = 10
PROOF_COMMAND_MAX_CHARS = 20_000
# What a proof result keeps of its command's output (the end of it, where test runners
# report); the run's events and branch hold the evaluation's whole detail.
PROOF_DETAIL_CAP = 2_000
# The code paths a proof lists (the rest are counted).
CHANGED_SHOWN = 50


def proof_rule_id(n: int) -> str:
    """The id of the proof's `n`-th command's rule, from 1."""
    return f"{PROOF_RULE_PREFIX}{n}"


def is_proof_rule_id(rule_id: str) -> bool:
    number = rule_id.removeprefix(PROOF_RULE_PREFIX)
    return rule_id.startswith(PROOF_RULE_PREFIX) and number.isdigit()


def _command(value: str) -> str:
    command = value.strip()
    if not command:
        raise ValueError("a proof command must not be blank")
    if "\x00" in command:
        raise ValueError("a proof command must not hold a NUL character")
    return command


# One bash command, run from the repository root; it proves the work when it exits 0.
ProofCommand = Annotated[str, Field(max_length=PROOF_COMMAND_MAX_CHARS), AfterValidator(_command)]
ProofCommands = Annotated[list[ProofCommand], Field(max_length=MAX_PROOF_COMMANDS)]
PROOF_COMMAND: TypeAdapter[str] = TypeAdapter(ProofCommand)


def proof_commands(commands: list[str]) -> list[str]:
    """The commands that are valid proof commands, as a request would take them."""
    kept = []
    for command in commands:
        try:
            kept.append(PROOF_COMMAND.validate_python(command))
        except ValidationError:
            continue
    return kept


class ProofSource(StrEnum):
    """Where a run's proof came from, first found first: the request, the repository's
    declaration, what the repository plainly uses."""

    REQUEST = "request"  # `verify` on the request (or the approval)
    REPOSITORY = "repository"  # `.loops/verify` at the base commit
    DETECTED = "detected"  # the repository's test setup (checks/proof.py)
    NONE = "none"  # nothing proves the run


class ProofStatus(StrEnum):
    PENDING = "pending"  # not run on the run's work yet (it runs in phase B)
    PASSED = "passed"  # every command exited 0 on the latest evaluated commit
    FAILED = "failed"  # a command failed there
    NOT_NEEDED = "not_needed"  # the run changed only its artifact and records
    UNVERIFIED = "unverified"  # the run changed code and nothing proves it


class ProofFound(BaseModel):
    """What the repository at the base commit says of its proof: its declaration, and
    what its files plainly use (`checks/proof.py`)."""

    declared: list[str] | None = Field(
        default=None, description=f"the commands of `{PROOF_FILE}`; None: no such file"
    )
    detected: list[str] = Field(default_factory=list)
    basis: str = Field(default="", description="what the detected commands were found from")


class ProofResult(BaseModel):
    """One proof command's latest result."""

    rule_id: str
    command: str
    passed: bool
    exit_code: int | None = Field(default=None, description="None: it timed out, or never ran")
    detail: str = Field(default="", description="its exit and the end of its output")
    iteration: int = 0


class RunProof(BaseModel):
    """The run's proof, in its state (`GET /runs/{id}`): shown in its plan, run in phase B,
    and its final word."""

    source: ProofSource
    commands: list[str] = Field(default_factory=list)
    basis: str = Field(default="", description="why these commands, in words")
    allow_unverified: bool = Field(
        default=False, description="whether the run may complete with code nothing proves"
    )
    status: ProofStatus = ProofStatus.PENDING
    results: list[ProofResult] = Field(default_factory=list)
    commit: str = Field(default="", description="the commit the results are of")
    changed_code: list[str] = Field(
        default_factory=list,
        description=f"the paths besides the artifact and the run's records the run changed, "
        f"as last read (at most {CHANGED_SHOWN})",
    )
