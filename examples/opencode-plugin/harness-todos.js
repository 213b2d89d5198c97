// todo-harness for opencode: copy every todo list opencode writes into the harness store.
//
// Install: copy this file to .opencode/plugins/ (this project) or
// ~/.config/opencode/plugins/ (every project). opencode loads it at startup.
//
// opencode publishes `todo.updated` ({ sessionID, todos }) whenever its todowrite tool
// changes the list. The plugin hands the event's properties to `harness hook opencode`,
// which merges the list into the harness session (people's items and priorities are
// kept) and never fails: problems go to the harness data directory's logs/hooks.log.
//
// Which session: the harness's usual rules (HARNESS_SESSION, then `harness session use`,
// then "default"). Set HARNESS_TODO_PER_SESSION=1 to give every opencode session its
// own harness session, named opencode-<sessionID>.
// Which command: HARNESS_BIN (default "harness").

export const HarnessTodos = async ({ directory }) => {
  const bin = process.env.HARNESS_BIN || "harness"
  // Calls for one list must not overtake each other: chain them.
  let last = Promise.resolve()

  const ingest = async (properties) => {
    const env = { ...process.env }
    if (process.env.HARNESS_TODO_PER_SESSION === "1" && properties.sessionID) {
      env.HARNESS_SESSION = `opencode-${properties.sessionID}`
    }
    try {
      const proc = Bun.spawn([bin, "hook", "opencode"], {
        cwd: directory,
        env,
        stdin: new Blob([JSON.stringify(properties)]),
        stdout: "ignore",
        stderr: "ignore",
      })
      await proc.exited
    } catch (err) {
      // The harness is not installed or not on PATH: never disturb the agent.
    }
  }

  return {
    event: async ({ event }) => {
      if (event.type !== "todo.updated") return
      last = last.then(() => ingest(event.properties))
      await last
    },
  }
}
