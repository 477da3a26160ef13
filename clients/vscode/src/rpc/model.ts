// Live trajectory model: built from `rlmd/event` notifications, or from the store's tree
// (`rlmd.runs.get` with `tree: true`). No `vscode` imports.
import type { RunEvent } from "./api";

export interface TNode {
  id: string;
  kind: "iteration" | "model_call" | "cell" | "compaction" | "other";
  index?: number;
  state: "running" | "done" | "error";
  role?: string;
  model?: string;
  code?: string;
  stdout?: string;
  stderr?: string;
  error?: string | null;
  response?: string;
  input_tokens?: number;
  output_tokens?: number;
  cost_usd?: number;
  latency_s?: number;
  started_at?: number;
  finished_at?: number;
  final?: string | null;
  children: TNode[];
  runs: TRun[];
}

export interface TRun {
  id: string;
  depth: number;
  question: string;
  status: string; // "running" until run.finished
  answer?: string | null;
  error?: string | null;
  parent_run_id?: string | null;
  parent_node_id?: string | null;
  usage?: Record<string, any>;
  answer_source?: string | null;
  budget?: Record<string, any> | null;
  iterations?: number;
  started_at?: number;
  finished_at?: number;
  nodes: TNode[];
  runs: TRun[]; // child runs not attached to a known cell
}

function nodeKind(kind: string): TNode["kind"] {
  if (kind.startsWith("iteration")) return "iteration";
  if (kind.startsWith("model_call")) return "model_call";
  if (kind.startsWith("cell")) return "cell";
  if (kind.startsWith("compaction")) return "compaction";
  return "other";
}

function fillNode(n: TNode, d: Record<string, any>): void {
  for (const k of ["index", "role", "model", "code", "stdout", "stderr", "response", "input_tokens", "output_tokens", "cost_usd", "latency_s", "started_at", "finished_at", "final"] as const) {
    if (d[k] !== undefined && d[k] !== null) (n as any)[k] = d[k];
  }
  if ("error" in d) n.error = d.error;
}

export class Trajectory {
  root?: TRun;
  private runs = new Map<string, TRun>();
  private nodes = new Map<string, TNode>();
  private pendingRuns = new Map<string, TRun[]>(); // child runs whose cell is not known yet

  constructor(public readonly taskId: string) {}

  /** Apply one `rlmd/event`; returns true when it belonged to this task. */
  apply(e: RunEvent): boolean {
    if (e.task_id !== this.taskId) return false;
    const d = e.data || {};
    let run = this.runs.get(e.run_id);
    if (!run) {
      run = { id: e.run_id, depth: e.depth, question: "", status: "running", nodes: [], runs: [] };
      this.addRun(run, d.parent_run_id ?? null, d.parent_node_id ?? null);
    }
    switch (e.kind) {
      case "run.started":
        run.question = String(d.question ?? "");
        run.budget = d.budget ?? null;
        run.started_at = e.ts;
        break;
      case "run.finished":
        run.status = String(d.status ?? "finished");
        run.answer = d.answer ?? null;
        run.answer_source = d.answer_source ?? null;
        run.error = d.error ?? null;
        run.usage = d.usage;
        run.iterations = d.iterations;
        run.finished_at = e.ts;
        break;
      default: {
        if (!e.node_id || e.kind === "sandbox.started") break;
        if (e.kind === "iteration.started") {
          for (const n of run.nodes) if (n.kind === "iteration") n.state = "done";
        }
        let node = this.nodes.get(e.node_id);
        if (!node) {
          node = { id: e.node_id, kind: nodeKind(e.kind), state: "running", started_at: e.ts, children: [], runs: [] };
          this.nodes.set(node.id, node);
          const parent = e.parent_id ? this.nodes.get(e.parent_id) : undefined;
          (parent ? parent.children : run.nodes).push(node);
          const waiting = this.pendingRuns.get(node.id);
          if (waiting) {
            node.runs.push(...waiting);
            this.pendingRuns.delete(node.id);
          }
        }
        fillNode(node, d);
        if (e.kind.endsWith(".finished") || e.kind === "compaction") {
          node.state = d.error ? "error" : "done";
          node.finished_at = e.ts;
        }
        if (e.kind === "iteration.started") node.state = "running";
      }
    }
    return true;
  }

