"""teamflow's REST API (`teamflow api`): routes under `/api/v1/`, one module per noun, each a
thin adapter over the store or flow function the CLI and the MCP tools call; every answer a
`001` envelope."""
