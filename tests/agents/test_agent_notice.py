"""harness/agents/notice.py on a real store: what others changed since an agent last saw
its list, told once, in its own words, surviving processes (the mark is in the store)."""

from __future__ import annotations

from harness import todos
from harness.agents import notice as agent_notice
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
        "t2 priority 'medium' -> 'high' by human",
        "t3 'Check the acceptance length' was added by human (pending, medium)"]
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
    assert again.lines == ["t1 status 'pending' -> 'blocked' "
                           "('GPU quota') by human"]
