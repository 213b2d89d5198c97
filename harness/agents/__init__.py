"""What faces the agents: their todo writes and reads, the tools behind ``harness mcp``,
one folder per agent (``claude/``, ``codex/``, ``opencode/``, ``gemini/``, ``copilot/``,
``pi/``) behind one seam (:mod:`harness.agents.seam`, listed in
:mod:`harness.agents.registry`), and what an agent is told after a context cut or a
person's change.
"""
