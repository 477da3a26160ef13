// Settings → daemon command line and task parameters. No `vscode` imports.
import type { Budgets, StartParams } from "./api";

export interface RlmdSettings {
  pythonPath?: string;
  rlmdPath?: string;
  home?: string;
  rootModel?: string;
  subModel?: string;
  sandbox?: string;
  budgets?: {
    maxIterations?: number | null;
    maxDepth?: number | null;
    maxSeconds?: number | null;
    maxTokens?: number | null;
    maxUsd?: number | null;
    maxSubcalls?: number | null;
  };
  tuiCommand?: string;
}

/** The command that runs rlmd (`python -m rlmd` or the rlmd executable) plus `args`. */
export function rlmdCommand(s: RlmdSettings, ...args: string[]): { command: string; args: string[] } {
  if (s.pythonPath) return { command: s.pythonPath, args: ["-m", "rlmd", ...args] };
  return { command: s.rlmdPath || "rlmd", args };
}

export function daemonEnv(s: RlmdSettings, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return s.home ? { ...base, RLMD_HOME: s.home } : { ...base };
}

export function budgetsOf(s: RlmdSettings): Budgets | undefined {
  const b = s.budgets ?? {};
  const out: Budgets = {};
  const put = (k: keyof Budgets, v: number | null | undefined) => {
    if (typeof v === "number" && Number.isFinite(v)) out[k] = v;
  };
  put("max_iterations", b.maxIterations);
  put("max_depth", b.maxDepth);
  put("max_seconds", b.maxSeconds);
  put("max_tokens", b.maxTokens);
  put("max_usd", b.maxUsd);
  put("max_subcalls", b.maxSubcalls);
  return Object.keys(out).length ? out : undefined;
}

export function startParams(s: RlmdSettings, workspace: string, question: string): StartParams {
  const p: StartParams = { workspace, question };
  const models: { root?: string; sub?: string } = {};
  if (s.rootModel) models.root = s.rootModel;
  if (s.subModel) models.sub = s.subModel;
  if (Object.keys(models).length) p.models = models;
  if (s.sandbox === "subprocess" || s.sandbox === "inprocess") p.sandbox = s.sandbox;
  const b = budgetsOf(s);
  if (b) p.budgets = b;
  return p;
}

/** The question for "Ask about the selection / this file": the context narrowed to it. */
export function scopedQuestion(
  question: string,
  file: string,
  selection?: { startLine: number; endLine: number; text: string },
): string {
  if (selection && selection.text.trim()) {
    return (
      `${question}\n\nFocus on the file \`${file}\` (in \`context\`), lines ${selection.startLine}-${selection.endLine}:\n` +
      "```\n" + selection.text + "\n```"
    );
  }
  return `${question}\n\nFocus on the file \`${file}\` (in \`context\`).`;
}
