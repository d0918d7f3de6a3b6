"""What the `loops mcp` tools tell a model that knows nothing of loopworks (docs/mcp.md):
id formats, statuses, modes, templates, gates. The tools' descriptions and input schemas
quote these; tests/unit/test_mcp_contracts.py checks them against the code's own enums and
the template catalog."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

SERVER_NAME = "loopworks"
# The workflow templates a run may name (prompts/templates/; a test keeps them equal).
Template = Literal[
    "feature-dev",
    "minor-edit",
    "debugging",
    "tdd-cycle",
    "spec-review",
    "qa-demo",
    "batch-processing",
    "simple-question",
    "direct-skill",
]
TEMPLATES: tuple[str, ...] = get_args(Template)
# A live run's artifact is a draft; past this many characters the answer is cut.
MAX_ARTIFACT_CHARS = 100_000

RUN_ID = (
    "The run's id, exactly as start_run or list_runs gave it: "
    "`<alias>-<YYYYMMDD>-<HHMMSS>-<6 hex digits>` (e.g. "
    "`write-a-short-guide-20250101-120000-a1b2c3`), `key-<32 hex digits>` for a run started "
    "with an idempotency_key, or `<graph_id>/<task_id>/<attempt>` for a task loop of a graph "
    "(graph_status lists them). Or the run's alias (`write-a-short-guide`): the unfinished "
    "run with that alias, else the newest; two unfinished runs with one alias are refused, "
    "listing their ids."
)
GRAPH_ID = (
    "The graph's id, exactly as start_graph gave it: "
    "`graph-<alias>-<YYYYMMDD>-<HHMMSS>-<6 hex digits>`."
)
GATES = (
    "`gate` says where it waits for a person: `approval` (interactive mode: the drafted "
    "rules wait for approve_run / approve_graph before any work starts), `block` (the "
    "custodiet, the auditor that watches the work, blocked it: read `message`, then "
    "clear_block / clear_graph_block with a note), `pause` (paused by a person: resume_run / "
    "resume_graph), or null (it needs nobody: working, or ended). `next_action` says the same "
    "in words."
)
RUN_STATUSES = (
    "Run statuses: `running`, `awaiting_approval`, `blocked`, `paused` (live); `completed`, "
    "`stopped`, `failed`, `halted` (ended)."
)
MODES = (
    "`auto` (default): work starts at once. `interactive`: after drafting its rules the "
    "{kind} waits at gate `approval` until {tool} is called."
)
REPO = (
    "The git repository to work on: a URL (`https://…`, `ssh://…`, `git@host:path`) or an "
    "absolute path to a local repository; it must be among the service's allowed origins. "
    "Omitted: the service's own default repository."
)
# The parameters every tool that starts work takes alike (a run, a graph).
Repo = Annotated[str | None, Field(description=REPO)]
BaseBranch = Annotated[
    str | None,
    Field(description="The branch of repo to start from. Omitted: its default branch."),
]
VERIFY = (
    "The commands that prove the work: the service runs each itself, in its sandbox from the "
    "repository root, on the work it pushes, and the run completes only when each exits 0. "
    "Omitted: the repository's `.loops/verify`, else the test command its files show "
    "(pytest, unittest, `npm test`, `make test`, `cargo test`, `go test`); run_status's "
    "`proof` says which. `[]`: nothing proves the run."
)
ALLOW_UNVERIFIED = (
    "Let the run complete when it changes code and nothing proves it; otherwise such a run "
    "ends `stopped` with stop_reason `unverified`."
)
# Every NotifyEvent, and what it means for a run or a graph (a test keeps them equal).
NOTIFY_EVENTS = {
    "run": (
        "`awaiting_approval` (interactive mode: waits at gate `approval`), `blocked` (the "
        "custodiet blocked it: gate `block`), `paused` (gate `pause`), `completed`, "
        "`failed`, `halted` (the critic halted it before its first iteration), `stopped` "
        "(by a person, the iteration limit, stagnation or the budget), `qa_rejected` "
        "(stopped because QA rejected the result; sent instead of `stopped`)"
    ),
    "graph": (
        "`awaiting_approval` (interactive mode: waits at gate `approval`), `blocked` (one of "
        "its task loops was blocked by the custodiet: the notification names the graph and "
        "the task, to clear with clear_graph_block), `paused` (gate `pause`), `completed` "
        "(every task merged and verified), `failed`, `stopped`; `halted` and `qa_rejected` "
        "are a run's and never sent for a graph"
    ),
}
NOTIFY = (
    "Webhooks the service POSTs a small signed JSON notification to when the {kind} starts "
    "waiting for a person or ends, so that nobody has to poll. An object: `webhooks`, 1 to "
    '5 of `{{"url": "https://…", "format": "json"}}`, where `format` is `json` '
    "(default: loopworks' own body, with `event`, `id`, `status`, `message` and `next`, "
    "the command and API route that move it on) or `slack` (a Slack incoming webhook's "
    '`{{"text": …}}`); and `events`, those to send, default every one: {events}. The '
    "service admits only webhook hosts its operator allows and only when it signs "
    "notifications; anything else refuses the call (HTTP 422, naming why). Omitted: no "
    "notifications but those the service's operator configured for every {kind}."
)


def notify_description(kind: str) -> str:
    """The `notify` parameter of start_run (`run`) or start_graph (`graph`)."""
    return NOTIFY.format(kind=kind, events=NOTIFY_EVENTS[kind])


BUDGET = (
    "What {whom} may spend: an object with `max_tokens` (input + output tokens) and/or "
    "`max_cost_usd` (US dollars), each more than 0. {reach} A limit omitted is the "
    "service operator's cap ({caps}); asking for more than that cap refuses the call "
    "(HTTP 422, naming the setting). Omitted: the operator's caps."
)
BUDGETS = {
    "run": BUDGET.format(
        whom="the run",
        reach="Reaching either stops the run with stop_reason `budget_exhausted`.",
        caps="LOOPS_RUN_BUDGET_TOKENS, LOOPS_RUN_BUDGET_USD",
    ),
    "loop": BUDGET.format(
        whom="each task loop of the graph",
        reach="A loop that reaches either stops with stop_reason `budget_exhausted` and "
        "its task's attempt fails. Each loop gets at most what is left of total_budget.",
        caps="LOOPS_RUN_BUDGET_TOKENS, LOOPS_RUN_BUDGET_USD",
    ),
    "graph": BUDGET.format(
        whom="the whole graph, all its task loops together (retries included)",
        reach="Once either is spent no task starts any more and the graph ends `failed`.",
        caps="LOOPS_GRAPH_BUDGET_TOKENS, LOOPS_GRAPH_BUDGET_USD",
    ),
}

# Omitted, the API decides, as for any client: a prep package it plans from brings its own
# limit (docs/api.md#the-run-request, docs/graphs.md#prep-packages).
MAX_ITERATIONS = (
    "{what} (1-20). Omitted: 4, unless {whose} from the repository's prep package "
    "(`.workflow/.loop/`): then the package's own limit, 10 when it names none."
)
ITERATIONS = {
    "run": MAX_ITERATIONS.format(
        what="At most this many produce-evaluate-refine rounds", whose="the run takes its plan"
    ),
    "graph": MAX_ITERATIONS.format(
        what="Each task loop's iteration limit", whose="the graph's tasks come"
    ),
}

NOTE = "Free text for the next model step, e.g. what a person decided and why."

INSTRUCTIONS = f"""\
loopworks runs agentic "reflex loops": a run takes a task, drafts rules that decide when
the work is done, then produces, evaluates and refines an artifact (a markdown file, and
changes in a git repository) until the rules pass or a limit is reached; it pushes its work
to a branch `loops/<alias>` of the repository. A graph splits a goal into tasks and runs each
as a loop, in dependency order. Start with start_run or start_graph, watch with run_status /
graph_status, or wait_for_run (it answers at the run's next gate or its end, sending
progress on the way: no polling), and run_events; read the result with run_artifact, its
model calls with run_trajectory, and what runs on a repository learnt with playbook.
{GATES}"""


RUN_STATUS_TOOL = (
    "A run's status, compact: status, gate, next_action, iteration/max_iterations, phase "
    "(`A`: essentials, then `B`: polish), current_step, last_score (0-1), stop_reason once "
    "ended, `message` (the block's reason, or why it stopped), `usage` (what it spent so "
    "far: total_tokens, cost_usd, calls) and `budget` (its max_tokens and max_cost_usd; "
    f"reaching one stops it, stop_reason `budget_exhausted`). {GATES} {RUN_STATUSES}"
)
GRAPH_STATUS_TOOL = (
    "A graph's status, compact: status (`planning`, `awaiting_approval`, `running`, "
    "`paused`; ended: `completed`, `failed`, `stopped`), gate, next_action, and each task: "
    "task_id, title, status (`pending`, `in-progress`, `completed`, `failed`, `blocked`: "
    "waiting on a failed task it requires), attempts, its latest loop's run_id (read it with "
    "run_status) and gate `block` when that loop waits at a custodiet block; `usage` (what "
    "its task loops spent, all together: total_tokens, cost_usd, calls) and `total_budget` "
    "(what the whole graph may spend: max_tokens, max_cost_usd). "
    f"{GATES}"
)
