// The Runs tree view: runs of this workspace (status, cost); expanding a run shows its
// recursion tree, live while it runs.
import * as vscode from "vscode";
import { formatCost, formatSeconds, formatTokens, nodeLabel, TNode, TRun, Trajectory, usageTotals } from "./rpc/model";
import type { Run, TaskStatus } from "./rpc/api";

export type RunsItem =
  | { type: "run"; run: Run; live?: TaskStatus }
  | { type: "node"; node: TNode; runId: string }
  | { type: "child"; run: TRun; rootId: string }
  | { type: "message"; text: string };

export interface RunsSource {
  listRuns(): Promise<Run[]>;
  liveTasks(): TaskStatus[];
  trajectory(runId: string): Promise<Trajectory | undefined>;
}

const ICONS: Record<string, string> = {
  completed: "pass",
  running: "sync~spin",
  queued: "watch",
  cancelled: "circle-slash",
  failed: "error",
  interrupted: "debug-disconnect",
};

function statusIcon(status: string): vscode.ThemeIcon {
  return new vscode.ThemeIcon(ICONS[status] ?? (status.startsWith("max_") ? "warning" : "circle-outline"));
}

export class RunsProvider implements vscode.TreeDataProvider<RunsItem> {
  private readonly changed = new vscode.EventEmitter<RunsItem | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private timer?: NodeJS.Timeout;
  message = "Connecting to the rlmd daemon…";

  constructor(private readonly source: RunsSource) {}

  /** Refresh soon (coalesces bursts of events). */
  refresh(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.changed.fire(undefined);
    }, 300);
  }

  getTreeItem(item: RunsItem): vscode.TreeItem {
    switch (item.type) {
      case "message":
        return new vscode.TreeItem(item.text);
      case "run": {
        const status = item.live ? (item.live.state === "finished" ? item.live.status ?? "finished" : item.live.state) : item.run.status;
        // tree totals (the run and its child runs), as `rlmd runs` and the TUI count them
        const r = item.run;
        const cost = item.live?.usage?.cost_usd ?? r.tree?.cost_usd ?? r.cost_usd;
        const tokens =
          (item.live?.usage?.input_tokens ?? r.tree?.input_tokens ?? r.input_tokens ?? 0) +
          (item.live?.usage?.output_tokens ?? r.tree?.output_tokens ?? r.output_tokens ?? 0);
        const end = r.finished_at ?? (status === "running" ? Date.now() / 1000 : undefined);
        const secs = r.started_at && end ? end - r.started_at : undefined;
        const t = new vscode.TreeItem(firstLine(r.question, 70), vscode.TreeItemCollapsibleState.Collapsed);
        t.id = `run:${r.id}`;
        t.description = `${status} · ${formatTokens(tokens)} tok · ${formatCost(cost)} · ${formatSeconds(secs)}`;
        t.tooltip = `${r.question}\n\n${t.description} · ${r.id}`;
        t.iconPath = statusIcon(status);
        t.contextValue = item.live && item.live.state !== "finished" ? "run-live" : "run";
        t.command = { command: "rlmd.ui.showAnswer", title: "Show answer", arguments: [item.run.id] };
        return t;
      }
      case "child": {
        const r = item.run;
        const t = new vscode.TreeItem(`run depth ${r.depth}: ${firstLine(r.question, 60)}`, vscode.TreeItemCollapsibleState.Collapsed);
        t.id = `child:${r.id}`;
        const u = usageTotals(r.usage);
        t.description = `${r.status} · ${formatTokens(u.input_tokens + u.output_tokens)} tok · ${formatCost(u.cost_usd)}`;
        t.iconPath = statusIcon(r.status);
        return t;
      }
      case "node": {
        const n = item.node;
        const hasKids = n.children.length + n.runs.length > 0;
        const t = new vscode.TreeItem(
          nodeLabel(n),
          hasKids ? (n.kind === "iteration" ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed) : vscode.TreeItemCollapsibleState.None,
        );
        t.id = `node:${n.id}`;
        t.iconPath = new vscode.ThemeIcon(
          n.state === "running" ? "sync~spin" : n.state === "error" ? "error" : n.kind === "cell" ? "code" : n.kind === "model_call" ? "comment-discussion" : "list-tree",
        );

        t.tooltip = n.code ?? n.response ?? undefined;
        t.command = { command: "rlmd.ui.showTrajectory", title: "Show trajectory", arguments: [item.runId] };
        return t;
      }
    }
  }

  async getChildren(item?: RunsItem): Promise<RunsItem[]> {
    if (!item) {
      let runs: Run[];
      try {
        runs = await this.source.listRuns();
      } catch (e) {
        return [{ type: "message", text: this.message || String(e) }];
      }
      const live = new Map(this.source.liveTasks().map((t) => [t.run_id, t]));
      const items: RunsItem[] = [];
      for (const t of live.values()) {
        if (!runs.some((r) => r.id === t.run_id)) items.push({ type: "run", run: taskAsRun(t), live: t });
      }
      for (const r of runs) items.push({ type: "run", run: r, live: live.get(r.id) });
      return items.length ? items : [{ type: "message", text: "No runs yet: run “rlmd: Ask about this workspace”." }];
    }
    if (item.type === "run") {
      const t = await this.source.trajectory(item.run.id);
      return t?.root ? runChildren(t.root, item.run.id) : [];
    }
    if (item.type === "child") return runChildren(item.run, item.rootId);
    if (item.type === "node") {
      return [
        ...item.node.children.map((c): RunsItem => ({ type: "node", node: c, runId: item.runId })),
        ...item.node.runs.map((r): RunsItem => ({ type: "child", run: r, rootId: item.runId })),
      ];
    }
    return [];
  }
}

function runChildren(r: TRun, rootId: string): RunsItem[] {
  return [
    ...r.nodes.map((n): RunsItem => ({ type: "node", node: n, runId: rootId })),
    ...r.runs.map((c): RunsItem => ({ type: "child", run: c, rootId })),
  ];
}

function firstLine(s: string, n: number): string {
  const l = (s || "").split("\n")[0];
  return l.length > n ? l.slice(0, n - 1) + "…" : l;
}

function taskAsRun(t: TaskStatus): Run {
  return {
    id: t.run_id,
    root_run_id: t.run_id,
    parent_run_id: null,
    depth: 0,
    status: t.status ?? t.state,
    question: t.question,
    answer: t.answer,
    error: t.error,
    root_model: t.models?.root ?? null,
    workspace: t.workspace,
    cost_usd: t.usage?.cost_usd ?? null,
    input_tokens: t.usage?.input_tokens ?? null,
    output_tokens: t.usage?.output_tokens ?? null,
    iterations: t.iterations,
    started_at: t.started_at,
    finished_at: t.finished_at,
  };
}
