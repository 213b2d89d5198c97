"""``harness mcp``: the harness as an MCP server over stdio (the official ``mcp`` SDK).

Built on the SDK's low-level :class:`mcp.server.Server`, so the tool schemas are the
hand-written ones in :mod:`harness.agents.tools` (with descriptions written for a model)
and argument checking gives our own one-line messages.

* Tools: :data:`harness.agents.tools.TOOLS`. Every failure comes back as a tool error
  (``isError``) with one line naming the problem; an unexpected exception is logged to
  ``<data dir>/logs/mcp.log`` and answered the same way. The server never exits on a bad
  call. An unknown tool name is a protocol error (-32602), as the MCP spec says.
* Resources: ``harness://todos`` (the list, JSON), ``harness://todos/prompt`` (the compact
  block) for the server's session, and ``harness://sessions/{name}/todos`` for any other.
* Every other tool's answer starts with a short notice of what others (people, the
  runner, other agents) changed in the server's session since this agent last saw it,
  told once (:mod:`harness.agents.notice`); ``todowrite`` and ``todoread`` show it in
  their own answer.
* Every call is the agent's heartbeat: it renews the leases of its claims in the
  server's session, and a lease that ran out is ended, not taken back, and told in the
  notice (:func:`harness.agents.leases.renew`).
* Every write is an event by ``agent:<client name>``, the ``clientInfo.name`` the client
  sent in its initialize handshake (``--actor`` overrides it).
* Store calls are blocking; they run one at a time in a worker thread, so the event loop
  keeps answering (pings, cancellations) while SQLite waits on a lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from harness import __version__
from harness.agents.leases import renew
from harness.agents.logfile import log
from harness.agents.notice import Labeler, seen_now, take
from harness.agents.todolist import prompt_block, todo_json
from harness.agents.tools import TOOLS, Answer, ToolEnv, ToolSpec
from harness.context import Harness
from harness.errors import KNOWN_ERRORS, InputError, render
from state import retry

# An agent's way of naming items (harness.agents.seam.Agent.labels), for an actor.
Labels = Callable[[Harness, str], "Labeler | None"]

SERVER_NAME = "todo-harness"
DEFAULT_AGENT = "mcp"
INSTRUCTIONS = (
    "todo-harness keeps this project's todo list durable and shared with people. Write your "
    "whole list with todowrite whenever it changes, read the notes in its answer (people "
    "reprioritise, add and block items), and read it back with todoread after a context "
    "compaction or a restart. pipeline_status, run_logs and verification_results show runs "
    "and their measured checks; replay shows the list's history."
)
URI_TODOS = "harness://todos"
URI_PROMPT = "harness://todos/prompt"
URI_SESSION_PREFIX = "harness://sessions/"
# Tools whose answer shows the agent what others changed already (todowrite's notes, the
# whole list): after them the news counts as seen instead of being told twice.
SHOWS_LIST = ("todowrite", "todoread")


def agent_name(ctx: ServerRequestContext[Any, Any] | None, override: str | None) -> str:
    """``agent:<name>``: ``--actor``, else the client's name from its handshake."""
    name = override
    if not name and ctx is not None:
        params = ctx.session.client_params
        info = params.client_info if params is not None else None
        name = getattr(info, "name", None)
    name = " ".join(str(name or "").split())[:64] or DEFAULT_AGENT
    return name if name.startswith("agent:") else f"agent:{name}"


def _text_result(text: str, data: dict[str, Any] | None = None,
                 error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=data, is_error=error)


