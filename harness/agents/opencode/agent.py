"""opencode, as the harness meets it (:class:`harness.agents.seam.Agent`).

opencode's todowrite is built in; what the harness sees of it comes from the plugin in
``examples/opencode-plugin/`` (copied into ``.opencode/plugins/``), which runs ``harness
hook opencode`` (:mod:`harness.agents.opencode.hooks`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.agents.seam import Agent

if TYPE_CHECKING:
    from harness.agents.doctor import Finding
    from harness.agents.transcripts import Parser

PLUGIN = "harness-todos.js"


class Opencode(Agent):
    name = "opencode"
    title = "opencode"
    program = "opencode"
    program_env = "HARNESS_OPENCODE_BIN"
    todo_tools = ("todowrite",)
    notices = ("the plugin appends it to the next tool's output (tool.after); items as "
               "item N (their place in the last todowrite)")
    prime_note = ("With the opencode plugin (examples/opencode-plugin/), your todowrite "
                  "calls are copied in and the list is kept through compaction.")
    hook_help = """An opencode `todo.updated` event on stdin (the event, or its properties
    {sessionID, todos}); the list is merged into the session. See
    examples/opencode-plugin/ for the plugin that calls this (and puts the list into
    opencode's compaction)."""
    formats: ClassVar[Mapping[str, str]] = {
        "opencode-export": "opencode's markdown export (todowrite)",
        "opencode-json": "opencode export JSON, storage part files, run --format json events",
    }
    hooks = "harness.agents.opencode.hooks"
    session_prefix = "opencode"

    def project_dir(self, payload: Any) -> Path | None:
        return None  # the plugin's events do not say; the store is found from here

    def session_for(self, payload: Any, explicit: str | None = None) -> str | None:
        return explicit

    def doctor(self, project: Path, program: Path, version: str | None) -> Finding:
        from harness.agents.doctor import Finding, read_doc, rel

        f = Finding(self.name, str(program), version)
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        folders = [project / ".opencode", config_home / "opencode"]
        off = [p for p in (project / "opencode.json",
                           config_home / "opencode" / "opencode.json")
               if (read_doc(p).get("tools") or {}).get("todowrite") is False]
        if off:
            f.how = f"todowrite is turned off in {rel(off[0], project)}"
            f.todo.append(f"remove \"todowrite\": false from `tools` in {off[0]}")
        else:
            f.writes, f.how = True, "todowrite (built in)"
        plugin = next((d / sub / PLUGIN for d in folders for sub in ("plugins", "plugin")
                       if (d / sub / PLUGIN).exists()), None)
        if plugin is None:
            f.seen_how = f"no {PLUGIN} in .opencode/plugins/ or ~/.config/opencode/plugins/"
            f.todo.append(f"copy examples/opencode-plugin/{PLUGIN} into .opencode/plugins/")
        else:
            f.seen, f.seen_how = True, f"the plugin {rel(plugin, project)}"
        return f

    def sniff_text(self, text: str) -> str | None:
        stripped = text.lstrip("\ufeff \t\r\n")
        if re.search(r"^\*\*Session ID:\*\*", text, re.M) or (
                stripped.startswith("#") and re.search(r"^## (User|Assistant)\b", text, re.M)):
            return "opencode-export"
        return None

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        if "sessionID" in obj or (obj.get("type") == "tool" and "callID" in obj):
            return "opencode-json"
        return None

    def sniff_document(self, text: str) -> str | None:
        if re.search(r'"messages"\s*:', text) and re.search(r'"info"\s*:', text):
            return "opencode-json"
        if re.search(r'"callID"\s*:', text) and re.search(r'"tool"\s*:', text):
            return "opencode-json"
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        if fmt == "opencode-export":
            from harness.agents.opencode.export_md import OpencodeMarkdownParser

            return OpencodeMarkdownParser(fh, where, fallback_ts=fallback_ts)
        from harness.agents.opencode.export_json import OpencodeJsonParser

        return OpencodeJsonParser(fh, where, fallback_ts=fallback_ts)


AGENT = Opencode()
