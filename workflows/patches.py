"""Every `workflow.patched` id, in the order the changes came: a run started before a
change replays its old path, a run started after takes the new one (deploy/README.md,
"Changing a workflow"). Once no run from before a change is open, its patch can be
deprecated and the old path deleted.
"""

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
