"""`ToolDenied`, the one way the tool policy says no.

A module of its own so that `git_policy` can raise it without importing `guard`, which
imports `git_policy`.
"""


class ToolDenied(Exception):
    """A tool call refused by the policy; the message says why and is shown to the model."""
