// rlmd for VS Code: ask Recursive Language Models about the open codebase through the local
// rlmd daemon (`rlmd attach --stdio`), watch the recursion live, browse trajectories.
import * as vscode from "vscode";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawnSync } from "node:child_process";
import { LanguageClient, LanguageClientOptions, ServerOptions, State, TransportKind } from "vscode-languageclient/node";
import { RlmdApi, TaskStatus, errorName, Run } from "./rpc/api";
import { Trajectory, formatCost, formatSeconds, formatTokens, usageTotals } from "./rpc/model";
import { RlmdSettings, daemonEnv, rlmdCommand, scopedQuestion, startParams } from "./rpc/settings";
import { AnswerPanel, TrajectoryPanel } from "./panels";
import { RunsProvider } from "./runsView";

let ext: RlmdExtension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  ext = new RlmdExtension(context);
  await ext.start();
}

export async function deactivate(): Promise<void> {
  await ext?.stop();
}

function settings(): RlmdSettings {
  const c = vscode.workspace.getConfiguration("rlmd");
  return {
    pythonPath: c.get<string>("pythonPath") || undefined,
    rlmdPath: c.get<string>("rlmdPath") || "rlmd",
    home: c.get<string>("home") || undefined,
    rootModel: c.get<string>("rootModel") || undefined,
    subModel: c.get<string>("subModel") || undefined,
    sandbox: c.get<string>("sandbox") || undefined,
    budgets: {
      maxIterations: c.get<number | null>("budgets.maxIterations"),
      maxDepth: c.get<number | null>("budgets.maxDepth"),
      maxSeconds: c.get<number | null>("budgets.maxSeconds"),
      maxTokens: c.get<number | null>("budgets.maxTokens"),
      maxUsd: c.get<number | null>("budgets.maxUsd"),
      maxSubcalls: c.get<number | null>("budgets.maxSubcalls"),
    },
    tuiCommand: c.get<string>("tuiCommand") || undefined,
  };
}

