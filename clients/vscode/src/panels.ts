// The answer panel and the trajectory webview (strict CSP: no remote content, nonce'd script).
import * as vscode from "vscode";
import * as path from "node:path";
import * as fs from "node:fs";
import { randomBytes } from "node:crypto";
import { findFileRefs, formatCost, Trajectory } from "./rpc/model";
import type { TaskStatus } from "./rpc/api";

function nonce(): string {
  return randomBytes(16).toString("base64");
}

function csp(webview: vscode.Webview, n: string): string {
  return (
    `default-src 'none'; img-src ${webview.cspSource}; ` +
    `style-src 'nonce-${n}'; script-src 'nonce-${n}'; font-src ${webview.cspSource};`
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
`;

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

/** One panel that shows the latest answer (reused). */
export class AnswerPanel {
  private static current?: AnswerPanel;
  private constructor(
    private readonly panel: vscode.WebviewPanel,
    private workspace: string,
    private onTrajectory: (runId: string) => void,
  ) {
    panel.onDidDispose(() => (AnswerPanel.current = undefined));
    panel.webview.onDidReceiveMessage((m) => {
      if (m?.type === "open" && typeof m.path === "string") {
        openFileRef(this.workspace, m).catch((e) => vscode.window.showErrorMessage(`rlmd: cannot open ${m.path}: ${e}`));
      } else if (m?.type === "trajectory" && typeof m.runId === "string") {
        this.onTrajectory(m.runId);
      }
    });
  }

  static show(status: TaskStatus, onTrajectory: (runId: string) => void): void {
    let p = AnswerPanel.current;
    if (!p) {
      const panel = vscode.window.createWebviewPanel("rlmd.answer", "rlmd answer", vscode.ViewColumn.Beside, {
        enableScripts: true,
        localResourceRoots: [],
      });
      p = AnswerPanel.current = new AnswerPanel(panel, status.workspace, onTrajectory);
    }
    p.workspace = status.workspace;
    p.onTrajectory = onTrajectory;
    p.render(status);
    p.panel.reveal(undefined, true);
  }

  private render(s: TaskStatus): void {
    const n = nonce();
    const cost = s.usage?.cost_usd ?? s.final_usage?.total?.cost_usd;
    const data = {
      runId: s.run_id,
      question: s.question,
      status: s.status ?? s.state,
      error: s.error,
      meta: `${s.status ?? s.state} · ${s.iterations} iteration(s) · ${formatCost(cost)} · ${s.models?.root ?? ""}`,
      segments: answerSegments(s.answer ?? "", s.workspace),
    };
    this.panel.title = `rlmd: ${s.question.split("\n")[0].slice(0, 40)}`;
    this.panel.webview.html = `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp(this.panel.webview, n)}">
<style nonce="${n}">${STYLE}</style></head><body>
<h3>Answer</h3><pre id="answer" class="answer"></pre>
<p class="meta" id="meta"></p><p id="error" class="err"></p>
<p><a id="traj">Show trajectory</a></p>
<h4>Question</h4><pre id="question"></pre>
<script nonce="${n}">
const vscode = acquireVsCodeApi();
const data = ${JSON.stringify(data).replace(/</g, "\\u003c")};
const answer = document.getElementById("answer");
for (const seg of data.segments) {
  if (typeof seg === "string") { answer.appendChild(document.createTextNode(seg)); continue; }
  const a = document.createElement("a");
  a.textContent = seg.text; a.className = "file-link"; a.title = "Open " + seg.path + (seg.line ? ":" + seg.line : "");
  a.addEventListener("click", () => vscode.postMessage({ type: "open", path: seg.path, line: seg.line, column: seg.column }));
  answer.appendChild(a);
}
if (!data.segments.length) answer.textContent = "(no answer)";
document.getElementById("meta").textContent = data.meta;
document.getElementById("error").textContent = data.error || "";
document.getElementById("question").textContent = data.question;
document.getElementById("traj").addEventListener("click", () => vscode.postMessage({ type: "trajectory", runId: data.runId }));
</script></body></html>`;
  }
}

/** A live trajectory view of one run (one panel per run). */
export class TrajectoryPanel {
  private static panels = new Map<string, TrajectoryPanel>();
  private timer?: NodeJS.Timeout;
  private latest?: Trajectory;

  private constructor(
    private readonly runId: string,
    private readonly panel: vscode.WebviewPanel,
    private readonly workspace: string | undefined,
  ) {
    panel.onDidDispose(() => {
      TrajectoryPanel.panels.delete(runId);
      clearTimeout(this.timer);
    });
    panel.webview.onDidReceiveMessage((m) => {
      if (m?.type === "ready" && this.latest) this.post();
    });
    const n = nonce();
    panel.webview.html = `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp(panel.webview, n)}">
