"""Cuts of an agent's context, as every agent's hooks report them: compaction, ``/clear``,
a resume or a fresh start.

Each cut is one ``agent.context`` event in the session's history (``{agent, cut,
trigger, agent_session}``; the fold ignores the kind, ``harness replay`` and ``harness
log`` show it), and it empties the agent's view, so the first list the new context writes
removes nothing it leaves out. After a cut the agent gets the list back: Claude Code and
Codex take it from a ``SessionStart`` hook's ``hookSpecificOutput.additionalContext``,
opencode's plugin from the text it is handed (:func:`restore_block`).

Claude Code (:mod:`harness.agents.claude.hooks`) and Codex (:mod:`harness.agents.codex.hooks`) send the
same three events with the same fields, handled here by :func:`context_event`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from harness.agents.leases import renew
from harness.agents.notice import Labeler, mark_seen, seen_now, take
from harness.context import Harness
from state.store import Tx

CONTEXT_KIND = "agent.context"
CONTEXT_EVENTS = ("SessionStart", "PreCompact", "PostCompact")
SESSION_SOURCES = ("startup", "resume", "clear", "compact")


def context_event(harness: Harness, payload: Mapping[str, Any], *, actor: str,
                  tail: str, hint: str | None = None) -> str | None:
    """A ``SessionStart`` (``source`` startup, resume, clear or compact) or a
    ``PreCompact``/``PostCompact`` (``trigger`` manual or auto) hook: the cut is recorded;
    ``SessionStart`` answers with ``hint`` (how to keep the plan) and the list as
    ``additionalContext`` (None: nothing to say)."""
    event = payload.get("hook_event_name")
    if event == "SessionStart":
        source = payload.get("source")
        if source in SESSION_SOURCES:
            record_cut(harness, payload, str(source), actor=actor)
        block = restore_block(harness, tail)
        # The answer is the whole list: what others changed before it is not news.
        seen_now(harness.store, harness.session(create=True).id, actor)
        text = "\n\n".join(part for part in (hint, block) if part)
        if not text:
            return None  # nothing to restore; say nothing rather than add noise
        return additional_context("SessionStart", text)
    record_cut(harness, payload, "compact", actor=actor, phase=str(event))
    return None


def additional_context(event: str, text: str) -> str:
    """A hook answer that Claude Code and Codex add to the model's context."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event,
                                              "additionalContext": text}}, ensure_ascii=False)


def notice_answer(harness: Harness, event: str, actor: str,
                  label: Labeler | None = None) -> str | None:
    """What others changed since the agent last saw the list, as the answer to ``event``
    (None: nothing new, and nothing is printed); ``label`` names the items as the agent
    knows them. The hook is the agent's heartbeat first: its leases are renewed, and one
    that ran out is ended and told in this notice."""
    sid = harness.session(create=True).id
    renew(harness.store, sid, actor)
    notice = take(harness.store, sid, actor, label=label)
    return None if notice is None else additional_context(event, notice.text())


def agent_views(harness: Harness) -> Callable[[str], Any]:
    """The session's agent views by key, read when asked (for a :data:`Labeler`)."""
    return partial(harness.store.agent_view, harness.session(create=True).id)


def restore_block(harness: Harness, tail: str) -> str | None:
    """The session's list as the agent gets it back after a cut (None: the list is empty)."""
    from harness.agents.todolist import prompt_block

    sess = harness.session(create=True)
    todos = sorted(harness.store.todos(sess.id), key=lambda t: (t.position, t.num))
    return prompt_block(todos, sess.name, tail=tail) if todos else None


OWED = "/restore"  # an agent view: a cut whose list the agent has not been shown yet


def owe(harness: Harness, actor: str) -> None:
    """The agent's context was cut where its program takes no answer (Gemini CLI's
    ``/clear`` and ``/compress``, Copilot CLI's compaction): the next answer it reads
    shows the whole list (:func:`whole_list`)."""
    with harness.store.write(harness.session(create=True).id, actor) as tx:
        tx.set_agent_view(actor + OWED, {"owed": True, "n": tx.state.n})


def owed(harness: Harness, actor: str) -> bool:
    view = harness.store.agent_view(harness.session(create=True).id, actor + OWED)
    return isinstance(view, dict) and bool(view.get("owed"))


def whole_list(harness: Harness, actor: str, tail: str) -> str | None:
    """The list as an answer shows it (None: empty); everything up to now counts as seen,
    and nothing is owed any more."""
    block = restore_block(harness, tail)
    with harness.store.write(harness.session(create=True).id, actor) as tx:
        mark_seen(tx, actor)
        if tx.agent_view_text(actor + OWED):
            tx.set_agent_view(actor + OWED, {})
    return block


def record_cut(harness: Harness, payload: Mapping[str, Any], cut: str, *, actor: str,
               phase: str | None = None) -> bool:
    """One ``agent.context`` event per cut of the agent's context. A compaction reaches
    us up to three times (PreCompact, PostCompact, SessionStart ``compact``): the first
    is recorded, the others find it last in the history and add nothing."""
    agent_session = str(payload.get("session_id") or "")
    data: dict[str, Any] = {"agent": actor.removeprefix("agent:"), "cut": cut,
                            "agent_session": agent_session}
    trigger = payload.get("trigger")
    if isinstance(trigger, str) and trigger:
        data["trigger"] = trigger  # manual (/compact) or auto
    if phase:
        data["hook"] = phase
    sid = harness.session(create=True).id
    with harness.store.write(sid, actor) as tx:
        last = _last_event(tx)
        if (last is not None and last[0] == CONTEXT_KIND
                and last[1].get("agent_session") == agent_session
                and last[1].get("cut") == cut):
            return False
        tx.emit(CONTEXT_KIND, payload=data)
        forget_view(tx, actor)
        return True


def forget_view(tx: Tx, actor: str) -> None:
    """After a cut the agent's whole-list writes start from what the new context holds,
    not from what the old one knew: the first list it writes then removes nothing it
    leaves out (the silent deletions after compaction and /clear that Claude Code's users
    report). Its items still match the stored ones by text, so nothing is duplicated."""
    text = tx.agent_view_text(actor)
    if not text:
        return
    try:
        fmt = json.loads(text).get("format")
    except (ValueError, AttributeError):
        fmt = None
    tx.set_agent_view(actor, {"format": fmt, "n": tx.state.n, "items": []})


def _last_event(tx: Tx) -> tuple[str, dict[str, Any]] | None:
    if not tx.state.n:
        return None
    row = tx.fetch_one("SELECT kind, payload FROM events WHERE session_id = ? AND n = ?",
                       tx.session_id, tx.state.n)
    return (row[0], json.loads(row[1])) if row else None