  private addRun(run: TRun, parentRunId: string | null, parentNodeId: string | null): void {
    run.parent_run_id = parentRunId;
    run.parent_node_id = parentNodeId;
    this.runs.set(run.id, run);
    if (!this.root && (!parentRunId || run.id === this.taskId)) {
      this.root = run;
      return;
    }
    const cell = parentNodeId ? this.nodes.get(parentNodeId) : undefined;
    if (cell) cell.runs.push(run);
    else if (parentNodeId) {
      const list = this.pendingRuns.get(parentNodeId) ?? [];
      list.push(run);
      this.pendingRuns.set(parentNodeId, list);
    } else (this.runs.get(parentRunId ?? "")?.runs ?? this.root?.runs ?? []).push(run);
  }

  /** Mark iterations of finished runs as done (iteration nodes have no finish event). */
  settle(): void {
    const walk = (r: TRun) => {
      const fin = r.status !== "running";
      const visit = (n: TNode) => {
        if (n.kind === "iteration" && fin) n.state = "done";
        n.children.forEach(visit);
        n.runs.forEach(walk);
      };
      r.nodes.forEach(visit);
      r.runs.forEach(walk);
    };
    if (this.root) walk(this.root);
  }

  /** Build from the store's tree (`rlmd.runs.get` with `tree: true`). */
  static fromStore(tree: any): Trajectory {
    const t = new Trajectory(tree.id);
    const conv = (r: any): TRun => {
      const run: TRun = {
        id: r.id,
        depth: r.depth ?? 0,
        question: r.question ?? "",
        status: r.status ?? "unknown",
        answer: r.answer,
        answer_source: r.answer_source ?? null,
        budget: r.budget ?? null,
        iterations: r.iterations ?? undefined,
        started_at: r.started_at ?? undefined,
        finished_at: r.finished_at ?? undefined,
        error: r.error,
        parent_run_id: r.parent_run_id,
        parent_node_id: r.parent_node_id,
        usage: r.usage ?? { cost_usd: r.cost_usd, input_tokens: r.input_tokens, output_tokens: r.output_tokens },
        nodes: [],
        runs: [],
      };
      t.runs.set(run.id, run);
      const convNode = (n: any): TNode => {
        const node: TNode = { id: n.id, kind: nodeKind(String(n.kind ?? "")), state: "done", children: [], runs: [] };
        const data = typeof n.data === "object" && n.data ? n.data : {};
        fillNode(node, { ...data, ...pick(n) });
        if (node.error) node.state = "error";
        t.nodes.set(node.id, node);
        node.children = (n.children ?? []).map(convNode);
        node.runs = (n.runs ?? []).map(conv);
        return node;
      };
      run.nodes = (r.nodes ?? []).map(convNode);
      run.runs = (r.runs ?? []).map(conv);
      return run;
    };
    t.root = conv(tree);
    return t;
  }
}

function pick(n: any): Record<string, any> {
  const out: Record<string, any> = {};
  for (const k of ["index", "role", "model", "code", "stdout", "stderr", "error", "response", "input_tokens", "output_tokens", "cost_usd", "latency_s", "started_at", "finished_at"]) {
    if (n[k] !== undefined && n[k] !== null) out[k] = n[k];
  }
  return out;
}

/** One-line label for a node in a tree view (numbers as the CLI and TUI show them). */
export function nodeLabel(n: TNode): string {
  switch (n.kind) {
    case "iteration":
      return `iteration ${(n.index ?? 0) + 1}`;
    case "model_call": {
      const tok = n.input_tokens !== undefined ? ` · ${formatTokens(n.input_tokens)}→${formatTokens(n.output_tokens)} tok · ${formatCost(n.cost_usd)}` : "";
      const lat = n.latency_s !== undefined ? ` · ${formatSeconds(n.latency_s)}` : "";
      return `${n.role ?? "model"} call${n.model ? ` (${n.model})` : ""}${tok}${lat}`;
    }
    case "cell": {
      const first = (n.code ?? "").split("\n").find((l) => l.trim() && !l.startsWith("_n = len(context)")) ?? "";
      const num = n.index !== undefined ? ` ${n.index + 1}` : "";
      return `cell${num}${n.error ? " ✗" : ""}: ${first.slice(0, 60)}`;
    }
    case "compaction":
      return "compaction";
    default:
      return n.kind;
  }
}

