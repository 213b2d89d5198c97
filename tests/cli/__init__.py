"""What people type: the todo commands and their errors, listings and history lines, agent list
writes through the CLI, imports, replay, and the commands' import cost."""
