"""The `loops mcp` command: serve the API as MCP tools, over stdio or HTTP."""

from __future__ import annotations

import argparse

from loopworks.cli.commands import Context


def cmd_mcp(ctx: Context, args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is loaded only by the command that serves it.
    from loopworks.cli.mcp import server

    server.serve(ctx.client, args.port if args.http else None)
    return 0
