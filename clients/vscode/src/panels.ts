// The answer panel and the trajectory webview (strict CSP: no remote content, nonce'd script).
import * as vscode from "vscode";
import * as path from "node:path";
import * as fs from "node:fs";
import { randomBytes } from "node:crypto";
import { answerNote, budgetNote, findFileRefs, formatCost, formatSeconds, formatTokens, timeline, Trajectory, TRun, TNode, usageTotals } from "./rpc/model";
import type { TaskStatus } from "./rpc/api";

function nonce(): string {
  return randomBytes(16).toString("base64");
}

function csp(webview: vscode.Webview, n: string): string {
  return (
    `default-src 'none'; img-src ${webview.cspSource}; ` +
    `style-src 'nonce-${n}'; script-src 'nonce-${n}' ${webview.cspSource}; font-src ${webview.cspSource};`
  );
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 12px; }
pre, code { font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); }
pre { white-space: pre-wrap; word-break: break-word; background: var(--vscode-textCodeBlock-background); padding: 6px 8px; border-radius: 3px; }
a { color: var(--vscode-textLink-foreground); cursor: pointer; text-decoration: none; }
a:hover { text-decoration: underline; }
.meta { color: var(--vscode-descriptionForeground); }
.status-completed > summary { color: var(--vscode-testing-iconPassed); }
.status-failed > summary, .status-cancelled > summary, .status-interrupted > summary, .err { color: var(--vscode-errorForeground); }
details { margin: 2px 0 2px 14px; }
summary { cursor: pointer; }
.run > summary { font-weight: bold; }
.label { font-weight: 600; }
.note { color: var(--vscode-editorWarning-foreground); font-weight: 600; }
.answer h1, .answer h2, .answer h3, .answer h4 { margin: 8px 0 4px; }
.answer p { margin: 4px 0; }
.answer code { background: var(--vscode-textCodeBlock-background); padding: 0 3px; border-radius: 3px; }
.bar-row { display: flex; align-items: center; height: 18px; font-size: 12px; }
.bar-label { width: 42%; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; }
.bar-track { position: relative; flex: 1; height: 12px; }
.bar { position: absolute; height: 12px; min-width: 2px; border-radius: 2px; background: var(--vscode-charts-blue); }
.bar.kind-run { background: var(--vscode-charts-purple); }
.bar.kind-cell { background: var(--vscode-charts-green); }
.bar.kind-iteration { background: var(--vscode-charts-yellow); opacity: 0.6; }
.bar.error { background: var(--vscode-charts-red); }
.badge { margin-left: 6px; color: var(--vscode-descriptionForeground); white-space: nowrap; }
button { color: var(--vscode-button-foreground); background: var(--vscode-button-background); border: none; padding: 4px 10px; cursor: pointer; }
textarea { width: 100%; box-sizing: border-box; font-family: var(--vscode-font-family); color: var(--vscode-input-foreground); background: var(--vscode-input-background); border: 1px solid var(--vscode-input-border, transparent); }
`;

/** Text cut into plain strings and existing-file links (`path`, `path:line`). */
export type Segment = string | (FileLink & { text: string });

/** The tree with `answer_segments` on runs and `stdout_segments` on cells: the links the
 * trajectory view shows (only for files that exist in the workspace). */
function linkified(root: TRun | undefined, workspace: string | undefined): any {
  if (!root) return root;
  const run = (r: TRun): any => ({
    ...r,
    answer_segments: r.answer && workspace ? answerSegments(r.answer, workspace) : undefined,
    note: answerNote(r) ?? budgetNote(r),
    nodes: r.nodes.map(node),
    runs: r.runs.map(run),
  });
  const node = (n: TNode): any => ({
    ...n,
    stdout_segments: n.stdout && workspace ? answerSegments(n.stdout, workspace) : undefined,
    children: n.children.map(node),
    runs: n.runs.map(run),
  });
  return run(root);
}

export interface FileLink {
  path: string;
  line?: number;
  column?: number;
}

/** Opens `path:line` of a workspace file in an editor. */
export async function openFileRef(workspace: string, ref: FileLink): Promise<void> {
  const abs = path.isAbsolute(ref.path) ? ref.path : path.join(workspace, ref.path);
  const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(abs));
  const line = Math.max(0, (ref.line ?? 1) - 1);
  const col = Math.max(0, (ref.column ?? 1) - 1);
  const pos = new vscode.Position(Math.min(line, doc.lineCount - 1), col);
  await vscode.window.showTextDocument(doc, { selection: new vscode.Range(pos, pos), preview: false });
}

export function answerSegments(answer: string, workspace: string): Array<string | FileLink & { text: string }> {
  const refs = findFileRefs(answer, (p) => {
    try {
      return fs.statSync(path.isAbsolute(p) ? p : path.join(workspace, p)).isFile();
    } catch {
      return false;
    }
  });
  const out: Array<string | (FileLink & { text: string })> = [];
  let at = 0;
  for (const r of refs) {
    if (r.start > at) out.push(answer.slice(at, r.start));
    out.push({ text: answer.slice(r.start, r.end), path: r.path, line: r.line, column: r.column });
    at = r.end;
  }
  if (at < answer.length) out.push(answer.slice(at));
  return out;
}

/** One panel that shows the latest answer (reused): Markdown with `path:line` links, a
 * Copy button, and a box for a follow-up question in the same workspace. */
export class AnswerPanel {
  private static current?: AnswerPanel;
  private answer = "";
  private constructor(
    private readonly panel: vscode.WebviewPanel,
    private workspace: string,
    private actions: AnswerActions,
    private readonly media: vscode.Uri,
  ) {
    panel.onDidDispose(() => (AnswerPanel.current = undefined));
    panel.webview.onDidReceiveMessage((m) => {
      if (m?.type === "open" && typeof m.path === "string") {
        openFileRef(this.workspace, m).catch((e) => vscode.window.showErrorMessage(`rlmd: cannot open ${m.path}: ${e}`));
      } else if (m?.type === "trajectory" && typeof m.runId === "string") {
        this.actions.trajectory(m.runId);
      } else if (m?.type === "copy") {
        void vscode.env.clipboard.writeText(this.answer).then(() => vscode.window.setStatusBarMessage("rlmd: answer copied", 3000));
      } else if (m?.type === "followup" && typeof m.question === "string" && m.question.trim()) {
        this.actions.followUp(this.workspace, m.question.trim());
      }
    });
  }

  static show(status: TaskStatus, actions: AnswerActions, media: vscode.Uri): void {
    let p = AnswerPanel.current;
    if (!p) {
      const panel = vscode.window.createWebviewPanel("rlmd.answer", "rlmd answer", vscode.ViewColumn.Beside, {
        enableScripts: true,
        localResourceRoots: [media],
      });
      p = AnswerPanel.current = new AnswerPanel(panel, status.workspace, actions, media);
    }
    p.workspace = status.workspace;
    p.actions = actions;
    p.render(status);
    p.panel.reveal(undefined, true);
  }

  private render(s: TaskStatus): void {
    const n = nonce();
    const u = usageTotals(s.final_usage ?? s.usage);
    const wall = s.started_at && s.finished_at ? s.finished_at - s.started_at : u.wall_time_s;
    const end = { status: s.status, budget: (s as any).budget, usage: s.final_usage ?? s.usage, answer: s.answer, answer_source: s.answer_source };
    this.answer = s.answer ?? "";
    const data = {
      runId: s.run_id,
      question: s.question,
      status: s.status ?? s.state,
      error: s.error,
      answer: s.answer ?? "",
      note: answerNote(end) ?? budgetNote(end) ?? (s.answer_source === "unverified" ? "unverified answer: the checks doubted it; check it before relying on it" : ""),
      meta:
        `${s.status ?? s.state} · ${s.iterations} iteration(s) · ${formatTokens(u.input_tokens)} in / ${formatTokens(u.output_tokens)} out tokens · ` +
        `${formatCost(u.cost_usd)} · ${formatSeconds(wall)} · ${s.models?.root ?? ""}`,
      refs: answerSegments(s.answer ?? "", s.workspace).filter((x): x is FileLink & { text: string } => typeof x !== "string"),
    };
    this.panel.title = `rlmd: ${s.question.split("\n")[0].slice(0, 40)}`;
    this.panel.webview.html = `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp(this.panel.webview, n)}">