<style nonce="${n}">${STYLE}</style></head><body>
<h3 id="title">Trajectory</h3><p class="meta" id="summary">loading…</p><div id="tree"></div>
<script nonce="${n}">
const vscode = acquireVsCodeApi();
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; };
const open = new Set(JSON.parse(sessionStorage.getItem("open") || "[]"));
function cost(u) { const c = u && u.cost_usd; return c ? "$" + (c < 0.01 ? c.toFixed(4) : c.toFixed(2)) : "$0.00"; }
function details(id, summaryText, cls, defaultOpen) {
  const d = el("details", cls); d.dataset.id = id;
  d.open = open.has(id) || (defaultOpen && !open.has("closed:" + id));
  d.addEventListener("toggle", () => { if (d.open) { open.add(id); open.delete("closed:" + id); } else { open.delete(id); open.add("closed:" + id); } sessionStorage.setItem("open", JSON.stringify([...open])); });
  d.appendChild(el("summary", "", summaryText)); return d;
}
function pre(label, text, cls) { const w = el("div"); w.appendChild(el("div", "label", label)); w.appendChild(el("pre", cls || "", text)); return w; }
function nodeLabel(n) {
  if (n.kind === "iteration") return "iteration " + ((n.index || 0) + 1) + (n.state === "running" ? " …" : "");
  if (n.kind === "model_call") return (n.role || "model") + " call " + (n.model ? "(" + n.model + ") " : "") + (n.input_tokens !== undefined ? n.input_tokens + "+" + (n.output_tokens || 0) + " tok " + cost(n) : "…");
  if (n.kind === "cell") { const l = (n.code || "").split("\\n").find((x) => x.trim() && !x.startsWith("_n = len(context)")) || ""; return "cell" + (n.error ? " ✗ " : ": ") + l.slice(0, 80); }
  return n.kind;
}
function renderNode(n) {
  const d = details(n.id, nodeLabel(n), "node node-" + n.kind, n.kind === "iteration");
  if (n.code) d.appendChild(pre("code", n.code, "code"));
  if (n.response) d.appendChild(pre("response", n.response));
  if (n.stdout) d.appendChild(pre("stdout", n.stdout, "stdout"));
  if (n.stderr) d.appendChild(pre("stderr", n.stderr, "err"));
  if (n.error) d.appendChild(pre("error", n.error, "err"));
  for (const c of n.children || []) d.appendChild(renderNode(c));
  for (const r of n.runs || []) d.appendChild(renderRun(r));
  return d;
}
function renderRun(r) {
  const d = details(r.id, "run " + r.id.slice(0, 8) + " · depth " + r.depth + " · " + r.status + " · " + cost(r.usage) + " · " + (r.question || "").split("\\n")[0].slice(0, 80), "run status-" + r.status, true);
  for (const n of r.nodes || []) d.appendChild(renderNode(n));
  for (const c of r.runs || []) d.appendChild(renderRun(c));
  if (r.answer !== undefined && r.answer !== null) d.appendChild(pre("answer", r.answer, "answer"));
  if (r.error) d.appendChild(pre("error", r.error, "err"));
  return d;
}
window.addEventListener("message", (ev) => {
  const m = ev.data; if (!m || m.type !== "update") return;
  const root = m.root; const tree = document.getElementById("tree");
  document.getElementById("title").textContent = "Trajectory " + (root ? root.id.slice(0, 8) : "");
  document.getElementById("summary").textContent = root ? root.status + " · " + cost(root.usage) + " · " + (root.question || "").split("\\n")[0].slice(0, 120) : "no data";
  tree.replaceChildren(); if (root) tree.appendChild(renderRun(root));
});
vscode.postMessage({ type: "ready" });
</script></body></html>`;
  }

  static show(runId: string, workspace: string | undefined): TrajectoryPanel {
    let p = TrajectoryPanel.panels.get(runId);
    if (!p) {
      const panel = vscode.window.createWebviewPanel("rlmd.trajectory", `rlmd trajectory ${runId.slice(0, 8)}`, vscode.ViewColumn.Active, {
        enableScripts: true,
        retainContextWhenHidden: true,
        localResourceRoots: [],
      });
      p = new TrajectoryPanel(runId, panel, workspace);
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
    if (this.latest) void this.panel.webview.postMessage({ type: "update", root: this.latest.root });
  }
}
