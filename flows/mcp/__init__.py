"""`teamflow mcp`: the MCP server that lets Claude Code, OpenCode or any MCP client join a team.

`server` builds it (identity, envelopes, resources, transports); `team_tools`, `task_tools`
and `own_tools` hold the tools, each a thin adapter over the stores and flows the CLI uses.
"""
