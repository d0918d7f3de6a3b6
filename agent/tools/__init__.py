"""The producer's workspace tools and the guard every call of them passes before it runs
(docs/workspace.md#agent-tools)."""

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
