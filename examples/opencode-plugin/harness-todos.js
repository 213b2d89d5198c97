// todo-harness for opencode: copy every todo list opencode writes into the harness store,
// and put the list back into the context when opencode compacts a session.
//
// Install: copy this file to .opencode/plugins/ (this project) or
// ~/.config/opencode/plugins/ (every project). opencode loads it at startup.
//
// * `todo.updated` ({ sessionID, todos }), published whenever opencode's todowrite tool
//   changes the list: the event goes to `harness hook opencode`, which merges the list
//   into the harness session (people's items and priorities are kept).
// * `experimental.session.compacting` (input { sessionID }, output { context, prompt }),
//   called before opencode summarises a session: `harness hook opencode` records the
//   compaction in the session's history and prints the list, which goes into
//   output.context, so the summary keeps it (opencode #5934: todos forgotten after
//   compaction).
// * `tool.execute.after` (input { tool, sessionID, callID }, output { title, output,
//   metadata }), called once a tool has run: `harness hook opencode` prints what a person
//   (or the runner) changed in the list since opencode last saw it, and that is appended
//   to the tool's output, so the model reads it in its next request, without waiting for
//   a compaction. Nothing new: the output is left as it is.
//
// The hook never fails: problems go to the harness data directory's logs/hooks.log, and
// a harness that is not installed changes nothing in opencode.
//
// Which session: the harness's usual rules (HARNESS_SESSION, then `harness session use`,
// then "default"). Set HARNESS_TODO_PER_SESSION=1 to give every opencode session its
// own harness session, named opencode-<sessionID>.
// Which command: HARNESS_BIN (default "harness").

export const HarnessTodos = async ({ directory }) => {
  const bin = process.env.HARNESS_BIN || "harness"
  // Calls for one list must not overtake each other: chain them.
  let last = Promise.resolve()

  const envFor = (sessionID) => {
    const env = { ...process.env }
    if (process.env.HARNESS_TODO_PER_SESSION === "1" && sessionID) {
      env.HARNESS_SESSION = `opencode-${sessionID}`
    }
    return env
  }

  // Run `harness hook opencode` with one event on stdin; its stdout ("" on any trouble).
  const hook = async (event) => {
    try {
      const proc = Bun.spawn([bin, "hook", "opencode"], {
        cwd: directory,
        env: envFor(event.properties && event.properties.sessionID),
        stdin: new Blob([JSON.stringify(event)]),
        stdout: "pipe",
        stderr: "ignore",
      })
      const text = await new Response(proc.stdout).text()
      await proc.exited
      return text
    } catch (err) {
      return "" // the harness is not installed or not on PATH: never disturb the agent
    }
  }

  const queued = (event) => {
    const run = last.then(() => hook(event))
    last = run.catch(() => "")
    return run
  }

  return {
    event: async ({ event }) => {
      if (event.type !== "todo.updated") return
      await queued({ type: event.type, properties: event.properties })
    },
    "experimental.session.compacting": async (input, output) => {
      const text = await queued({ type: "session.compacting",
                                  properties: { sessionID: input.sessionID } })
      if (text.trim()) output.context.push(text.trim())
    },
    "tool.execute.after": async (input, output) => {
      const text = await queued({ type: "tool.after",
                                  properties: { sessionID: input.sessionID, tool: input.tool } })
      if (text.trim() && output && typeof output.output === "string") {
        output.output = `${output.output}\n\n${text.trim()}`
      }
    },
  }
}
