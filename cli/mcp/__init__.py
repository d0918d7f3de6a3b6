"""`loops mcp`: the API as Model Context Protocol tools (docs/mcp.md). `command` is what
the CLI registers and loads without the MCP SDK; `server` builds the server and the run
tools, `graph_tools` the graph tools, `watch_tools` the wait for a run with progress,
`views` the compact answers, `facts` the words every description shares."""