class RlmdExtension {
  private client?: LanguageClient;
  private api?: RlmdApi;
  private readonly log: vscode.LogOutputChannel;
  private readonly daemonLog: vscode.OutputChannel;
  private readonly status: vscode.StatusBarItem;
  private readonly runs: RunsProvider;
  private readonly tasks = new Map<string, TaskStatus>();
  private readonly live = new Map<string, Trajectory>();
  private readonly stored = new Map<string, Trajectory>();
  private daemonState = "starting";
  private home?: string;
  private tail?: { file: string; pos: number; timer: NodeJS.Timeout };
  private failure?: string; // why the daemon cannot start, shown in the status bar
  private readonly progress = new Map<string, (step?: string) => void>(); // task → its notification
  private readonly media: vscode.Uri;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.media = vscode.Uri.joinPath(context.extensionUri, "media");
    this.log = vscode.window.createOutputChannel("rlmd", { log: true });
    this.daemonLog = vscode.window.createOutputChannel("rlmd daemon");
    this.status = vscode.window.createStatusBarItem("rlmd.status", vscode.StatusBarAlignment.Left, 50);
    this.status.name = "rlmd";
    this.status.command = "rlmd.ui.showLog";
    this.status.show();
    this.runs = new RunsProvider({
      listRuns: () => this.listRuns(),
      liveTasks: () => [...this.tasks.values()],
      trajectory: (id) => this.trajectory(id),
    });
    const view = vscode.window.createTreeView("rlmd.runs", { treeDataProvider: this.runs, showCollapseAll: true });
    const reg = (id: string, fn: (...a: any[]) => unknown) =>
      context.subscriptions.push(
        vscode.commands.registerCommand(id, async (...a: any[]) => {
          try {
            await fn(...a);
          } catch (e) {
            this.log.error(`${id}: ${e instanceof Error ? e.stack ?? e.message : String(e)}`);
            vscode.window.showErrorMessage(`rlmd: ${e instanceof Error ? e.message : String(e)}`);
          }
        }),
      );
    reg("rlmd.ui.askWorkspace", () => this.askWorkspace());
    reg("rlmd.ui.askSelection", () => this.askSelection());
    reg("rlmd.ui.cancel", (item?: any) => this.cancel(item));
    reg("rlmd.ui.showTrajectory", (item?: any) => this.showTrajectory(item));
    reg("rlmd.ui.showAnswer", (runId: string) => this.showAnswer(runId));
    reg("rlmd.ui.openTui", () => this.openTui());
    reg("rlmd.ui.restartDaemon", () => this.restartDaemon());
    reg("rlmd.ui.pickModels", () => this.pickModels());
    reg("rlmd.ui.refreshRuns", () => this.runs.refresh());
    reg("rlmd.ui.showLog", () => this.daemonLog.show(true));
    context.subscriptions.push(
      view,
      this.log,
      this.daemonLog,
      this.status,
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("rlmd.pythonPath") || e.affectsConfiguration("rlmd.rlmdPath") || e.affectsConfiguration("rlmd.home")) {
          void this.restartClient();
        }
      }),
      vscode.workspace.onDidChangeWorkspaceFolders(() => this.runs.refresh()),
    );
    this.renderStatus();
  }

  // ---- connection ----

  /** Whether `rlmd.pythonPath` can import rlmd (and what its CLI needs); if not, one
   * notification with the reason and a button to fix the setting (instead of the language
   * client's generic errors). */
  private pythonHasRlmd(s: RlmdSettings): boolean {
    if (!s.pythonPath) return true;
    // the CLI's module, so a missing dependency (rich...) shows here too, not only rlmd itself
    const r = spawnSync(s.pythonPath, ["-c", "import rlmd.cli.main"], { encoding: "utf8", timeout: 30_000, env: daemonEnv(s) });
    if (!r.error && r.status === 0) return true;
    const reason = r.error
      ? (r.error as NodeJS.ErrnoException).code === "ENOENT" ? `no such program: ${s.pythonPath}` : r.error.message
      : (r.stderr || "").trim().split("\n").pop() || `exit code ${r.status}`;
    this.failure = `rlmd not installed for ${s.pythonPath}`;
    this.daemonState = "failed";
    this.runs.message = `rlmd.pythonPath (${s.pythonPath}) cannot run rlmd: ${reason}`;
    this.log.error(`rlmd.pythonPath ${s.pythonPath} cannot import rlmd: ${reason}`);
    void vscode.window
      .showErrorMessage(
        `rlmd: the Python in rlmd.pythonPath cannot run rlmd (${reason}). Install rlmd into it (pip install -e /path/to/rlmd) or point rlmd.pythonPath at the Python that has it.`,
        "Open settings",
      )
      .then((c) => {
        if (c) void vscode.commands.executeCommand("workbench.action.openSettings", "rlmd.pythonPath");
      });
    return false;
  }

  async start(): Promise<void> {
    const s = settings();
    this.failure = undefined;
    if (!this.pythonHasRlmd(s)) {
      this.renderStatus();
      this.runs.refresh();
      return;
    }
    const cmd = rlmdCommand(s, "attach", "--stdio");
    const serverOptions: ServerOptions = {
      command: cmd.command,
      args: cmd.args,
      transport: TransportKind.stdio,
      options: { env: daemonEnv(s), cwd: this.folders()[0] },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [],
      outputChannel: this.log,
      initializationOptions: { events: "summary", progress: "own" },
      connectionOptions: { maxRestartCount: 3 },
    };
    this.log.info(`starting ${cmd.command} ${cmd.args.join(" ")}${s.home ? ` (RLMD_HOME=${s.home})` : ""}`);
    const client = new LanguageClient("rlmd", "rlmd daemon", serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((e) => {
      this.daemonState = e.newState === State.Running ? "ready" : e.newState === State.Starting ? "starting" : "stopped";
      this.renderStatus();
      this.runs.refresh();
    });
    const api = new RlmdApi(client, 30_000);
    this.api = api;
    api.onTaskStatus((t) => this.onTaskStatus(t));
    api.onEvent((e) => {
      let t = this.live.get(e.task_id);
      if (!t) {
        if (!this.isMine(e.workspace)) return;
        t = new Trajectory(e.task_id);
        this.live.set(e.task_id, t);
      }
      t.apply(e);
      this.progress.get(e.task_id)?.(stepOf(e));
      TrajectoryPanel.get(e.task_id)?.update(t);
      this.runs.refresh();
    });
    try {
      await client.start();
      const h = await api.health();
      this.home = h.home;
      this.log.info(`connected to rlmd ${h.version} (pid ${h.pid}, home ${h.home})`);
      this.tailDaemonLog(path.join(h.home, "run", "daemon.log"));
      for (const t of await api.tasks()) if (this.isMine(t.workspace)) this.tasks.set(t.run_id, t);
      this.daemonState = "ready";
    } catch (e) {
      this.daemonState = "failed";
      this.runs.message = `rlmd daemon unavailable: ${e instanceof Error ? e.message : e}. Check rlmd.pythonPath / rlmd.rlmdPath.`;
      this.log.error(`could not start the rlmd daemon: ${e}`);
      vscode.window.showErrorMessage(`rlmd: could not start the daemon (${e instanceof Error ? e.message : e}). Check the rlmd.pythonPath setting.`, "Open settings").then((c) => {
        if (c) void vscode.commands.executeCommand("workbench.action.openSettings", "rlmd.");
      });
    }
    this.renderStatus();
    this.runs.refresh();
  }

  async stop(): Promise<void> {
    if (this.tail) clearInterval(this.tail.timer);
    this.tail = undefined;
    this.api?.dispose();
    const c = this.client;
    this.client = undefined;
    this.api = undefined;
    if (c) {
      try {
        await c.stop(5000);
      } catch (e) {
        this.log.warn(`stop: ${e}`);
      }
    }
  }

  private async restartClient(): Promise<void> {
    await this.stop();
    this.daemonState = "starting";
    this.renderStatus();
    await this.start();
  }

  private needApi(): RlmdApi {
    if (!this.api || this.daemonState !== "ready") throw new Error(`the daemon is ${this.daemonState}; see the rlmd output channel`);
    return this.api;
  }

  private tailDaemonLog(file: string): void {
    if (this.tail) clearInterval(this.tail.timer);
    let pos = 0;
    try {
      pos = Math.max(0, fs.statSync(file).size - 64 * 1024);
    } catch {
      /* not there yet */
    }
    const state = { file, pos, timer: setInterval(() => read(), 1000) };
    const read = () => {
      try {
        const size = fs.statSync(file).size;
        if (size < state.pos) state.pos = 0;
        if (size === state.pos) return;
        const fd = fs.openSync(file, "r");
        const buf = Buffer.alloc(Math.min(size - state.pos, 1 << 20));
        fs.readSync(fd, buf, 0, buf.length, state.pos);
        fs.closeSync(fd);
        state.pos += buf.length;
        this.daemonLog.append(buf.toString("utf8"));
      } catch {
        /* no log yet */
      }
    };
    this.tail = state;
    this.daemonLog.appendLine(`[rlmd] daemon log: ${file}`);
    read();
  }

  // ---- state ----

  private folders(): string[] {
    return (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  }

  private isMine(workspace: string | null | undefined): boolean {
    if (!workspace) return false;
    const w = path.resolve(workspace);
    return this.folders().some((f) => path.resolve(f) === w || safeReal(f) === w);
  }

  private onTaskStatus(t: TaskStatus): void {
    if (!this.isMine(t.workspace) && !this.tasks.has(t.run_id)) return;
    this.tasks.set(t.run_id, t);
    if (t.state === "finished") {
      const traj = this.live.get(t.run_id);
      traj?.settle();
      const panel = TrajectoryPanel.get(t.run_id);
      if (traj) panel?.update(traj);
      // live events are summaries (strings cut to 500 characters): show the stored, full tree
      if (panel) {
        this.trajectory(t.run_id).then(
          (full) => full && panel.update(full),
          (e) => this.log.warn(`trajectory ${t.run_id}: ${e}`),
        );
      }
      setTimeout(() => this.live.delete(t.run_id), 60_000);
      setTimeout(() => {
        this.tasks.delete(t.run_id);
        this.runs.refresh();
        this.renderStatus();
      }, 1500);
    }
    this.renderStatus();
    this.runs.refresh();
  }

  private renderStatus(): void {
    const running = [...this.tasks.values()].filter((t) => t.state !== "finished");
    const spend = running.reduce((a, t) => a + (t.usage?.cost_usd ?? 0), 0);
    if (this.failure) {
      this.status.text = `$(error) rlmd: ${this.failure}`;
      this.status.tooltip = "rlmd.pythonPath cannot run rlmd: fix the setting";
    } else if (this.daemonState !== "ready") {
      this.status.text = `$(${this.daemonState === "starting" ? "sync~spin" : "error"}) rlmd: ${this.daemonState}`;
      this.status.tooltip = "rlmd daemon: click for its log";
    } else if (running.length) {
      const it = running.map((t) => t.iterations).reduce((a, b) => Math.max(a, b), 0);
      this.status.text = `$(sync~spin) rlmd: ${running.length} running · ${formatCost(spend)} · it ${it}`;
      this.status.tooltip = running.map((t) => `${t.state}: ${t.question.split("\n")[0].slice(0, 60)}`).join("\n");
    } else {
      this.status.text = "$(check) rlmd: ready";
      this.status.tooltip = `rlmd daemon ready${this.home ? ` (${this.home})` : ""}: click for its log`;
    }
  }

  private async listRuns(): Promise<Run[]> {
    const api = this.needApi();
    const folders = this.folders();
    const lists = await Promise.all(folders.map((w) => api.runs({ workspace: w, limit: 50 })));
    return lists.flat().sort((a, b) => (b.started_at ?? 0) - (a.started_at ?? 0));
  }

  private async trajectory(runId: string): Promise<Trajectory | undefined> {
    const live = this.live.get(runId);
    const task = this.tasks.get(runId);
    if (live && task && task.state !== "finished") return live;
    const cached = this.stored.get(runId);
    if (cached && cached.root && cached.root.status !== "running") return cached;
    const { tree } = await this.needApi().getRun(runId, true);
    if (!tree) throw new Error(`run ${runId} has not started yet (queued)`);
    const t = Trajectory.fromStore(tree);
    this.stored.set(runId, t);
    return t;
  }

  // ---- commands ----

  private async pickFolder(): Promise<string> {
    const f = this.folders();
    if (!f.length) throw new Error("open a folder first: rlmd answers questions about a workspace");
    if (f.length === 1) return f[0];
    const p = await vscode.window.showWorkspaceFolderPick({ placeHolder: "Which workspace?" });
    if (!p) throw new Error("cancelled");
    return p.uri.fsPath;
  }

  private async askWorkspace(): Promise<void> {
    const api = this.needApi();
    const workspace = await this.pickFolder();
    const q = await vscode.window.showInputBox({
      title: "rlmd: Ask about this workspace",
      prompt: `A question about ${path.basename(workspace)} (the whole codebase is the context)`,
      ignoreFocusOut: true,
    });
    if (!q) return;
    await this.run(api, workspace, q);
  }

  private async askSelection(): Promise<void> {
    const api = this.needApi();
    const ed = vscode.window.activeTextEditor;
    if (!ed) throw new Error("open a file first");
    const folder = vscode.workspace.getWorkspaceFolder(ed.document.uri);
    if (!folder) throw new Error("the file is not in an open workspace folder");
    const rel = path.relative(folder.uri.fsPath, ed.document.uri.fsPath).split(path.sep).join("/");
    const sel = ed.selection.isEmpty ? undefined : ed.selection;
    const q = await vscode.window.showInputBox({
      title: sel ? `rlmd: Ask about the selection in ${rel}` : `rlmd: Ask about ${rel}`,
      prompt: "Your question",
      ignoreFocusOut: true,
    });
    if (!q) return;
    const question = scopedQuestion(
      q,
      rel,
      sel && { startLine: sel.start.line + 1, endLine: sel.end.line + 1, text: ed.document.getText(sel) },
    );
    await this.run(api, folder.uri.fsPath, question);
  }

  private async run(api: RlmdApi, workspace: string, question: string): Promise<void> {
    let started: TaskStatus;
    try {
      started = await api.start(startParams(settings(), workspace, question));
    } catch (e) {
      const name = errorName(e);
      throw new Error(`${name ? name + ": " : ""}${e instanceof Error ? e.message : e}`);
    }
    this.tasks.set(started.run_id, started);
    this.live.set(started.run_id, this.live.get(started.run_id) ?? new Trajectory(started.run_id));
    this.renderStatus();
    this.runs.refresh();
    this.log.info(`task ${started.run_id} started: ${question.split("\n")[0].slice(0, 100)}`);
    vscode.window.setStatusBarMessage(`rlmd: task ${started.run_id.slice(0, 8)} started`, 3000);
    const id = started.run_id;
    // A cancellable notification while the task runs: the current step, elapsed time,
    // tokens and spend so far.
    const fin = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `rlmd: ${question.split("\n")[0].slice(0, 50)}`, cancellable: true },
      async (progress, token) => {
        const t0 = Date.now();
        let step = "queued";
        const render = () => {
          const u = usageTotals(this.tasks.get(id)?.usage);
          progress.report({
            message: `${step} · ${formatSeconds((Date.now() - t0) / 1000)} · ${formatTokens(u.input_tokens + u.output_tokens)} tok · ${formatCost(u.cost_usd)}`,
          });
        };
        this.progress.set(id, (s) => {
          if (s) step = s;
          render();
        });
        const tick = setInterval(render, 1000);
        token.onCancellationRequested(() => {
          api.cancel(id).then(
            () => this.log.info(`task ${id}: cancel requested from the notification`),
            (e) => this.log.warn(`cancel ${id}: ${e}`),
          );
        });
        try {
          render();
          return await api.waitFinished(id, 24 * 3600 * 1000);
        } finally {
          clearInterval(tick);
          this.progress.delete(id);
        }
      },
    );
    this.log.info(`task ${fin.run_id} ${fin.status}`);
    AnswerPanel.show(fin, this.answerActions(), this.media);
    if (fin.status !== "completed") {
      vscode.window.showWarningMessage(`rlmd: the task ended with ${fin.status}${fin.error ? `: ${fin.error}` : ""}`);
    }
  }

  private async showAnswer(runId: string): Promise<void> {
    const t = this.tasks.get(runId);
    if (t && t.state !== "finished") return this.showTrajectory(runId);
    const s = await this.needApi().status(runId);
    AnswerPanel.show(s, this.answerActions(), this.media);
  }

  private answerActions() {
    return {
      trajectory: (id: string) => void this.showTrajectory(id),
      // a follow-up runs in the same workspace: the daemon keeps its REPL state
      followUp: (workspace: string, question: string) =>
        void this.run(this.needApi(), workspace, question).catch((e) =>
          vscode.window.showErrorMessage(`rlmd: ${e instanceof Error ? e.message : String(e)}`),
        ),
    };
  }

  private runIdOf(item: any): string | undefined {
    if (typeof item === "string") return item;
    if (item?.type === "run") return item.run.id;
    if (item?.type === "node") return item.runId;
    if (item?.type === "child") return item.rootId;
    return undefined;
  }

  private async cancel(item?: any): Promise<void> {
    const api = this.needApi();
    let runId = this.runIdOf(item);
    if (!runId) {
      const live = (await api.tasks()).filter((t) => t.state !== "finished");
      if (!live.length) {
        vscode.window.showInformationMessage("rlmd: no task is running");
        return;
      }
      const pick =
        live.length === 1
          ? { id: live[0].run_id }
          : await vscode.window.showQuickPick(
              live.map((t) => ({ label: t.question.split("\n")[0].slice(0, 80), description: `${t.state} · ${formatCost(t.usage?.cost_usd)}`, id: t.run_id })),
              { placeHolder: "Cancel which task?" },
            );
      if (!pick) return;
      runId = pick.id;
    }
    const s = await api.cancel(runId);
    vscode.window.showInformationMessage(`rlmd: cancelling ${s.run_id.slice(0, 8)}`);
  }

  private async showTrajectory(item?: any): Promise<void> {
    const api = this.needApi();
    let runId = this.runIdOf(item);
    if (!runId) {
      const runs = await this.listRuns();
      const live = [...this.tasks.values()].filter((t) => !runs.some((r) => r.id === t.run_id));
      const picks = [
        ...live.map((t) => ({ label: t.question.split("\n")[0].slice(0, 80), description: t.state, id: t.run_id })),
        ...runs.map((r) => ({ label: r.question.split("\n")[0].slice(0, 80), description: `${r.status} · ${formatCost(r.tree?.cost_usd ?? r.cost_usd)}`, id: r.id })),
      ];
      if (!picks.length) {
        vscode.window.showInformationMessage("rlmd: no runs in this workspace yet");
        return;
      }
      const pick = picks.length === 1 ? picks[0] : await vscode.window.showQuickPick(picks, { placeHolder: "Show the trajectory of…" });
      if (!pick) return;
      runId = pick.id;
    }
    const ws = this.tasks.get(runId)?.workspace ?? this.folders()[0];
    const panel = TrajectoryPanel.show(runId, ws, this.media);
    const t = await this.trajectory(runId);
    if (t) panel.update(t);
    void api;
  }

  private openTui(): void {
    const s = settings();
    const cmd = s.tuiCommand ? { command: s.tuiCommand, args: [] as string[] } : rlmdCommand(s, "tui");
    const term = vscode.window.createTerminal({
      name: "rlmd TUI",
      cwd: this.folders()[0],
      env: s.home ? { RLMD_HOME: s.home } : undefined,
    });
    term.show();
    term.sendText([cmd.command, ...cmd.args].map(shellQuote).join(" "));
  }

  private async restartDaemon(): Promise<void> {
    let pid: number | undefined;
    try {
      pid = (await this.api?.health())?.pid;
    } catch {
      /* not connected */
    }
    await this.stop();
    this.daemonState = "starting";
    this.renderStatus();
    if (pid) {
      this.log.info(`stopping daemon pid ${pid}`);
      try {
        process.kill(pid, "SIGTERM");
      } catch {
        /* gone */
      }
      for (let i = 0; i < 150 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    }
    this.tasks.clear();
    await this.start();
    if (this.daemonState === "ready") vscode.window.showInformationMessage("rlmd: daemon restarted");
  }

  private async pickModels(): Promise<void> {
    const api = this.needApi();
    const workspace = this.folders()[0];
    const models = await api.models(workspace);
    const cfg = vscode.workspace.getConfiguration("rlmd");
    const items = (current: string) => [
      { label: "(default)", description: "the config's [run] setting", name: "" },
      ...models
        .slice()
        .sort((a, b) => Number(b.usable) - Number(a.usable))
        .map((m) => ({
          label: `${m.usable ? "$(check)" : "$(circle-slash)"} ${m.name}`,
          description: `${m.provider}:${m.model}${m.price_input != null ? ` · $${m.price_input}/$${m.price_output} per 1M` : ""}${m.name === current ? " · current" : ""}`,
          detail: m.usable ? undefined : m.reason ?? "not usable here",
          name: m.name,
        })),
    ];
    const root = await vscode.window.showQuickPick(items(cfg.get<string>("rootModel") ?? ""), { title: "rlmd: root model", matchOnDescription: true, ignoreFocusOut: true });
    if (!root) return;
    const sub = await vscode.window.showQuickPick(items(cfg.get<string>("subModel") ?? ""), { title: "rlmd: sub model (sub-calls, child runs)", matchOnDescription: true, ignoreFocusOut: true });
    if (!sub) return;
    const target = workspace ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
    await cfg.update("rootModel", root.name, target);
    await cfg.update("subModel", sub.name, target);
    vscode.window.showInformationMessage(`rlmd: root model ${root.name || "(default)"}, sub model ${sub.name || "(default)"}`);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function safeReal(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** What a task is doing now, from one of its events (for the progress notification). */
function stepOf(e: { kind: string; depth: number; data: Record<string, any> }): string | undefined {
  const where = e.depth > 0 ? `child run (depth ${e.depth}) · ` : "";
  switch (e.kind) {
    case "iteration.started":
      return `${where}iteration ${Number(e.data?.index ?? 0) + 1}`;
    case "cell.started":
      return `${where}cell ${Number(e.data?.index ?? 0) + 1}`;
    case "model_call.started":
      return `${where}${e.data?.role === "root" ? "root call" : `${e.data?.role ?? "sub"}-call`}`;
    case "run.finished":
      return e.depth === 0 ? `finishing (${e.data?.status})` : undefined;
    default:
      return undefined;
  }
}
