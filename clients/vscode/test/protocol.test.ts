// The protocol layer against the REAL daemon: `rlmd attach --stdio` (which starts a daemon in a
// temp RLMD_HOME) with the scripted model from tests/helpers/scripted_models.py. No VS Code needed.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, ChildProcess } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, MessageConnection } from "vscode-jsonrpc/node";
import { RlmdApi, errorName, RunEvent, TaskStatus } from "../src/rpc/api";
import { Trajectory, answerNote, budgetNote, findFileRefs, nodeLabel, formatCost, timeline, usageTotals } from "../src/rpc/model";
import { rlmdCommand, startParams, daemonEnv, scopedQuestion } from "../src/rpc/settings";

const REPO = resolve(__dirname, "../../../..");
const PYTHON = process.env.RLMD_PYTHON || join(REPO, ".venv/bin/python");
const CELLS = `scripted:${join(REPO, "tests/helpers/scripted_models.py")}:cells`;

let home: string;
let project: string;
let child: ChildProcess;
let conn: MessageConnection;
let api: RlmdApi;
const events: RunEvent[] = [];
const statuses: TaskStatus[] = [];
const progress: any[] = [];

before(async () => {
  home = mkdtempSync(join(tmpdir(), "rlmd-vsc-"));
  // beside the home, not in it: the daemon refuses a workspace inside its home (the store)
  project = join(mkdtempSync(join(tmpdir(), "rlmd-vsc-proj-")), "proj");
  mkdirSync(join(project, "pkg"), { recursive: true });
  writeFileSync(join(project, "pkg", "core.py"), "def helper():\n    return 42\n");
  writeFileSync(join(project, "README.md"), "# demo\n");
  // The tests use the fast inprocess sandbox: over the socket that needs the user's opt-in.
  // "priced": the scripted model with a price, so costs are real numbers a test can check.
  writeFileSync(
    join(home, "config.toml"),
    "[daemon]\nallow_inprocess = true\n\n[models.priced]\nprovider = \"scripted\"\n" +
      `model = "${join(REPO, "tests/helpers/scripted_models.py")}:cells"\nprice_input = 10.0\nprice_output = 10.0\n` +
      `\n[models.partial]\nprovider = "scripted"\nmodel = "${join(home, "partial.json")}"\nprice_input = 10.0\nprice_output = 10.0\n`,
  );
  // "partial": looks at the context forever; the extraction after a budget gets a plain answer.
  writeFileSync(
    join(home, "partial.json"),
    JSON.stringify({
      rules: [{ match: "^Question: .*\\n\\nWork so far", response: "pkg/core.py:2 so far" }],
      default: "```repl\nprint(len(context))\n```",
    }),
  );
  const cmd = rlmdCommand({ pythonPath: PYTHON }, "attach", "--stdio");
  child = spawn(cmd.command, cmd.args, { env: daemonEnv({ home }), stdio: ["pipe", "pipe", "inherit"] });
  conn = createMessageConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
  conn.onRequest("window/workDoneProgress/create", () => null);
  conn.onNotification("$/progress", (p) => progress.push(p));
  conn.listen();
  api = new RlmdApi(conn, 60_000);
  api.onEvent((e) => events.push(e));
  api.onTaskStatus((s) => statuses.push(s));
  const init: any = await conn.sendRequest("initialize", {
    processId: process.pid,
    rootUri: null,
    capabilities: { window: { workDoneProgress: true } },
    initializationOptions: { events: "summary" },
  });
  assert.ok(init.capabilities.executeCommandProvider.commands.includes("rlmd.task.start"));
  assert.equal(init.serverInfo.name, "rlmd");
  await conn.sendNotification("initialized", {});
});

after(async () => {
  let pid: number | undefined;
  try {
    pid = (await api.health()).pid;
    await conn.sendRequest("shutdown");
    await conn.sendNotification("exit");
  } catch {
    /* already gone */
  }
  await new Promise<void>((r) => (child.exitCode !== null ? r() : child.once("exit", () => r())));
  conn.dispose();
  if (pid) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      /* gone */
    }
    for (let i = 0; i < 100; i++) {
      try {
        process.kill(pid, 0);
        await new Promise((r) => setTimeout(r, 100));
      } catch {
        break;
      }
    }
  }
  rmSync(home, { recursive: true, force: true });
  rmSync(resolve(project, ".."), { recursive: true, force: true });
});

test("health: the daemon attach started lives in the temp home", async () => {
  const h = await api.health();
  assert.equal(h.ok, true);
  assert.equal(h.mode, "socket");
  assert.equal(resolve(h.home), resolve(home));
});