/** Dollars as every rlmd surface shows them (`rlmd.cli.render.fmt_cost`): `$0`, `$0.0208`,
 * `$0.000420`, `$1.25`. */
export function formatCost(usd: number | null | undefined): string {
  const v = Number(usd ?? 0);
  if (!v) return "$0";
  if (v >= 1) return `$${v.toFixed(2)}`;
  return v >= 0.001 ? `$${v.toFixed(4)}` : `$${v.toFixed(6)}`;
}

/** `950`, `12.3k`, `4.1M` (as `rlmd.cli.render.fmt_tokens`). */
export function formatTokens(n: number | null | undefined): string {
  const v = Math.trunc(Number(n ?? 0));
  if (v < 1000) return String(v);
  if (v < 1_000_000) return `${(v / 1000).toFixed(1)}k`;
  return `${(v / 1_000_000).toFixed(1)}M`;
}

export function formatSeconds(s: number | null | undefined): string {
  if (s === null || s === undefined) return "-";
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 60) return `${Math.round(s)}s`;
  return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
}

export interface Totals {
  cost_usd: number;
  input_tokens: number;
  output_tokens: number;
  calls: number;
  wall_time_s?: number;
}

/** The totals of a usage dict in any of its shapes: the store's / `run.finished`'s
 * `{total: {...}, wall_time_s}`, a task's live `{cost_usd, input_tokens, ...}`, or a store
 * row's own counters. */
export function usageTotals(usage: Record<string, any> | null | undefined): Totals {
  const u = usage ?? {};
  const t = u.total && typeof u.total === "object" ? u.total : u;
  return {
    cost_usd: Number(t.cost_usd ?? 0),
    input_tokens: Number(t.input_tokens ?? 0),
    output_tokens: Number(t.output_tokens ?? 0),
    calls: Number(t.calls ?? t.model_calls ?? 0),
    wall_time_s: u.wall_time_s ?? undefined,
  };
}

const BUDGETS: Record<string, [string, string]> = {
  max_iterations: ["iteration budget", "max_iterations"],
  max_time: ["wall-clock budget", "max_seconds"],
  max_tokens: ["token budget", "max_tokens"],
  max_usd: ["spend budget", "max_usd"],
  max_subcalls: ["sub-call budget", "max_subcalls"],
  max_errors: ["error budget", "max_consecutive_errors"],
};

function amount(status: string, x: number): string {
  if (status === "max_usd") return x < 1 ? `$${x.toFixed(4)}` : `$${x.toFixed(2)}`;
  if (status === "max_time") return `${x.toFixed(1)} s`;
  return Math.trunc(x).toLocaleString("en-US") + (status === "max_tokens" ? " tokens" : "");
}

export interface RunEnd {
  status?: string | null;
  budget?: Record<string, any> | null;
  usage?: Record<string, any> | null;
  answer?: string | null;
  answer_source?: string | null;
  subcalls?: number | null;
}

/** Which budget ended a run and by how much it was overshot, in the CLI's words
 * (`rlmd.cli.outcome.budget_note`); undefined when no budget ended it. */
export function budgetNote(run: RunEnd): string | undefined {
  const status = String(run.status ?? "");
  const b = BUDGETS[status];
  if (!b) return undefined;
  const limit = run.budget?.[b[1]];
  if (limit === null || limit === undefined) return `the ${b[0]} ended the run`;
  let note = `the ${b[0]} (${amount(status, Number(limit))}) ended the run`;
  const u = usageTotals(run.usage);
  const spent =
    status === "max_usd" ? u.cost_usd
    : status === "max_tokens" ? u.input_tokens + u.output_tokens
    : status === "max_time" ? u.wall_time_s
    : status === "max_subcalls" ? run.subcalls ?? undefined
    : undefined;
  if (spent !== undefined && spent !== null && spent > Number(limit)) {
    const over = spent - Number(limit);
    const pct = Number(limit) > 0 ? ` (${Math.round((over / Number(limit)) * 100)}%)` : "";
    note += `; ${amount(status, spent)} spent, ${amount(status, over)}${pct} over`;
  }
  return note;
}

/** "partial answer: ..." for an answer extracted after a budget ran out, else undefined. */
export function answerNote(run: RunEnd): string | undefined {
  if (run.answer === null || run.answer === undefined || run.answer_source !== "extraction") return undefined;
  return `partial answer: extracted from the work so far after ${budgetNote(run) ?? `the run ended (${run.status})`}`;
}

