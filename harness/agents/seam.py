"""The seam between the harness and a coding agent: what every agent folder implements.

Each agent the harness supports is one folder under ``harness/agents/`` (``claude/``,
``codex/``, ``opencode/``, ``gemini/``, ``copilot/``, ``pi/``) whose ``agent.py`` holds one
:class:`Agent` and names it in one row of :data:`harness.agents.registry.AGENTS`. The CLI
(``harness hook``, ``install``, ``uninstall``, ``doctor``, ``prime``, ``mcp --agent``,
``show``), the transcript importers' dispatcher and doctor reach an agent only through
that row, so a new agent is one folder, one row and one test file (docs/ARCHITECTURE.md,
"Adding an agent").

An :class:`Agent` says:

* who it is: :attr:`~Agent.name` (how commands spell it), :attr:`~Agent.title`, its
  program on PATH (:attr:`~Agent.program`, or :attr:`~Agent.program_env`), the actor its
  writes are recorded as (:attr:`~Agent.actor`);
* how it names its todo tools (:attr:`~Agent.todo_tools`) and where a notice of what
  others changed reaches its model (:attr:`~Agent.notices`), naming each item as the
  model knows it (:meth:`~Agent.labels`);
* what its hook does with one payload (:meth:`~Agent.hook`), and which harness session a
  payload belongs to (:meth:`~Agent.session_for`, :meth:`~Agent.project_dir`);
* how it is installed and uninstalled (:meth:`~Agent.install`, :meth:`~Agent.uninstall`,
  the extra options in :attr:`~Agent.install_options`);
* what ``harness doctor`` finds (:meth:`~Agent.doctor`) and the line ``harness prime``
  adds for it (:attr:`~Agent.prime_note`);
* how ``harness import`` reads its transcripts (:attr:`~Agent.formats`, the ``sniff_*``
  methods, :meth:`~Agent.transcript`, and for a folder of files
  :meth:`~Agent.reads_directory`).

Everything here is standard library and imports nothing at module level beyond the
use cases' light modules: an agent's ``agent.py`` is imported on every hook call, so its
methods import their parts when they run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.agents.install import InstallPlan
    from harness.agents.notice import Labeler
    from harness.agents.transcripts import ImportReport, Parser
    from harness.context import Harness
    from state.store import Store

# Opens the Harness a hook payload belongs to, when the hook first needs the store.
OpenHarness = Callable[[], "Harness"]


@dataclass(frozen=True)
class Option:
    """An option of ``harness hook AGENT install`` that only this agent has."""

    flag: str  # "--no-todo-tools"
    dest: str  # the keyword :meth:`Agent.install` gets it as
    help: str
    flag_value: Any = True  # the value when given (a flag), or None: it takes a value
    default: Any = None
    metavar: str | None = None


@dataclass
class Installed:
    """What an install (or uninstall) would write and say: the plans, in order, then
    ``note:`` lines, lines printed as they are, and what is left to the person."""

    plans: list[InstallPlan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


@dataclass
class Finding:
    """What ``harness doctor`` finds of one agent (:meth:`Agent.doctor`), or of anything
    else it checks."""

    agent: str
    program: str | None = None  # its path; None: not found
    version: str | None = None
    writes: bool = False  # the model can write todos
    how: str = ""  # with what, or why not
    seen: bool = False  # the harness gets what it writes
    seen_how: str = ""
    todo: list[str] = field(default_factory=list)  # what to set, in order
    tools: list[str] = field(default_factory=list)  # the todo tools its model has (by name)
    notices: str = ""  # where a notice of others' changes reaches its model

    @property
    def found(self) -> bool:
        return self.program is not None

    @property
    def ok(self) -> bool:
        return not self.found or (self.writes and self.seen)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "found": self.found, "ok": self.ok}


@dataclass(frozen=True)
class Link:
    """Something of the agent's own that one todo is (a Claude Code task and its file):
    ``harness show`` prints ``text`` and puts ``data`` under ``key`` in its JSON."""

    key: str
    data: dict[str, Any]
    text: str


# -- which harness session a payload belongs to ---------------------------------------------

def project_dir(payload: Any) -> Path | None:
    """The project an agent's payload comes from: ``CLAUDE_PROJECT_DIR``, else the
    payload's ``cwd``."""
    raw = os.environ.get("CLAUDE_PROJECT_DIR") or (
        payload.get("cwd") if isinstance(payload, Mapping) else None)
    return Path(raw) if isinstance(raw, str) and raw else None


def project_session_name(directory: Path) -> str:
    """The session a project directory's work goes to in a store outside the project."""
    name = re.sub(r"[^\w.-]+", "-", directory.name).strip("-.")
    return name or "root"


def project_session(payload: Any, explicit: str | None = None, *,
                    list_env: str | None = None) -> str | None:
    """The harness session for a payload (None: the store's current one): ``--session``,
    then ``list_env`` (an agent's own variable naming a shared list), then
    ``HARNESS_SESSION``, then the project directory: with a project store there
    (``harness init``), its current session; with a store elsewhere, one named after the
    directory."""
    from harness.paths import find_project_store

    if explicit:
        return explicit
    for env in (list_env, "HARNESS_SESSION"):
        value = os.environ.get(env, "").strip() if env else ""
        if value:
            return value
    directory = project_dir(payload)
    if directory is None:
        return None
    if os.environ.get("HARNESS_DB") is None and find_project_store(directory) is not None:
        return None  # the project's own store: its current session, as `harness list` sees
    return project_session_name(directory)