class HarnessMCP:
    """One server: a Harness (store and session), the tools, and the resources."""

    def __init__(self, harness: Harness, *, actor: str | None = None,
                 tools: dict[str, ToolSpec] | None = None, instructions: str = INSTRUCTIONS,
                 labels: Labels | None = None):
        self.harness = harness
        self.actor_override = actor
        self.labels = labels  # how the agent beside whose hooks we serve names an item
        self.tools = tools if tools is not None else dict(TOOLS)
        self._limiter: anyio.CapacityLimiter | None = None
        self.server: Server[Any] = Server(
            SERVER_NAME, version=__version__, title="todo-harness",
            description="A durable, replayable todo list and pipeline runner for agents.",
            instructions=instructions,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource)

    # -- running ------------------------------------------------------------------------
    async def _blocking(self, fn: Any, *args: Any) -> Any:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(partial(fn, *args), limiter=self._limiter)

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    # -- tools --------------------------------------------------------------------------
    async def _list_tools(self, _ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, title=t.title, description=t.description,
                       input_schema=t.schema,
                       annotations=types.ToolAnnotations(
                           read_only_hint=t.read_only,
                           destructive_hint=False, idempotent_hint=t.read_only,
                           open_world_hint=False))
            for t in self.tools.values()])

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = self.tools.get(params.name)
        if spec is None:
            raise MCPError(types.INVALID_PARAMS,
                           f"unknown tool {params.name!r} (known: {', '.join(self.tools)})")
        env = ToolEnv(self.harness, agent_name(ctx, self.actor_override))
        try:
            # The store may be away for a while (a restart, a cut network): the call runs
            # again from the top within the store's retry budget (state/retry.py).
            answer = await self._blocking(partial(
                retry.run, partial(self._answer, spec, env, params.arguments),
                what=f"the {spec.name} call"))
        except KNOWN_ERRORS as exc:
            return _text_result(render(exc), error=True)
        except Exception as exc:  # a bug of ours: answer, log, keep serving
            where = log("mcp", f"tool {params.name} failed", exc)
            return _text_result(f"error: internal error in {params.name}: "
                                f"{type(exc).__name__}: {exc}"
                                + (f" (details in {where})" if where else ""), error=True)
        return _text_result(answer.render(), answer.data)

    def _answer(self, spec: ToolSpec, env: ToolEnv, args: dict[str, Any] | None) -> Answer:
        """The tool's answer, led by a notice of what others changed in the server's
        session since this agent last saw it (:mod:`harness.agents.notice`). The call is
        the agent's heartbeat first: its leases there are renewed, and one that ran out is
        ended and told in this very notice (:func:`harness.agents.leases.renew`)."""
        try:
            sess = self.harness.session()
        except KNOWN_ERRORS:
            sess = None  # the server has no session of its own (yet): nothing to tell
        if sess is not None:
            renew(self.harness.store, sess.id, env.actor)
        answer = spec.call(env, args)
        asked = (args or {}).get("session")
        if sess is None:
            return answer
        if asked and asked != sess.name:
            return answer  # about another session: this one's news waits for its answer
        store = self.harness.store
        if spec.name in SHOWS_LIST:
            seen_now(store, sess.id, env.actor)  # its notes, or the list itself, told it
            return answer
        label = self.labels(self.harness, env.actor) if self.labels is not None else None
        notice = take(store, sess.id, env.actor, label=label)
        if notice is None:
            return answer
        # In the text and the structured data both: Claude Code shows the model the
        # structured data when there is some (2.1.197), other clients the text.
        return Answer({"notice": notice.text(), **answer.data},
                      notice.text() + "\n\n" + answer.render())

    # -- resources ------------------------------------------------------------------------
    async def _list_resources(self, _ctx: Any, _params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=URI_TODOS, name="todos", title="Todo list",
                           description="The session's todo list, every field (JSON).",
                           mime_type="application/json"),
            types.Resource(uri=URI_PROMPT, name="todos-prompt", title="Todo list (compact)",
                           description="The session's todo list as a compact text block.",
                           mime_type="text/plain"),
        ])

    async def _list_templates(self, _ctx: Any,
                              _params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=URI_SESSION_PREFIX + "{name}/todos",
                                   name="session-todos", title="Another session's todos",
                                   description="The todo list of the named session (JSON).",
                                   mime_type="application/json")])

    async def _read_resource(self, _ctx: Any,
                             params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            text, mime = await self._blocking(retry.run, partial(self._resource_text, uri))
        except KNOWN_ERRORS as exc:
            raise MCPError(types.INVALID_PARAMS, render(exc)) from None
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    def _resource_text(self, uri: str) -> tuple[str, str]:
        env = ToolEnv(self.harness, DEFAULT_AGENT)
        if uri in (URI_TODOS, URI_PROMPT):
            sess = env.session(None)
        elif uri.startswith(URI_SESSION_PREFIX) and uri.endswith("/todos"):
            sess = env.session(uri[len(URI_SESSION_PREFIX):-len("/todos")])
        else:
            raise InputError(f"unknown resource {uri!r} (known: {URI_TODOS}, {URI_PROMPT}, "
                            f"{URI_SESSION_PREFIX}{{name}}/todos)")
        todos = sorted(self.harness.store.todos(sess.id), key=lambda t: (t.position, t.num))
        if uri == URI_PROMPT:
            return prompt_block(todos, sess.name), "text/plain"
        by_num = {t.num: t for t in todos}
        return json.dumps({"session": sess.name,
                           "todos": [todo_json(t, by_num) for t in todos]},
                          indent=2, ensure_ascii=False), "application/json"


def serve(harness: Harness, *, actor: str | None = None,
          tools: dict[str, ToolSpec] | None = None, instructions: str = INSTRUCTIONS,
          labels: Labels | None = None) -> None:
    """Serve on stdin/stdout until the client closes the connection. ``labels``: how the
    agent this server sits beside names an item in a notice
    (:meth:`harness.agents.seam.Agent.labels`; ``harness mcp --agent NAME``)."""
    anyio.run(HarnessMCP(harness, actor=actor, tools=tools, instructions=instructions,
                         labels=labels).serve_stdio)
