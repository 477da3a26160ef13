// The rlmd daemon protocol (docs/protocol.md), free of `vscode` imports so it can be tested
// with Node's test runner against a real daemon. Works over any JSON-RPC connection that has
// `sendRequest` / `onNotification` (a vscode-jsonrpc MessageConnection or a LanguageClient).

export interface Disposable {
  dispose(): void;
}

export interface RpcTransport {
  sendRequest(method: string, params?: unknown): Promise<unknown>;
  onNotification(method: string, handler: (params: any) => void): Disposable;
}

export interface Usage {
  input_tokens?: number;
  output_tokens?: number;
  cost_usd?: number;
  model_calls?: number;
  runs?: number;
}

export interface TaskStatus {
  run_id: string;
  workspace: string;
  question: string;
  state: "queued" | "running" | "finished";
  status: string | null;
  queue_position: number | null;
  created_at?: number | null;
  started_at: number | null;
  finished_at: number | null;
  iterations: number;
  usage?: Usage;
  final_usage?: { total?: { cost_usd?: number; total_tokens?: number } } | null;
  answer: string | null;
  answer_source?: string | null;
  error: string | null;
  cancel_requested?: boolean;
  models?: { root: string; sub: string };
  update?: string;
  seq?: number;
}

export interface Run {
  id: string;
  root_run_id: string | null;
  parent_run_id: string | null;
  depth: number;
  status: string;
  question: string;
  answer: string | null;
  error: string | null;
  root_model: string | null;
  workspace: string | null;
  cost_usd: number | null;
  input_tokens: number | null;
  output_tokens: number | null;
  iterations: number | null;
  started_at: number | null;
  finished_at: number | null;
  tree?: { cost_usd?: number; runs?: number; input_tokens?: number; output_tokens?: number };
  [key: string]: unknown;
}

export interface RunEvent {
  task_id: string;
  workspace: string;
  kind: string;
  run_id: string;
  depth: number;
  node_id: string | null;
  parent_id: string | null;
  data: Record<string, any>;
  ts: number;
  seq: number;
}

export interface Budgets {
  max_iterations?: number;
  max_depth?: number;
  max_seconds?: number;
  max_tokens?: number;
  max_usd?: number;
  max_subcalls?: number;
}

export interface StartParams {
  workspace: string;
  question: string;
  models?: { root?: string; sub?: string };
  sandbox?: "subprocess" | "inprocess";
  budgets?: Budgets;
  queue?: boolean;
}

export interface ModelInfo {
  name: string;
  provider: string;
  model: string;
  usable: boolean;
  reason: string | null;
  price_input?: number | null;
  price_output?: number | null;
}

/** A JSON-RPC error from the daemon, with its rlmd name (NOT_FOUND, BUSY...). */
export const ERROR_NAMES: Record<number, string> = {
  [-32700]: "PARSE_ERROR",
  [-32600]: "INVALID_REQUEST",
  [-32601]: "METHOD_NOT_FOUND",
  [-32602]: "INVALID_PARAMS",
  [-32603]: "INTERNAL_ERROR",
  [-32800]: "REQUEST_CANCELLED",
  [-32001]: "NOT_FOUND",
  [-32002]: "BUSY",
  [-32003]: "UNAVAILABLE",
  [-32004]: "SANDBOX_FAILED",
  [-32005]: "SHUTTING_DOWN",
};

export function errorName(err: unknown): string | undefined {
  const code = (err as { code?: number } | undefined)?.code;
  return typeof code === "number" ? ERROR_NAMES[code] : undefined;
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  if (!ms) return p;
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`rlmd: ${what} timed out after ${ms / 1000} s`)), ms);
    }),
  ]);
}

/** Typed wrappers for every daemon command and notification. */
export class RlmdApi implements Disposable {
  // A JSON-RPC connection keeps one handler per method: fan out to any number of listeners.
  private readonly listeners = new Map<string, Set<(p: any) => void>>();
  private readonly subs: Disposable[] = [];