<style nonce="${n}">${STYLE}</style></head><body>
<h3>Answer <button id="copy" title="Copy the answer">Copy</button></h3>
<p id="note" class="note"></p>
<div id="answer" class="answer"></div>
<p class="meta" id="meta"></p><p id="error" class="err"></p>
<p><a id="traj">Show trajectory</a></p>
<h4>Question</h4><pre id="question"></pre>
<h4>Follow-up</h4>
<textarea id="followup" rows="3" placeholder="Ask a follow-up question in this workspace (its REPL state is kept)"></textarea>
<p><button id="ask">Ask</button></p>
<script type="application/json" id="data">${JSON.stringify(data).replace(/</g, "\\u003c")}</script>
<script nonce="${n}" src="${this.panel.webview.asWebviewUri(vscode.Uri.joinPath(this.media, "answer.js"))}"></script></body></html>`;
  }
}

export interface AnswerActions {
  trajectory(runId: string): void;
  followUp(workspace: string, question: string): void;
}

/** A live trajectory view of one run (one panel per run): the tree with tokens, latency and
 * cost on every run and call, `path:line` links in answers and outputs, and a timeline
 * (waterfall) of the tree with per-iteration badges showing where time and money went. */
export class TrajectoryPanel {
  private static panels = new Map<string, TrajectoryPanel>();
  private timer?: NodeJS.Timeout;
  private latest?: Trajectory;

  private constructor(
    private readonly runId: string,
    private readonly panel: vscode.WebviewPanel,
    private readonly workspace: string | undefined,
    media: vscode.Uri,
  ) {
    panel.onDidDispose(() => {
      TrajectoryPanel.panels.delete(runId);
      clearTimeout(this.timer);
    });
    panel.webview.onDidReceiveMessage((m) => {
      if (m?.type === "ready" && this.latest) this.post();
      else if (m?.type === "open" && typeof m.path === "string" && this.workspace) {
        openFileRef(this.workspace, m).catch((e) => vscode.window.showErrorMessage(`rlmd: cannot open ${m.path}: ${e}`));
      }
    });
    const n = nonce();
    panel.webview.html = `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp(panel.webview, n)}">
