"""Each agent's own route into the store: Claude Code's, Codex's, Gemini CLI's and Copilot
CLI's hooks fed payloads in their shapes, their installers, Codex's rollout watcher, and
opencode's plugin run by Node."""
