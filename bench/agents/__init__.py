"""What the harness costs an agent: hook and command latency, tokens of context, and each
way in (hooks, the CLI, MCP) per todo call."""
