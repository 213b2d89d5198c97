// todo-harness: the todo list for pi, kept by the harness (`harness hook pi install`).
// It gives the model a `todowrite` tool whose list lands in todo-harness's store, gives
// the list back after a compaction or a restart, and tells the model what a person (or
// another agent) changed. Each of those is one `harness hook pi` call through pi.exec.
// `harness hook pi uninstall` removes this file.
import { StringEnum } from "@mariozechner/pi-ai";
import type { ExtensionAPI, ExtensionContext } from "@mariozechner/pi-coding-agent";
import { Type } from "typebox";

const HARNESS: string[] = ["harness"];
const TIMEOUT_MS = 30_000;
const MAX_PAYLOAD = 100_000; // one command-line argument; a list is far smaller

const Todo = Type.Object({
	content: Type.String({ minLength: 1, description: 'What to do ("Run tests").' }),
	status: StringEnum(["pending", "in_progress", "completed", "cancelled"] as const),
	priority: Type.Optional(StringEnum(["high", "medium", "low"] as const)),
});

export default function (pi: ExtensionAPI) {
	async function harness(
		event: string,
		payload: Record<string, unknown>,
		ctx: ExtensionContext,
	): Promise<{ text: string; error: string }> {
		const body = JSON.stringify({
			...payload,
			cwd: ctx.cwd,
			session_id: ctx.sessionManager.getSessionId(),
		});
		if (body.length > MAX_PAYLOAD) {
			return { text: "", error: `the list is too long for todo-harness (${body.length} bytes)` };
		}
		const [command, ...args] = HARNESS;
		const r = await pi.exec(command, [...args, "hook", "pi", "--event", event, "--payload", body], {
			timeout: TIMEOUT_MS,
			cwd: ctx.cwd,
		});
		const error = r.stderr.trim() || (r.code !== 0 ? `harness exited ${r.code}` : "");
		return { text: r.stdout.trim(), error };
	}

	pi.registerTool({
		name: "todowrite",
		label: "Todo list",
		description:
			"Save your todo list in todo-harness (shared with people and other agents; it " +
			"survives compaction and restarts). Send the WHOLE list each time it changes. " +
			"Items a person added are kept even if you leave them out. The answer is the " +
			"list as it stands, with notes on what others changed.",
		promptSnippet: "Keep your plan as a todo list (the whole list each time)",
		parameters: Type.Object({ todos: Type.Array(Todo) }),
		async execute(toolCallId, params, _signal, _onUpdate, ctx) {
			const r = await harness("todowrite", { todos: params.todos, tool_call_id: toolCallId }, ctx);
			if (!r.text) throw new Error(r.error || "todo-harness did not answer");
			return { content: [{ type: "text", text: r.text }], details: { todos: params.todos } };
		},
	});

	// The latest compaction on the session's branch (pi -p ends before its last one is
	// announced: the next start tells it).
	function lastCompaction(ctx: ExtensionContext): string | null {
		const found = ctx.sessionManager.getBranch().filter((e) => e.type === "compaction");
		return found.length ? found[found.length - 1].id : null;
	}

	pi.on("session_start", async (event, ctx) => {
		const entries = ctx.sessionManager.getEntries().filter((e) => e.type === "message").length;
		await harness("session_start", { reason: event.reason, entries, compaction: lastCompaction(ctx) }, ctx);
	});

	pi.on("session_compact", async (event, ctx) => {
		try {
			await harness("session_compact", { compaction: event.compactionEntry.id }, ctx);
		} catch {
			// pi -p may have let the extension go already: the next start records it.
		}
	});

	// The list after a cut, or what others changed: beside the prompt...
	pi.on("before_agent_start", async (_event, ctx) => {
		const r = await harness("before_agent_start", {}, ctx);
		if (!r.text) return;
		return { message: { customType: "todo-harness", content: r.text, display: false } };
	});

	// ...and on the next tool's result, so it reaches the model's next request.
	pi.on("tool_result", async (event, ctx) => {
		if (event.toolName === "todowrite") return; // its own answer has the list
		const r = await harness("tool_result", { tool_name: event.toolName }, ctx);
		if (!r.text) return;
		return { content: [...event.content, { type: "text", text: `\n${r.text}` }] };
	});
}
