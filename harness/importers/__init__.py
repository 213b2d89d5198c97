"""Importing agent transcripts (and ``harness export`` files) into the store.

One module per format, each a parser that yields the todo calls it finds:

==================  ===============================================  ======================
format              what                                             module
==================  ===============================================  ======================
claude-code         Claude Code session JSONL (TodoWrite v1/v2,      :mod:`.claude`
                    TaskCreate/TaskUpdate/TaskList)
claude-stream       ``claude -p --output-format stream-json``        :mod:`.claude`
opencode-export     opencode's markdown export                       :mod:`.opencode_md`
opencode-json       ``opencode export`` JSON, storage parts, events  :mod:`.opencode_json`
codex               Codex CLI rollout JSONL (update_plan)            :mod:`.codex`
gemini-chat         Gemini CLI saved chats (write_todos, tracker)    :mod:`.gemini`
gemini-checkpoint   Gemini CLI ``/chat save`` and tool checkpoints   :mod:`.gemini`
harness             ``harness export`` JSONL                         :mod:`.harness_jsonl`
==================  ===============================================  ======================

:func:`detect` names the format from a file's first bytes; :func:`import_file` does the
rest (see :mod:`.engine` for the transaction and idempotency rules).
"""

from harness.importers.base import ImportReport
from harness.importers.detect import FORMATS, detect
from harness.importers.engine import import_file

__all__ = ["FORMATS", "ImportReport", "detect", "import_file"]
