"""Confirm first, at the terminal (docs/cli.md#confirm-first): `loops new` and `loops graph
new` with a person at the terminal start the run (graph) in interactive mode, wait until
it has drafted its criteria (its tasks), show them and ask: approve, edit or cancel.

It is built on the service's own interactive mode: the run waits in `awaiting_approval`
and `POST .../approve` releases it, with the edits; cancel is `POST .../stop`. The draft
and the question go to stderr, so stdout stays the id alone (`RUN=$(loops new ...)` asks
too). An edit opens `$VISUAL` / `$EDITOR` (else `vi`) on a YAML file of what may change;
what comes back is checked before it is sent, and shown again before the next question.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError
from rich.console import Console
from rich.prompt import Prompt
from rich.text import Text

from loopworks.cli.client import ApiClient, CliError
from loopworks.cli.steer_render import proof_lines
from loopworks.schemas.rules import RuleOwner
from loopworks.schemas.run import Approval, RunState, RunStatus

# How often the draft is polled for while the run hydrates (or the graph plans).
POLL_SECONDS = 0.5
# Long enough for a real model to hydrate and the critic to review, bounded all the same.
DRAFT_TIMEOUT_SECONDS = 900.0
CHOICES = {"a": "approve", "e": "edit", "c": "cancel"}
CANCEL_REASON = "cancelled at the confirmation"

S = TypeVar("S")


def at_terminal(stdin: TextIO | None) -> bool:
    return stdin is not None and stdin.isatty()


def wanted(auto: bool, interactive: bool, stdin: TextIO | None) -> bool:
    """Interactive unless `--auto`; by default only with a person at the terminal."""
    if auto and interactive:
        raise CliError("give --auto or --interactive, not both")
    return interactive or (not auto and at_terminal(stdin))


def wait_for_draft(
    read: Callable[[], S],
    ready: Callable[[S], bool],
    ended: Callable[[S], bool],
    past: Callable[[S], bool],
    what: str,
) -> S | None:
    """Poll until the draft is ready for approval: its state, or None when it has gone
    past its confirmation already (an Idempotency-Key's run, approved before). A run
    (graph) that ends first is an error."""
    deadline = time.monotonic() + DRAFT_TIMEOUT_SECONDS
    while True:
        state = read()
        if ready(state):
            return state
        if ended(state):
            raise CliError(f"{what} ended before it was ready for approval")
        if past(state):
            return None
        if time.monotonic() > deadline:
            raise CliError(f"{what} was not ready for approval in time; see: loops status")
        time.sleep(POLL_SECONDS)


class Lines:
    """The answers as `input()` gives them: rich reads a given stream with readline, so
    Enter would come as "\n" (not the empty answer that takes the default: it is asked
    again) and the end of input as "" (the empty answer: approve). Here Enter is "" and
    the end of input is EOFError."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def readline(self) -> str:
        line = self._stream.readline()
        if not line:
            raise EOFError
        return line.rstrip("\r\n")


def ask(stdin: TextIO, console: Console) -> str:
    """approve, edit or cancel; the end of input is a cancel (nobody answered yes)."""
    try:
        answer = Prompt.ask(
            Text("Approve, edit or cancel?"),
            choices=list(CHOICES),
            default="a",
            console=console,
            stream=cast(TextIO, Lines(stdin)),
        )
    except EOFError:
        console.print()
        return "cancel"
    return CHOICES[answer]


def edit(document: Any, console: Console) -> Any | None:
    """`document` as YAML in the user's editor; what they saved (None: unchanged, or the
    editor failed, which is said)."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    with tempfile.TemporaryDirectory(prefix="loops-") as folder:
        path = Path(folder) / "approval.yaml"
        path.write_text(text)
        try:
            done = subprocess.run([*shlex.split(editor), str(path)], check=False)
        except OSError as err:
            console.print(f"cannot run the editor {editor!r}: {err}")
            return None
        if done.returncode != 0:
            console.print(f"the editor exited {done.returncode}; nothing changed")
            return None
        edited = path.read_text()
    if edited == text:
        return None
    try:
        return yaml.safe_load(edited)
    except yaml.YAMLError as err:
        console.print(f"that is not YAML ({err}); nothing changed")
        return None


def checked(adapter: TypeAdapter[S], data: Any, console: Console) -> S | None:
    """`data` as the API would take it, or None after saying why not."""
    try:
        return adapter.validate_python(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5]
        )
        console.print(f"not accepted, nothing changed: {problems}")
        return None


def as_data(value: Any) -> Any:
    """A model (or a list of them) as the JSON the API exchanges."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [as_data(item) for item in value]
    return value


# --- a run: its criteria, rules and iteration limit ------------------------------------

APPROVAL: TypeAdapter[Approval] = TypeAdapter(Approval)
EDITABLE = ("max_iterations", "thresholds", "rules", "verify", "allow_unverified")


def run_document(state: RunState) -> dict[str, Any]:
    """What an edit may change, as the user edits it: the run's own rules, and its proof
    as commands (`verify`), never as the rules the run makes of them
    (docs/loop.md#the-runs-proof)."""
    document: dict[str, Any] = {
        "max_iterations": state.max_iterations,
        "thresholds": as_data(state.thresholds),
        "rules": as_data([rule for rule in state.rules if rule.owner == RuleOwner.RUN]),
    }
    if state.proof is not None:
        document["verify"] = list(state.proof.commands)
        document["allow_unverified"] = state.proof.allow_unverified
    return document


def show_run(state: RunState, console: Console) -> None:
    console.print(f"run {state.run_id} drafted its criteria (template {state.template or '-'}):")
    if state.acceptance_criteria:
        console.print("acceptance criteria:")
        for criterion in state.acceptance_criteria:
            console.print(f"  - {criterion}")
    # The proof's own rules are shown as the proof, below.
    rules = [rule for rule in state.rules if rule.owner == RuleOwner.RUN]
    console.print("rules:")
    width = max((len(rule.id) for rule in rules), default=0)
    for rule in rules:
        console.print(
            f"  {rule.id:<{width}}  {rule.severity.value:<4}  phase {rule.phase.value}"
            f"  {rule.description}"
        )
    thresholds = state.thresholds
    console.print(f"thresholds: A {thresholds.A:.2f}, B {thresholds.B:.2f}")
    console.print(f"max iterations: {state.max_iterations}")
    for line in proof_lines(state):
        console.print(line)


def edited_approval(draft: RunState, data: Any, console: Console) -> Approval | None:
    """The approval an edited document asks for: only what differs from the draft."""
    if not isinstance(data, dict) or not set(data) <= {*EDITABLE, "note"}:
        console.print(f"keep the file a mapping of {', '.join(EDITABLE)}; nothing changed")
        return None
    approval = checked(APPROVAL, data, console)
    if approval is None:
        return None
    original = run_document(draft)
    changes = {
        field: getattr(approval, field)
        for field in EDITABLE
        if getattr(approval, field) is not None
        and as_data(getattr(approval, field)) != original.get(field)
    }
    return Approval(**changes, note=approval.note)


def applied(draft: RunState, approval: Approval) -> RunState:
    """The draft as the approval would leave it, its proof's commands and permission
    included."""
    changes = {
        f: getattr(approval, f)
        for f in ("max_iterations", "thresholds", "rules")
        if getattr(approval, f) is not None
    }
    proof = draft.proof
    if proof is not None and (approval.verify is not None or approval.allow_unverified is not None):
        proof_update: dict[str, Any] = {}
        if approval.verify is not None:
            proof_update["commands"] = approval.verify
        if approval.allow_unverified is not None:
            proof_update["allow_unverified"] = approval.allow_unverified
        changes["proof"] = proof.model_copy(update=proof_update)
    return draft.model_copy(update=changes)


def confirm_run(client: ApiClient, run_id: str, stdin: TextIO, console: Console) -> bool:
    """Show the run's draft and ask until it is approved (True) or cancelled (False)."""
    console.print(f"run {run_id}: waiting for its criteria (hydration and the critic's review)")
    draft = wait_for_draft(
        lambda: client.run_state(run_id),
        lambda state: state.status == RunStatus.AWAITING_APPROVAL,
        lambda state: state.status.is_terminal,
        lambda state: state.iteration >= 1,
        f"run {run_id}",
    )
    if draft is None:
        console.print(f"run {run_id} is past its confirmation already: nothing to ask")
        return True
    approval = Approval()
    while True:
        show_run(applied(draft, approval), console)
        choice = ask(stdin, console)
        if choice == "cancel":
            client.message(run_id, "stop", {"reason": CANCEL_REASON})
            console.print(f"cancelled: run {run_id} stops without iterating")
            return False
        if choice == "approve":
            client.message(run_id, "approve", as_data(approval))
            console.print(f"approved: run {run_id} starts iterating")
            return True
        data = edit(run_document(applied(draft, approval)), console)
        if data is not None and (edited := edited_approval(draft, data, console)) is not None:
            approval = edited
