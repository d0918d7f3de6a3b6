"""The producer's workspace tools and the policy (seed 003's PreToolUse guard) they all pass."""

from loopworks.agent.tools.guard import ToolDenied, ToolGuard
from loopworks.agent.tools.workspace_tools import (
    TOOLS,
    ToolResult,
    ToolSpec,
    edit_file,
    execute,
    list_files,
    read_file,
    run_command,
    search,
    tool_definitions,
    write_file,
)

__all__ = [
    "TOOLS",
    "ToolDenied",
    "ToolGuard",
    "ToolResult",
    "ToolSpec",
    "edit_file",
    "execute",
    "list_files",
    "read_file",
    "run_command",
    "search",
    "tool_definitions",
    "write_file",
]
