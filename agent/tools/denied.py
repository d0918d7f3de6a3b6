"""`ToolDenied`, the one way the tool policy says no.

A module of its own so that every part of the policy (paths, the command rules, git) can raise
it without importing `guard`, which imports them all.
"""


class ToolDenied(Exception):
    """A tool call refused by the policy; the message says why and is shown to the model."""
