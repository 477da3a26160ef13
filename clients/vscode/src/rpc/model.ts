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
  for (const k of ["index", "role", "model", "code", "stdout", "stderr", "response", "input_tokens", "output_tokens", "cost_usd", "latency_s"] as const) {
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
        break;
      case "run.finished":
        run.status = String(d.status ?? "finished");
        run.answer = d.answer ?? null;
        run.error = d.error ?? null;
        run.usage = d.usage;
        break;
      default: {
        if (!e.node_id || e.kind === "sandbox.started") break;
        if (e.kind === "iteration.started") {
          for (const n of run.nodes) if (n.kind === "iteration") n.state = "done";
        }
        let node = this.nodes.get(e.node_id);
        if (!node) {
          node = { id: e.node_id, kind: nodeKind(e.kind), state: "running", children: [], runs: [] };
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
  for (const k of ["index", "role", "model", "code", "stdout", "stderr", "error", "response", "input_tokens", "output_tokens", "cost_usd", "latency_s"]) {
    if (n[k] !== undefined && n[k] !== null) out[k] = n[k];
  }
  return out;
}

/** One-line label for a node in a tree view. */
export function nodeLabel(n: TNode): string {
  switch (n.kind) {
    case "iteration":
      return `iteration ${(n.index ?? 0) + 1}`;
    case "model_call": {
      const tok = n.input_tokens !== undefined ? ` · ${n.input_tokens}+${n.output_tokens ?? 0} tok` : "";
      return `${n.role ?? "model"} call${n.model ? ` (${n.model})` : ""}${tok}`;
    }
    case "cell": {
      const first = (n.code ?? "").split("\n").find((l) => l.trim() && !l.startsWith("_n = len(context)")) ?? "";
      return `cell${n.error ? " ✗" : ""}: ${first.slice(0, 60)}`;
    }
    case "compaction":
      return "compaction";
    default:
      return n.kind;
  }
}

export function formatCost(usd: number | null | undefined): string {
  if (usd === null || usd === undefined) return "$0.00";
  if (usd > 0 && usd < 0.01) return `$${usd.toFixed(4)}`;
  return `$${usd.toFixed(2)}`;
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
