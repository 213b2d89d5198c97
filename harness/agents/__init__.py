"""What faces the agents: their todo writes and reads, the tools behind
``harness mcp``, each agent's hooks (Claude Code, Codex, opencode), their installers,
and what an agent is told after a context cut or a person's change.
"""