<style nonce="${n}">${STYLE}</style></head><body>
<h3 id="title">Trajectory</h3><p class="meta" id="summary">loading…</p><p class="note" id="note"></p>
<details id="timeline-box" open><summary>Timeline</summary><div id="timeline"></div></details>
<div id="tree"></div>
<script nonce="${n}" src="${panel.webview.asWebviewUri(vscode.Uri.joinPath(media, "trajectory.js"))}"></script>
</body></html>`;
  }

  static show(runId: string, workspace: string | undefined, media: vscode.Uri): TrajectoryPanel {
    let p = TrajectoryPanel.panels.get(runId);
    if (!p) {
      const panel = vscode.window.createWebviewPanel("rlmd.trajectory", `rlmd trajectory ${runId.slice(0, 8)}`, vscode.ViewColumn.Active, {
        enableScripts: true,
        retainContextWhenHidden: true,
        localResourceRoots: [media],
      });
      p = new TrajectoryPanel(runId, panel, workspace, media);
      TrajectoryPanel.panels.set(runId, p);
    }
    p.panel.reveal();
    return p;
  }

  static get(runId: string): TrajectoryPanel | undefined {
    return TrajectoryPanel.panels.get(runId);
  }

  /** New data; posted at most 4 times a second. */
  update(t: Trajectory): void {
    this.latest = t;
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.post();
    }, 250);
  }

  private post(): void {
    const root = this.latest?.root;
    if (!root) return;
    const u = usageTotals(root.usage);
    const wall = root.started_at && root.finished_at ? root.finished_at - root.started_at : u.wall_time_s;
    void this.panel.webview.postMessage({
      type: "update",
      root: linkified(root, this.workspace),
      rows: timeline(root),
      summary:
        `${root.status} · ${formatTokens(u.input_tokens)} in / ${formatTokens(u.output_tokens)} out tokens · ` +
        `${formatCost(u.cost_usd)} · ${formatSeconds(wall)} · ${(root.question || "").split("\n")[0].slice(0, 100)}`,
      note: answerNote(root) ?? budgetNote(root) ?? "",
    });
  }
}