  constructor(
    private readonly rpc: RpcTransport,
    public timeoutMs = 30_000,
  ) {
    for (const m of ["rlmd/event", "rlmd/taskStatus", "rlmd/workspace"]) {
      const set = new Set<(p: any) => void>();
      this.listeners.set(m, set);
      this.subs.push(
        rpc.onNotification(m, (p) => {
          for (const h of [...set]) {
            try {
              h(p);
            } catch (err) {
              console.error(`rlmd: ${m} listener failed`, err);
            }
          }
        }),
      );
    }
  }

  dispose(): void {
    this.subs.forEach((d) => d.dispose());
    this.listeners.forEach((s) => s.clear());
  }

  private listen(method: string, handler: (p: any) => void): Disposable {
    const set = this.listeners.get(method)!;
    set.add(handler);
    return { dispose: () => set.delete(handler) };
  }

  command<T = any>(name: string, params: object = {}, timeoutMs = this.timeoutMs): Promise<T> {
    const p = this.rpc.sendRequest("workspace/executeCommand", {
      command: name,
      arguments: [params],
    }) as Promise<T>;
    return withTimeout(p, timeoutMs, name);
  }

  start(params: StartParams): Promise<TaskStatus> {
    return this.command("rlmd.task.start", params);
  }
  cancel(runId: string): Promise<TaskStatus> {
    return this.command("rlmd.task.cancel", { run_id: runId });
  }
  status(runId: string): Promise<TaskStatus> {
    return this.command("rlmd.task.status", { run_id: runId });
  }
  async tasks(workspace?: string): Promise<TaskStatus[]> {
    const r = await this.command<{ tasks: TaskStatus[] }>("rlmd.task.list", workspace ? { workspace } : {});
    return r.tasks;
  }
  async runs(opts: { workspace?: string; limit?: number; root_only?: boolean } = {}): Promise<Run[]> {
    const r = await this.command<{ runs: Run[] }>("rlmd.runs.list", opts);
    return r.runs;
  }
  /** A stored run (and its tree); `run` is null and `task` set while the task is queued. */
  getRun(runId: string, tree = false): Promise<{ run: Run | null; tree?: any; task?: TaskStatus }> {
    return this.command("rlmd.runs.get", { run_id: runId, tree });
  }
  async models(workspace?: string): Promise<ModelInfo[]> {
    const r = await this.command<{ models: ModelInfo[] }>("rlmd.models.list", workspace ? { workspace } : {});
    return r.models;
  }
  health(): Promise<{ ok: boolean; version: string; pid: number; mode: string; home: string; [k: string]: any }> {
    return this.command("rlmd.health");
  }

  onEvent(handler: (e: RunEvent) => void): Disposable {
    return this.listen("rlmd/event", handler);
  }
  onTaskStatus(handler: (s: TaskStatus) => void): Disposable {
    return this.listen("rlmd/taskStatus", handler);
  }
  onWorkspace(handler: (w: { workspace: string; change: string; state: string; data: any }) => void): Disposable {
    return this.listen("rlmd/workspace", handler);
  }

  /** Resolves with the final TaskStatus of `runId` (notification or, as a fallback, polling). */
  waitFinished(runId: string, timeoutMs = 120_000): Promise<TaskStatus> {
    return new Promise((resolve, reject) => {
      let done = false;
      const finish = (s: TaskStatus) => {
        if (done) return;
        done = true;
        sub.dispose();
        clearInterval(poll);
        clearTimeout(timer);
        resolve(s);
      };
      const sub = this.onTaskStatus((s) => {
        if (s.run_id === runId && s.state === "finished") finish(s);
      });
      const poll = setInterval(() => {
        this.status(runId).then((s) => s.state === "finished" && finish(s), () => undefined);
      }, 2000);
      const timer = setTimeout(() => {
        if (done) return;
        done = true;
        sub.dispose();
        clearInterval(poll);
        reject(new Error(`rlmd: task ${runId} did not finish in ${timeoutMs / 1000} s`));
      }, timeoutMs);
    });
  }
}