class Agent:
    """One coding agent, as the harness meets it. A subclass per agent folder sets the
    attributes and overrides what its agent has; what it lacks says so."""

    name: str = ""  # how commands spell it: `harness hook NAME`, `doctor --agent NAME`
    title: str = ""  # how people call it: "Claude Code"
    program: str = ""  # its program on PATH
    program_env: str = ""  # the variable that names the program instead
    todo_tools: tuple[str, ...] = ()  # the tools its model keeps its plan with
    notices: str = ""  # where a notice of others' changes reaches its model
    prime_note: str | None = None  # the line `harness prime --agent NAME` adds
    # `harness hook NAME`: its help (the events and what each does)
    hook_help: str = ""
    # The events its payloads do not name, passed as `--event` (empty: they name them).
    hook_events: tuple[str, ...] = ()
    hook_payload_arg: bool = False  # the payload may come as `--payload JSON` (no stdin)
    install_help: str | None = None  # `harness hook NAME install` (None: none)
    install_options: tuple[Option, ...] = ()
    mcp_instructions: str = ""  # added to the MCP server's with `harness mcp --agent NAME`
    # The module holding handle() and labels(), imported when a hook runs (None: no hooks).
    hooks: str | None = None
    # The module holding install(), uninstall() and doctor(), imported when one is asked
    # (None: the agent has nothing to install, and doctor knows only its program).
    setup: str | None = None
    # Transcripts: the formats `harness import` reads for it (name -> what it is, for
    # `harness import --help`), and the prefix of the session an import makes
    # (`claude-060f3873`).
    formats: Mapping[str, str] = {}
    session_prefix: str = ""
    directory_help: str | None = None  # what folder `harness import DIR` reads as its

    @property
    def actor(self) -> str:
        return f"agent:{self.name}"

    # -- hooks ---------------------------------------------------------------------------

    def project_dir(self, payload: Any) -> Path | None:
        return project_dir(payload)

    def session_for(self, payload: Any, explicit: str | None = None) -> str | None:
        """The harness session of a hook payload (None: the store's current one)."""
        return project_session(payload, explicit)

    def hook(self, payload: Any, open_harness: OpenHarness, *, actor: str,
             event: str | None = None) -> str | None:
        """Act on one hook payload; what to print on stdout (None: nothing). By default
        ``handle(payload, harness, actor=...)`` of the module :attr:`hooks` names (with
        ``event=`` too when its payloads do not name their event)."""
        if self.hooks is None:
            raise UsageError(f"{self.title} has no hooks")
        import importlib

        extra = {"event": event or ""} if self.hook_events else {}
        return importlib.import_module(self.hooks).handle(payload, open_harness(),
                                                          actor=actor, **extra)

    def labels(self, harness: Harness, actor: str) -> Labeler | None:
        """How its model knows an item, for a notice (None: by text and our id only): by
        default ``labels(harness, actor)`` of the module :attr:`hooks` names."""
        if self.hooks is None:
            return None
        import importlib

        found = getattr(importlib.import_module(self.hooks), "labels", None)
        return found(harness, actor) if found is not None else None

    # -- install and doctor -----------------------------------------------------------

    def _setup(self, what: str) -> Any:
        if self.setup is None:
            raise UsageError(f"{self.title} has nothing to {what}")
        import importlib

        return importlib.import_module(self.setup)

    def install(self, *, scope: str, cwd: Path, command: str | None, dry_run: bool,
                **options: Any) -> Installed:
        """What installing would write (:class:`Installed`); ``options`` are the agent's
        own (:attr:`install_options`)."""
        return self._setup("install").install(scope=scope, cwd=cwd, command=command,
                                              dry_run=dry_run, **options)

    def uninstall(self, *, scope: str, cwd: Path) -> Installed:
        """What removing what install wrote would write."""
        return self._setup("uninstall").uninstall(scope=scope, cwd=cwd)

    def doctor(self, project: Path, program: Path, version: str | None) -> Finding:
        """What ``harness doctor`` finds of the agent's program ``program`` here."""
        if self.setup is None:
            return Finding(self.name, str(program), version, how="the harness cannot tell")
        return self._setup("check").doctor(project, program, version)

    # -- show -----------------------------------------------------------------------------

    def links(self, store: Store, session_id: int, num: int) -> list[Link]:
        return []

    # -- transcripts ----------------------------------------------------------------------

    def sniff_text(self, text: str) -> str | None:
        """The format of a file whose text (not JSON lines) says it is this agent's."""
        return None

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        """The format of a JSON-lines file one of whose first objects is ``obj``."""
        return None

    def sniff_document(self, text: str) -> str | None:
        """The format of a pretty-printed JSON document that starts with ``text``."""
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        raise UsageError(f"{self.title} has no transcript format {fmt!r}")

    def reads_directory(self, directory: Path) -> bool:
        """Whether ``harness import DIR`` reads this folder as one of the agent's."""
        return False

    def import_directory(self, store: Store, directory: Path, *,
                         session: str | None) -> ImportReport:
        raise UsageError(f"{self.title} reads no folder")

    def follow_directory(self, store: Store, directory: Path, *, session: str | None,
                         interval: float, echo: Callable[[ImportReport], None]) -> None:
        raise UsageError(f"{self.title} follows no folder")

    def watch_dir(self) -> Path | None:
        """Where the agent keeps the transcripts :meth:`watch` follows (None: none)."""
        return None

    def watch(self, harness: Harness, root: Path, *, actor: str, backfill: bool,
              echo: Callable[[str], None], interval: float, passes: int | None,
              started: Callable[[], None]) -> None:
        """Follow the agent's transcripts under ``root`` as they grow, merging each todo
        call as it appears (``harness watch-codex``); ``started`` once it is set up."""
        raise UsageError(f"{self.title} has no transcripts to watch")