test("a task runs to the end: status, events, live trajectory, progress, store tree", async () => {
  const question = JSON.stringify({ cells: ["print(read_file('pkg/core.py'))", "FINAL('see pkg/core.py:2 and README.md')"] });
  const p = startParams({ rootModel: CELLS, sandbox: "inprocess", budgets: { maxIterations: 5 } }, project, question);
  assert.deepEqual(p.models, { root: CELLS });
  const started = await api.start(p);
  assert.ok(started.run_id);
  assert.ok(["queued", "running"].includes(started.state));
  const fin = await api.waitFinished(started.run_id, 60_000);
  assert.equal(fin.status, "completed", fin.error ?? "");
  assert.equal(fin.answer, "see pkg/core.py:2 and README.md");

  // live events build the same trajectory as the store
  const live = new Trajectory(started.run_id);
  for (const e of events) live.apply(e);
  live.settle();
  assert.equal(live.root?.status, "completed");
  assert.equal(live.root?.nodes.length, 2);
  assert.deepEqual(live.root?.nodes.map((n) => n.state), ["done", "done"]);
  const iter = live.root!.nodes[0];
  assert.equal(iter.kind, "iteration");
  const kinds = iter.children.map((n) => n.kind);
  assert.ok(kinds.includes("model_call") && kinds.includes("cell"), kinds.join());
  const cell = iter.children.find((n) => n.kind === "cell")!;
  assert.match(cell.stdout ?? "", /return 42/, JSON.stringify(events.filter((e) => e.kind === "cell.finished").map((e) => e.data)).slice(0, 1500));
  assert.match(nodeLabel(cell), /^cell 1: print\(read_file/);

  const { run, tree } = await api.getRun(started.run_id, true);
  assert.equal(run?.status, "completed");
  const stored = Trajectory.fromStore(tree);
  assert.equal(stored.root?.nodes.length, 2);
  const scell = stored.root!.nodes[0].children.find((n) => n.kind === "cell");
  assert.ok(scell, JSON.stringify(tree.nodes[0]).slice(0, 500));
  assert.match(scell!.stdout ?? "", /return 42/);

  // runs list and taskStatus notifications
  const runs = await api.runs({ workspace: project });
  assert.equal(runs[0].id, started.run_id);
  assert.ok(statuses.some((s) => s.run_id === started.run_id && s.state === "finished"));
  assert.ok(progress.some((p) => p.token === `rlmd-${started.run_id}` && p.value.kind === "end"));

  // file references in the answer
  const refs = findFileRefs(fin.answer!, (f) => existsSync(join(project, f)));
  assert.deepEqual(refs.map((r) => [r.path, r.line]), [["pkg/core.py", 2], ["README.md", undefined]]);
});

test("child runs nest under the cell that started them (live and from the store)", async () => {
  const question = JSON.stringify({ cells: ["r = rlm_query('what is in pkg?')\nprint(r)", "FINAL(r)"] });
  const started = await api.start(startParams({ rootModel: CELLS, sandbox: "inprocess", budgets: { maxDepth: 2 } }, project, question));
  const fin = await api.waitFinished(started.run_id, 60_000);
  assert.equal(fin.status, "completed", fin.error ?? "");
  const live = new Trajectory(started.run_id);
  for (const e of events) live.apply(e);
  live.settle();
  const { tree } = await api.getRun(started.run_id, true);
  for (const t of [live, Trajectory.fromStore(tree)]) {
    const cell = t.root!.nodes[0].children.find((n) => n.kind === "cell")!;
    assert.equal(cell.runs.length, 1, JSON.stringify(t.root).slice(0, 800));
    assert.equal(cell.runs[0].depth, 1);
    assert.equal(cell.runs[0].status, "completed");
    assert.equal(t.root!.runs.length, 0);
  }
});

test("cancel stops a running task", async () => {
  const question = JSON.stringify({ cells: ["x = 1"], sleep_s: 30 });
  const started = await api.start(startParams({ rootModel: CELLS, sandbox: "inprocess" }, project, question));
  const t0 = Date.now();
  for (;;) {
    const s = await api.status(started.run_id);
    if (s.state === "running") break;
    assert.ok(Date.now() - t0 < 20_000, "task never started");
    await new Promise((r) => setTimeout(r, 100));
  }
  const c = await api.cancel(started.run_id);
  assert.equal(c.cancel_requested, true);
  const fin = await api.waitFinished(started.run_id, 30_000);
  assert.equal(fin.status, "cancelled");
  assert.ok(Date.now() - t0 < 25_000);
});

test("errors carry rlmd names; models list includes usability", async () => {
  await assert.rejects(api.cancel("nope"), (e) => errorName(e) === "NOT_FOUND");
  await assert.rejects(api.command("rlmd.task.start", { workspace: project }), (e) => errorName(e) === "INVALID_PARAMS");
  const models = await api.models(project);
  assert.ok(models.length > 0);
  assert.ok(models.every((m) => typeof m.usable === "boolean"));
});

test("pure helpers", () => {
  assert.deepEqual(rlmdCommand({ rlmdPath: "/x/rlmd" }, "attach", "--stdio"), { command: "/x/rlmd", args: ["attach", "--stdio"] });
  assert.deepEqual(rlmdCommand({}, "tui"), { command: "rlmd", args: ["tui"] });
  assert.equal(formatCost(0.0012), "$0.0012");
  assert.equal(formatCost(1.5), "$1.50");
  assert.equal(formatCost(0), "$0");
  assert.equal(formatCost(0.00042), "$0.000420");
  const p = startParams({ sandbox: "", budgets: { maxUsd: 0.5, maxDepth: null } }, "/w", "q");
  assert.deepEqual(p, { workspace: "/w", question: "q", budgets: { max_usd: 0.5 } });
  assert.match(scopedQuestion("why?", "a.py", { startLine: 3, endLine: 4, text: "x = 1" }), /a\.py.*lines 3-4/);
  const refs = findFileRefs("Look at src/a.ts:3:5, core.py#L12, version 1.2.3 and e.g. foo.", (f) => f !== "foo." && !f.startsWith("e.g"));
  assert.deepEqual(refs.map((r) => [r.path, r.line, r.column]), [["src/a.ts", 3, 5], ["core.py", 12, undefined]]);
});

test("costs come from usage.total: a priced depth-2 run shows real costs in every view", async () => {
  const question = JSON.stringify({ cells: ["r = rlm_query('what is in pkg?')\nprint(r)", "FINAL(r)"] });
  const started = await api.start(startParams({ rootModel: "priced", sandbox: "inprocess", budgets: { maxDepth: 2 } }, project, question));
  const fin = await api.waitFinished(started.run_id, 60_000);
  assert.equal(fin.status, "completed", fin.error ?? "");
  const { tree } = await api.getRun(started.run_id, true);
  const t = Trajectory.fromStore(tree);
  const total = usageTotals(t.root!.usage);
  assert.ok(total.cost_usd > 0, JSON.stringify(t.root!.usage));
  assert.equal(total.cost_usd, (tree as any).usage.total.cost_usd);
  const listed = (await api.runs({ workspace: project })).find((r) => r.id === started.run_id)!;
  assert.ok(Math.abs(total.cost_usd - Number(listed.tree?.cost_usd)) < 1e-9, JSON.stringify(listed.tree));
  assert.notEqual(formatCost(total.cost_usd), "$0");
  const child = t.root!.nodes[0].children.find((n) => n.kind === "cell")!.runs[0];
  assert.ok(usageTotals(child.usage).cost_usd > 0);
  // the waterfall: every run, iteration, call and cell, in time order within the tree
  const rows = timeline(t.root);
  assert.equal(rows[0].kind, "run");
  assert.ok(rows.some((r) => r.kind === "run" && r.label.startsWith("run d1")));
  const iters = rows.filter((r) => r.kind === "iteration");
  assert.ok(iters.length >= 3 && iters.every((r) => r.end >= r.start && r.start >= 0));
  assert.ok(iters[0].cost_usd > 0 && iters[0].tokens > 0); // the badge: its calls' spend
  assert.ok(Math.abs(rows[0].cost_usd - total.cost_usd) < 1e-9);
});

test("a budget-stopped run: the answer is labelled partial, with the budget and the overshoot", async () => {
  const started = await api.start(startParams({ rootModel: "partial", sandbox: "inprocess", budgets: { maxUsd: 0.01 } }, project, "Where is helper?"));
  const fin = await api.waitFinished(started.run_id, 60_000);
  assert.equal(fin.status, "max_usd", fin.error ?? "");
  const { tree } = await api.getRun(started.run_id, true);
  const root = Trajectory.fromStore(tree).root!;
  const spent = usageTotals(root.usage).cost_usd;
  assert.ok(spent > 0.01, String(spent));
  const over = spent - 0.01;
  const note = budgetNote(root)!;
  assert.equal(
    note,
    `the spend budget ($0.0100) ended the run; $${spent.toFixed(4)} spent, $${over.toFixed(4)} (${Math.round((over / 0.01) * 100)}%) over`,
  );
  assert.equal(root.answer, "pkg/core.py:2 so far");
  assert.equal(root.answer_source, "extraction");
  assert.equal(answerNote(root), `partial answer: extracted from the work so far after ${note}`);
});
