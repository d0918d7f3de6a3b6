"""How `loops mcp` registers its tools: each one refuses an argument its signature does
not name, and says so in its input schema (`additionalProperties: false`).

The SDK's tools ignore unknown arguments, so a model's misspelt `budjet` would start a
run on the operator's cap without a word; the API refuses unknown fields for the same
reason (its requests are `extra="forbid"`). A tool is built as the SDK builds it
(`Tool.from_function`), its argument model then narrowed to one that forbids extra
fields, and the server is handed the finished tools (`MCPServer(tools=...)`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import ConfigDict

F = TypeVar("F", bound=Callable[..., Any])


def refusing_unknown_arguments(tool: Tool) -> Tool:
    """`tool` with an argument model that forbids extra fields, and the schema it
    publishes."""
    given = tool.fn_metadata.arg_model
    # A subclass keeps the fields, their validation and the schema's title.
    strict = cast(
        type[ArgModelBase],
        type(
            given.__name__,
            (given,),
            {"__module__": given.__module__, "model_config": ConfigDict(extra="forbid")},
        ),
    )
    metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
    schema = strict.model_json_schema(by_alias=True)
    return tool.model_copy(update={"fn_metadata": metadata, "parameters": schema})


class Tools:
    """The server's tools, gathered by `tool()` as `MCPServer.tool()` would register
    them; `MCPServer(..., tools=tools.registered)` serves them."""

    def __init__(self) -> None:
        self.registered: list[Tool] = []

    def tool(
        self, annotations: ToolAnnotations, description: str | None = None
    ) -> Callable[[F], F]:
        def register(fn: F) -> F:
            built = Tool.from_function(fn, description=description, annotations=annotations)
            self.registered.append(refusing_unknown_arguments(built))
            return fn

        return register
