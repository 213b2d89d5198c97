"""Claude Code: its hooks, their install, and its task tools and task files."""
