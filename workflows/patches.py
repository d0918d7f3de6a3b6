"""Every `workflow.patched` id, in the order the changes came: a run started before a
change replays its old path, a run started after takes the new one (deploy/README.md,
"Upgrading safely"). Once no run from before a change is open, its patch can be
deprecated and the old path deleted.

Ask through `applies`, not `workflow.patched`: a run started after every change below
records one marker for them all instead of one per change. Each marker is a history
event, and the SDK upserts `TemporalChangeVersion` with it: another event and a
visibility write on the server, six of them a run before they were bundled.
"""

from temporalio import workflow

# Runs read the delta playbook at hydration and send their deltas after reflection.
DELTA_PLAYBOOK = "delta-playbook"
# The playbook's writer commits the batches that waited while a push ran in one push.
PLAYBOOK_GROUP_COMMIT = "playbook-group-commit"
# EVALUATE's `llm` checks are in the content group, with the patterns.
JUDGE_IN_CONTENT_GROUP = "judge-in-content-group"
# PREPARE runs only when the active rules change; later iterations reuse its checks.
PREPARE_ONCE_PER_RULES = "prepare-once-per-rules"
# EVALUATE runs a check once per commit: re-evaluating the same artifact (the phase
# switch) runs only the checks it has not run on it.
EVALUATE_EACH_CHECK_ONCE_PER_COMMIT = "evaluate-each-check-once-per-commit"
# The reflection and insights go into close's commit: reflect makes no commit or push.
REFLECTION_RECORDED_AT_CLOSE = "reflection-recorded-at-close"
# PREPARE asks no activity when every active rule carries a concrete check.
PREPARE_WITHOUT_A_MODEL = "prepare-without-a-model"

# The latest evaluation's score goes to the Temporal UI with the run's next upsert (its
# next iteration, phase or status), not in one of its own: each workflow task that
# upserts is a visibility write, about as much server CPU as another activity.
SCORE_WITH_NEXT_UPSERT = "score-with-next-upsert"

# Every change above but the last at once: what runs from November 2026 recorded.
ALL_TO_2026_11 = "all-changes-to-2026-11"
BUNDLED_TO_2026_11 = frozenset(
    {
        DELTA_PLAYBOOK,
        PLAYBOOK_GROUP_COMMIT,
        JUDGE_IN_CONTENT_GROUP,
        PREPARE_ONCE_PER_RULES,
        EVALUATE_EACH_CHECK_ONCE_PER_COMMIT,
        REFLECTION_RECORDED_AT_CLOSE,
        PREPARE_WITHOUT_A_MODEL,
    }
)
# The changes to SCORE_WITH_NEXT_UPSERT at once: what runs from late November 2026
# recorded, in their first workflow task.
ALL_TO_2026_12 = "all-changes-to-2026-12"
BUNDLED_TO_2026_12 = BUNDLED_TO_2026_11 | {SCORE_WITH_NEXT_UPSERT}

# Preparing the run's workspace (resolving the commit it starts from) runs as a local
# activity: in the run's first workflow task, on the worker holding the run, recorded as
# a marker. An activity costs the server a task queue round trip and the workflow task
# its completion wakes, about as much CPU as that git. Close stays an activity: a local
# activity's input is not in history until its workflow task completes, so a worker
# lost mid-close would make the close commit again at another time.
PREPARE_WORKSPACE_LOCALLY = "prepare-workspace-locally"

# The changes to PREPARE_WORKSPACE_LOCALLY at once: what runs from late November 2026
# recorded, in their first workflow task.
ALL_TO_2027_01 = "all-changes-to-2027-01"
BUNDLED_TO_2027_01 = BUNDLED_TO_2026_12 | {PREPARE_WORKSPACE_LOCALLY}

# A local activity that fails for good fails its step like any activity's (the run ends
# `failed`, saying why), instead of failing the workflow: a local activity's last failure
# reaches the workflow unwrapped (workflows/steps.py).
LOCAL_FAILURE_FAILS_THE_STEP = "local-failure-fails-the-step"

# Every change above at once; `ask_at_start` asks it in a run's first workflow task,
# which upserts the run's search attributes anyway, so the SDK's `TemporalChangeVersion`
# upsert costs no workflow task of its own. A later change gets its own id in a new
# bundle: runs that recorded this marker predate it.
ALL_TO_2027_02 = "all-changes-to-2027-02"
BUNDLED = BUNDLED_TO_2027_01 | {LOCAL_FAILURE_FAILS_THE_STEP}
# The bundles before the newest, newest first, with the changes each holds.
_EARLIER_BUNDLES = (
    (ALL_TO_2027_01, BUNDLED_TO_2027_01),
    (ALL_TO_2026_12, BUNDLED_TO_2026_12),
    (ALL_TO_2026_11, BUNDLED_TO_2026_11),
)

# TaskGraphWorkflow's own, asked with `workflow.patched`: a stop, resume or pause that
# arrives while the graph starts loops or saves its ledger wakes its wait for a loop at
# once, instead of waiting for a loop to end.
GRAPH_KEEPS_MESSAGES_WHILE_BUSY = "graph-keeps-messages-while-busy"

# PlaybookWorkflow's own, asked with `workflow.patched` only when it happens: a writer
# whose origin cannot be read when it starts (down, unreachable) lives on instead of
# failing; the next batch's handler reads it again and tells its sender why if it fails.
PLAYBOOK_OUTLIVES_AN_UNREADABLE_ORIGIN = "playbook-outlives-an-unreadable-origin"


def ask_at_start() -> None:
    """Fix the newest bundle's answer in the run's first workflow task (ALL_TO_2027_02).
    A run replayed from before it asks the bundles before, which runs since then recorded
    here too (from ALL_TO_2026_12 on): a marker is matched in the workflow task that
    recorded it."""
    if workflow.patched(ALL_TO_2027_02):
        return
    if not workflow.patched(ALL_TO_2027_01):
        workflow.patched(ALL_TO_2026_12)


def applies(patch_id: str) -> bool:
    """Whether this run takes the change `patch_id` (one of BUNDLED).

    The newest bundle is asked first, so its answer is fixed (the SDK memoizes a patch
    per run) before any older bundle or single change is. A run whose first asking is
    replayed from a history without the bundle's marker answers no to it for good, then
    asks the bundles before it that hold the change, or the change, as it always did,
    against the markers in its history. A run whose first asking is new answers yes,
    records the one marker and asks nothing else: what it would have answered each of
    them, asked new.
    """
    if patch_id not in BUNDLED:
        raise ValueError(f"{patch_id!r} is not in the bundle: ask workflow.patched")
    if workflow.patched(ALL_TO_2027_02):
        return True
    for bundle, changes in _EARLIER_BUNDLES:
        if patch_id in changes and workflow.patched(bundle):
            return True
    return workflow.patched(patch_id)
