"""``harness prime``: what an agent with no todo tool of its own needs in its instructions.

Since Claude Code 2.1.233 the newest model families get no built-in todo or task tool
unless the user opts in; other agents never had one, or have no MCP. For them the
harness's CLI is the todo list, and this text (for AGENTS.md or CLAUDE.md, or printed at
the start of the work) says how to use it, then what the list holds now.

It must stay small: every token of it is paid on every turn. The budget is 1,500 tokens
(cl100k_base; bench/agents/tokens.py measures it and tests/agents/test_tokens.py holds it
there). The list is cut to fit, open work first, with a count of what was left out.
"""

from __future__ import annotations

from typing import Any

from harness.agents.todolist import prompt_line
from state.fold import TodoState, board_key

# The list's share of the budget, in characters (English text and ids run ~3.5 per token).
LIST_CHARS = 3600
ITEM_WIDTH = 110

INSTRUCTIONS = """\
## Todo list (todo-harness)

Keep your todo list in todo-harness, not in your head: it survives compaction and
restarts, and people and other agents share it. Use the `harness` CLI:

- `harness todoread`: the list. Read it first after a restart or a compaction.
- `harness todowrite`: write your WHOLE list (JSON on stdin) whenever it changes, e.g.
  `echo '{"todos":[{"content":"Run tests","status":"in_progress","priority":"high"}]}' | harness todowrite`
  Statuses: pending, in_progress, completed, cancelled; priorities: high, medium, low.
  Send every item each time. Items people added are kept even if you leave them out,
  and a blocked item stays blocked. Read the `note:` lines it prints: they say what
  people changed (priorities, new items, why something is blocked).
- `harness start t3` / `harness done t3` / `harness block t3 --reason "..."`: one item.
- `harness next --claim --actor NAME`: take the next ready item when several agents work
  on this list (atomic: nobody else gets it)."""

def list_block(todos: list[TodoState], session_name: str, budget: int = LIST_CHARS) -> str:
    by_num = {t.num: t for t in todos}
    done = sum(t.status == "completed" for t in todos)
    lines = [f"Current list (session {session_name}): {done}/{len(todos)} completed."]
    used = len(lines[0])
    shown = 0
    ordered = sorted(todos, key=board_key)  # open work first, as the board shows it
    for t in ordered:
        line = prompt_line(t, by_num, width=ITEM_WIDTH)
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    left = ordered[shown:]
    if left:
        open_left = sum(t.status not in ("completed", "cancelled") for t in left)
        lines.append(f"... and {len(left)} more ({open_left} open): `harness todoread` "
                     "shows them all.")
    if not todos:
        lines.append("(empty: add your plan with `harness todowrite`)")
    return "\n".join(lines)


def prime_text(harness: Any, *, agent: str = "any", with_list: bool = True) -> str:
    from harness.agents.registry import agent as agent_named
    from harness.agents.registry import names

    parts = [INSTRUCTIONS]
    note = agent_named(agent).prime_note if agent in names() else None
    if note:
        parts.append(note)
    if with_list:
        sess = harness.session()
        todos = harness.store.todos(sess.id)
        parts.append(list_block(todos, sess.name))
    return "\n\n".join(parts)