export interface TimelineRow {
  id: string;
  label: string;
  depth: number; // nesting in the tree (for indentation)
  kind: string;
  start: number; // seconds from the root run's start
  end: number;
  cost_usd: number;
  tokens: number;
  error: boolean;
}

/** The tree as waterfall rows: every run, iteration (with its model calls' tokens and cost
 * summed as a badge), model call and cell, with start/end in seconds from the root's start. */
export function timeline(root: TRun | undefined, now = Date.now() / 1000): TimelineRow[] {
  if (!root) return [];
  const t0 = root.started_at ?? firstStart(root) ?? now;
  const rows: TimelineRow[] = [];
  const sum = (n: TNode): { cost: number; tokens: number } => {
    let cost = n.cost_usd ?? 0;
    let tokens = (n.input_tokens ?? 0) + (n.output_tokens ?? 0);
    for (const c of n.children) {
      const s = sum(c);
      cost += s.cost;
      tokens += s.tokens;
    }
    for (const r of n.runs) {
      const u = usageTotals(r.usage);
      cost += u.cost_usd;
      tokens += u.input_tokens + u.output_tokens;
    }
    return { cost, tokens };
  };
  const visitRun = (r: TRun, depth: number) => {
    const u = usageTotals(r.usage);
    const start = (r.started_at ?? t0) - t0;
    rows.push({
      id: r.id, label: `run d${r.depth} · ${r.status} · ${(r.question || "").split("\n")[0].slice(0, 60)}`,
      depth, kind: "run", start, end: (r.finished_at ?? now) - t0, cost_usd: u.cost_usd,
      tokens: u.input_tokens + u.output_tokens, error: ["failed", "cancelled", "sandbox_failed"].includes(r.status),
    });
    const visitNode = (n: TNode, d: number) => {
      const s = sum(n);
      const startN = (n.started_at ?? r.started_at ?? t0) - t0;
      const endN = n.finished_at !== undefined ? n.finished_at - t0
        : n.latency_s !== undefined ? startN + n.latency_s
        : lastEnd(n, t0) ?? startN;
      rows.push({ id: n.id, label: nodeLabel(n), depth: d, kind: n.kind, start: startN, end: Math.max(startN, endN), cost_usd: s.cost, tokens: s.tokens, error: Boolean(n.error) });
      for (const c of n.children) visitNode(c, d + 1);
      for (const cr of n.runs) visitRun(cr, d + 1);
    };
    for (const n of r.nodes) visitNode(n, depth + 1);
    for (const cr of r.runs) visitRun(cr, depth + 1);
  };
  visitRun(root, 0);
  return rows;
}

function firstStart(r: TRun): number | undefined {
  const n = r.nodes[0];
  return n?.started_at;
}

function lastEnd(n: TNode, t0: number): number | undefined {
  let end: number | undefined;
  for (const c of n.children) {
    const e = c.finished_at ?? (c.started_at !== undefined && c.latency_s !== undefined ? c.started_at + c.latency_s : undefined);
    if (e !== undefined) end = Math.max(end ?? 0, e - t0);
  }
  return end;
}

export interface FileRef {
  start: number; // offset in the text
  end: number;
  path: string;
  line?: number;
  column?: number;
}

const REF =
  /(?<![\w/.-])((?:\.{0,2}\/)?(?:[\w.-]+\/)*[\w-][\w.-]*\.[A-Za-z][\w]{0,9})(?:(?::|#L| line )(\d+)(?::(\d+))?)?(?![\w/])/g;

/**
 * File references in an answer: `pkg/core.py`, `pkg/core.py:12`, `src/a.ts:3:5`,
 * `core.py#L12`, `pkg/core.py line 4`. `exists(path)` filters out things that are not files of
 * the workspace (version numbers, `e.g.`...).
 */
export function findFileRefs(text: string, exists: (path: string) => boolean): FileRef[] {
  const out: FileRef[] = [];
  for (const m of text.matchAll(REF)) {
    const path = m[1];
    if (/^\d+(\.\d+)+$/.test(path)) continue;
    if (!exists(path)) continue;
    out.push({
      start: m.index!,
      end: m.index! + m[0].length,
      path,
      line: m[2] ? Number(m[2]) : undefined,
      column: m[3] ? Number(m[3]) : undefined,
    });
  }
  return out;
}
