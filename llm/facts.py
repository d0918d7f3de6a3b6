"""Names the model layer relies on that a model must be told too: the prompts quote them
through `loopworks.prompts.facts`, which gathers every such fact."""

from __future__ import annotations

# The tool whose input is a structured role's whole answer (forced on every such call).
ANSWER_TOOL = "answer"
# The flag every helper the skill generator writes takes to test itself: the generator is
# told to add it and the skill reflector to check the helper with it (exit 0: it works).
SELF_TEST_FLAG = "--self-test"
