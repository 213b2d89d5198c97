"""harness/agents/notice.py on a real store: what others changed since an agent last saw
its list, told once, in its own words, surviving processes (the mark is in the store)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from harness import todos
from harness.agents import notice as agent_notice
from harness.agents.claude.tasks import task_labels
from state.store import Store

AGENT = "agent:claude-code"


def _session(store: Store) -> int:
    return store.create_session("work", actor="human")


def test_a_persons_changes_are_told_once_and_the_agents_own_are_not(store: Store) -> None:
    sid = _session(store)
    with store.write(sid, AGENT) as tx:
        tx.create_todo("Train the drafter", origin="agent")
        tx.create_todo("Write the report", origin="agent")
        agent_notice.mark_seen(tx, AGENT)
    assert agent_notice.take(store, sid, AGENT) is None
    todos.set_priority(store, sid, "t2", "high")          # a person, `harness prio`
    todos.set_priority(store, sid, "t2", "low")
    todos.set_priority(store, sid, "t2", "high")
    todos.add(store, sid, "Check the acceptance length")  # a person adds one
    with store.write(sid, AGENT) as tx:                    # the agent's own change
        tx.update_todo(1, status="in_progress")
    assert agent_notice.pending(store, sid, AGENT) is not None  # pending marks nothing
    notice = agent_notice.take(store, sid, AGENT)
    assert notice is not None
    assert notice.lines == [
        "\"Write the report\" (t2): priority 'medium' -> 'high' by human",
        "\"Check the acceptance length\" (t3): added by human (pending, medium)"]
    assert notice.text().startswith(agent_notice.HEAD)
    # Delivered: a second answer (another process, another Store) has nothing to say.
    with Store.open(store.public_url) as other:
        assert agent_notice.take(other, sid, AGENT) is None
    # Another agent has not seen them: it is told, on its own mark.
    other_notice = agent_notice.take(store, sid, "agent:codex")
    assert other_notice is not None and len(other_notice.lines) == 3  # t1 t2 t3 all new


def test_take_in_commits_with_the_callers_write_and_bounds_the_text(store: Store) -> None:
    sid = _session(store)
    for i in range(agent_notice.MAX_LINES + 3):
        todos.add(store, sid, f"item {i}")
    with store.write(sid, AGENT) as tx:
        notice = agent_notice.take_in(tx, AGENT)
    assert notice is not None and len(notice.lines) == agent_notice.MAX_LINES
    assert notice.more == 3 and "3 more" in notice.text()
    # A transaction that fails takes its mark with it: the notice is told again.
    todos.set_status(store, sid, "t1", "blocked", reason="GPU quota")
    try:
        with store.write(sid, AGENT) as tx:
            assert agent_notice.take_in(tx, AGENT) is not None
            raise RuntimeError("the hook's own write failed")
    except RuntimeError:
        pass
    again = agent_notice.take(store, sid, AGENT)
    assert again is not None
    assert again.lines == ["\"item 0\" (t1): status 'pending' -> 'blocked' "
                           "('GPU quota') by human"]


def test_each_line_names_the_item_as_the_agent_knows_it(store: Store) -> None:
    """The agent's own id from the labeler, the text it last knew (shortened), our t id."""
    from harness.agents.claude.tasks import create_task, load_map

    sid = _session(store)
    long = "Regenerate the 10K training samples with the reasoning kept, then " \
           "check the vocab mapping against them"
    with store.write(sid, AGENT) as tx:
        create_task(tx, load_map(tx), "list-a:7", long)
        create_task(tx, load_map(tx), "list-a:8", "Train the drafter")
        tx.create_todo("Write the report", origin="agent")
        agent_notice.mark_seen(tx, AGENT)
        tx.set_agent_view(AGENT, {"format": "claude", "n": tx.state.n,
                                  "items": [[3, "Write the report", "pending"]]})
    todos.edit(store, sid, "t2", "Train the drafter, 3 epochs")
    todos.set_priority(store, sid, "t1", "high")
    with store.write(sid, "human") as tx:
        tx.remove_todo(3, reason="not needed")
    label = task_labels(partial(store.agent_view, sid), AGENT)
    assert [label(n) for n in (1, 2, 3, 4)] == ["#7", "#8", "item 1", None]
    notice = agent_notice.take(store, sid, AGENT, label=label)
    assert notice is not None
    assert notice.lines == [
        "#8 \"Train the drafter\" (t2): content -> 'Train the drafter, 3 epochs' by human",
        f"#7 \"{long[:59]}…\" (t1): priority 'medium' -> 'high' by human",
        "item 1 \"Write the report\" (t3): removed by human"]
    # A list position, as Codex and opencode lists are named.
    todos.set_priority(store, sid, "t2", "low")
    step = agent_notice.positions(partial(store.agent_view, sid), AGENT, "step")
    again = agent_notice.take(store, sid, AGENT, label=step)
    assert again is not None and again.lines == [
        "\"Train the drafter, 3 epochs\" (t2): priority 'medium' -> 'low' by human"]


def test_opencode_names_an_item_by_its_place_in_its_last_todowrite(db_path: Path) -> None:
    """`harness hook opencode` (tool.after): the notice the plugin appends to a tool's
    output names the todo by its place in the list opencode last sent."""
    from harness.agents.opencode import hooks as opencode
    from harness.context import Harness

    h = Harness(str(db_path), "work")
    write = {"type": "todo.updated", "properties": {"sessionID": "s1", "todos": [
        {"content": "Regenerate samples", "status": "in_progress", "priority": "medium"},
        {"content": "Train the drafter", "status": "pending", "priority": "medium"}]}}
    assert opencode.handle(write, h) is None
    assert opencode.handle({"type": "tool.after", "sessionID": "s1"}, h) is None
    todos.set_priority(h.store, h.session().id, "t2", "high")
    told = opencode.handle({"type": "tool.after", "sessionID": "s1"}, h)
    assert told == (agent_notice.HEAD + ":\n"
                    "- item 2 \"Train the drafter\" (t2): priority 'medium' -> 'high' by human")
