// Real-workbench test: the packaged extension installed into code-server, driven by
// playwright-core in Debian's Chromium. Asks "Ask about this workspace" with the scripted
// model, checks the answer panel (and its file link), the Runs tree and the trajectory webview.
// Usage: node test-e2e/workbench.mjs CODE_SERVER_BIN VSIX PYTHON REPO
// Prints "N passed, N failed" at the end; screenshots go to test-artifacts/.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, readFileSync, existsSync, readdirSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const [codeServer, vsix, python, repo] = process.argv.slice(2);
const HERE = dirname(fileURLToPath(import.meta.url));
const ARTIFACTS = resolve(HERE, "..", "test-artifacts");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const CELLS = `scripted:${join(repo, "tests/helpers/scripted_models.py")}:cells`;
mkdirSync(ARTIFACTS, { recursive: true });

const t0 = Date.now();
const log = (m) => console.log(`[e2e ${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
const results = [];
async function step(name, fn) {
  const s = Date.now();
  try {
    await fn();
    results.push([name, true]);
    log(`ok   ${name} (${Date.now() - s} ms)`);
  } catch (e) {
    results.push([name, false]);
    log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    throw e;
  }
}

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
    s.on("error", rej);
  });
}

const base = mkdtempSync(join(tmpdir(), "rlmd-e2e-"));
const home = join(base, "home");
const ws = join(base, "proj");
const ud = join(base, "ud");
const extDir = join(base, "ext");
mkdirSync(join(ws, "pkg"), { recursive: true });
mkdirSync(join(ud, "User"), { recursive: true });
mkdirSync(home, { recursive: true });
// "rlmd.sandbox": "inprocess" below: over the daemon's socket that needs the user's opt-in.
// "cells" is the scripted model with a price, so every view shows real costs (a view reading
// the wrong usage field shows $0 and fails the checks below).
writeFileSync(
  join(home, "config.toml"),
  "[daemon]\nallow_inprocess = true\n\n[models.cells]\nprovider = \"scripted\"\n" +
    `model = "${join(repo, "tests/helpers/scripted_models.py")}:cells"\nprice_input = 10.0\nprice_output = 10.0\n`,
);
writeFileSync(join(ws, "pkg", "core.py"), "def helper():\n    return 42\n\n\ndef other():\n    return helper() + 1\n");
writeFileSync(join(ws, "README.md"), "# demo project\n");
const port = await freePort();
writeFileSync(join(base, "cs.yaml"), `bind-addr: 127.0.0.1:${port}\nauth: none\ncert: false\n`);
writeFileSync(
  join(ud, "User", "settings.json"),
  JSON.stringify(
    {
      "rlmd.pythonPath": python,
      "rlmd.home": home,
      "rlmd.rootModel": "cells",
      "rlmd.sandbox": "inprocess",
      "workbench.startupEditor": "none",
      "security.workspace.trust.enabled": false,
      "workbench.tips.enabled": false,
      "telemetry.telemetryLevel": "off",
      "extensions.autoCheckUpdates": false,
      "extensions.autoUpdate": false,
    },
    null,
    2,
  ),
);
const csArgs = ["--config", join(base, "cs.yaml"), "--user-data-dir", ud, "--extensions-dir", extDir];
log(`installing ${vsix}`);
execFileSync(codeServer, [...csArgs, "--install-extension", vsix, "--force"], { stdio: ["ignore", "inherit", "inherit"] });

log(`starting code-server on ${port}`);
const csLog = join(ARTIFACTS, "code-server.log");
const cs = spawn(codeServer, [...csArgs, "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", ws], {
  detached: true, // own process group: kill it whole (the npm wrapper would orphan children)
  stdio: ["ignore", "pipe", "pipe"],
});
let csOut = "";
cs.stdout.on("data", (d) => (csOut += d));
cs.stderr.on("data", (d) => (csOut += d));

let browser;
let page;
let failed = false;
try {
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/healthz`);
      if (r.ok) break;
    } catch {
      /* not yet */
    }
    if (i > 300 || cs.exitCode !== null) throw new Error(`code-server did not start:\n${csOut}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(60_000);
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);

  const statusItem = (text) => page.locator(".statusbar-item", { hasText: text });
  const runCommand = async (title) => {
    await page.keyboard.press("F1");
    const input = page.locator(".quick-input-widget input").first();
    await input.waitFor({ state: "visible" });
    await input.fill(`>${title}`);
    await page.locator(".quick-input-list .monaco-list-row:visible", { hasText: title }).first().waitFor();
    await page.keyboard.press("Enter");
  };
  const webview = (marker) =>
    page.frameLocator(`iframe.webview.ready >> nth=${marker}`).frameLocator("iframe#active-frame");

  await step("workbench loads and the daemon connects (status bar: rlmd: ready)", async () => {
    await page.locator(".monaco-workbench").waitFor();
    await statusItem("rlmd: ready").waitFor({ timeout: 90_000 });
  });

  const question = JSON.stringify({
    cells: ["print(read_file('pkg/core.py'))", "FINAL('The helper is defined in pkg/core.py:5 and returns 42.')"],
  });
  await step("Ask about this workspace → answer panel with a file link", async () => {
    await runCommand("rlmd: Ask about this workspace");
    const box = page.locator(".quick-input-widget input").first();
    await page.locator(".quick-input-widget", { hasText: "Ask about this workspace" }).waitFor();
    await box.fill(question);
    await page.keyboard.press("Enter");
    const answer = webview(0).locator("#answer");
    await answer.waitFor();
    await page.waitForFunction(() => true);
    const text = await answer.textContent({ timeout: 60_000 });
    if (!text.includes("The helper is defined in pkg/core.py:5 and returns 42.")) throw new Error(`answer: ${text}`);
    await webview(0).locator("#meta", { hasText: "completed" }).waitFor();
    await page.waitForTimeout(300);
    await page.screenshot({ path: join(ARTIFACTS, "answer-panel.png") });
    const link = webview(0).locator("a.file-link", { hasText: "pkg/core.py:5" });
    await link.click();
    // by resource name: the answer panel's own tab title also contains "core.py"
    await page.locator('.tabs-container .tab[data-resource-name="core.py"]').waitFor();
    await statusItem("Ln 5").waitFor();
  });

  await step("Runs tree view shows the run with status and cost; expanding shows the recursion tree", async () => {
    await page.locator('.activitybar a[aria-label^="rlmd"], .activitybar li[aria-label^="rlmd"]').first().click();
    const row = page.locator('.monaco-list-row', { hasText: "cells" }).filter({ hasText: "completed" }).first();
    await row.waitFor();
    const desc = await row.textContent();
    // tokens, a real (non-zero) cost and the duration
    if (!/completed · [\d.]+k? tok · \$0\.\d*[1-9]\d* · [\d.]+s/.test(desc)) throw new Error(`row: ${desc}`);
    await row.locator(".monaco-tl-twistie").click();
    await page.locator(".monaco-list-row", { hasText: "iteration 1" }).first().waitFor();
    await page.locator(".monaco-list-row", { hasText: "cell 1: print(read_file" }).first().waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "runs-view.png") });
  });

  await step("Show trajectory → webview with the run's tree, code and output", async () => {
    await runCommand("rlmd: Show trajectory");
    await page.locator(".tabs-container .tab", { hasText: "rlmd trajectory" }).waitFor();
    const frames = page.locator("iframe.webview.ready");
    let found = false;
    for (let i = 0; i < 40 && !found; i++) {
      const n = await frames.count();
      for (let k = 0; k < n; k++) {
        const f = webview(k);
        if ((await f.locator("#tree").count()) > 0) {
          await f.locator("#summary", { hasText: "completed" }).waitFor();
          const summary = await f.locator("#summary").textContent();
          if (!/tokens · \$0\.\d*[1-9]/.test(summary)) throw new Error(`summary: ${summary}`);
          await f.locator(".timeline-row").first().waitFor();
          await f.locator("pre.stdout", { hasText: "return 42" }).first().waitFor({ state: "attached" });
          await f.locator("pre.answer", { hasText: "pkg/core.py:5" }).first().waitFor({ state: "attached" });
          found = true;
          break;
        }
      }
      if (!found) await page.waitForTimeout(250);
    }
    if (!found) throw new Error("no trajectory webview");
    await page.screenshot({ path: join(ARTIFACTS, "trajectory.png") });
  });

  await step("a slow run: live status bar and tree, then Cancel task", async () => {
    const slow = JSON.stringify({ cells: ["a = 1", "b = 2", "c = 3", "d = 4"], sleep_s: 1.5 });
    await runCommand("rlmd: Ask about this workspace");
    await page.locator(".quick-input-widget", { hasText: "Ask about this workspace" }).waitFor();
    await page.locator(".quick-input-widget input").first().fill(slow);
    await page.keyboard.press("Enter");
    await statusItem("1 running").waitFor();
    const row = page.locator(".monaco-list-row", { hasText: "sleep_s" }).first();
    await row.filter({ hasText: "running" }).waitFor();
    await row.locator(".monaco-tl-twistie").click();
    // the recursion tree grows while the run goes on
    await page.locator(".monaco-list-row", { hasText: "iteration 2" }).first().waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "runs-view-live.png") });
    await runCommand("rlmd: Cancel task");
    await row.filter({ hasText: "cancelled" }).waitFor();
    await statusItem("rlmd: ready").waitFor();
    await page.locator(".notifications-toasts", { hasText: "cancelled" }).first().waitFor();
  });

  await step("Ask about the selection / this file: the question is narrowed to the open file", async () => {
    await page.locator('.tabs-container .tab[data-resource-name="core.py"]').first().click();
    await page.locator(".monaco-editor .view-lines").first().click();
    await runCommand("rlmd: Ask about the selection / this file");
    await page.locator(".quick-input-widget", { hasText: "pkg/core.py" }).waitFor();
    await page.locator(".quick-input-widget input").first().fill("What does this file do?");
    await page.keyboard.press("Enter");
    await page.locator(".tabs-container .tab", { hasText: "rlmd: What does this file do?" }).waitFor();
    let found = false;
    for (let i = 0; i < 40 && !found; i++) {
      const n = await page.locator("iframe.webview.ready").count();
      for (let k = 0; k < n && !found; k++) {
        const q = webview(k).locator("#question", { hasText: "Focus on the file `pkg/core.py`" });
        if ((await q.count()) > 0) {
          await webview(k).locator("#answer", { hasText: "done" }).waitFor();
          found = true;
        }
      }
      if (!found) await page.waitForTimeout(250);
    }
    if (!found) throw new Error("no answer panel for the file question");
  });

  const ask = async (q) => {
    await runCommand("rlmd: Ask about this workspace");
    await page.locator(".quick-input-widget", { hasText: "Ask about this workspace" }).waitFor();
    await page.locator(".quick-input-widget input").first().fill(q);
    await page.keyboard.press("Enter");
  };
  // the webview (answer panel or trajectory) whose `selector` matches `text`
  const findWebview = async (selector, text) => {
    for (let i = 0; i < 240; i++) {
      const n = await page.locator("iframe.webview.ready").count();
      for (let k = 0; k < n; k++) {
        if ((await webview(k).locator(selector, { hasText: text }).count()) === 0) continue;
        // Pin the frame by the webview's id: a hidden panel without retainContextWhenHidden
        // loses its iframe, and "nth=k" would then silently point at another panel.
        const src = (await page.locator("iframe.webview.ready").nth(k).getAttribute("src")) || "";
        const id = /[?&]id=([^&]+)/.exec(src);
        if (!id) return webview(k);
        return page.frameLocator(`iframe.webview.ready[src*="id=${id[1]}"]`).frameLocator("iframe#active-frame");
      }
      await page.waitForTimeout(250);
    }
    throw new Error(`no webview with ${selector} ~ ${text}`);
  };
  const workspaceSettings = (obj) => {
    mkdirSync(join(ws, ".vscode"), { recursive: true });
    writeFileSync(join(ws, ".vscode", "settings.json"), JSON.stringify(obj, null, 2));
  };

  await step("a depth-2 run: progress notification, Markdown answer, timeline with real costs", async () => {
    await ask(JSON.stringify({ cells: ["r = rlm_query('what is in pkg?')\nprint(r)", "FINAL('**Found**: `pkg/core.py:1` holds ' + r)"], sleep_s: 1 }));
    // the cancellable progress notification names the step, tokens and spend
    await page.locator(".notifications-toasts", { hasText: /tok · \$/ }).first().waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "progress-notification.png") });
    const panel = await findWebview("#answer strong", "Found");
    await panel.locator("#answer a.file-link", { hasText: "pkg/core.py:1" }).waitFor();
    await panel.locator("#copy").waitFor();
    const meta = await panel.locator("#meta").textContent();
    if (!/completed · 2 iteration\(s\) · .* tokens · \$0\.\d*[1-9]/.test(meta)) throw new Error(`meta: ${meta}`);
    await page.screenshot({ path: join(ARTIFACTS, "answer-depth2.png") });
    await panel.locator("#traj").click();
    const traj = await findWebview("#summary", "what is in pkg");
    await traj.locator(".timeline-row", { hasText: "run d1" }).first().waitFor();
    await traj.locator("details.run summary", { hasText: "depth 1" }).first().waitFor({ state: "attached" });
    await page.waitForTimeout(300);
    await page.screenshot({ path: join(ARTIFACTS, "trajectory-depth2.png") });
  });

  await step("a follow-up question from the answer panel runs in the same workspace", async () => {
    await page.locator(".tabs-container .tab", { hasText: "rlmd: {" }).first().click(); // the answer panel
    const panel = await findWebview("#answer strong", "Found");
    await panel.locator("#followup").fill(JSON.stringify({ cells: ["print('again')", "FINAL('follow-up answered')"] }));
    await panel.locator("#ask").click();
    await findWebview("#answer", "follow-up answered");
  });

  await step("a failed run: the answer panel says why", async () => {
    // sleep_s "x" makes the scripted model raise: the run fails with a model error
    await ask(JSON.stringify({ cells: ["print(1)"], sleep_s: "x" }));
    const panel = await findWebview("#meta", "failed");
    await panel.locator("#error", { hasText: "could not convert string to float" }).waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "answer-failed.png") });
  });

  await step("a budget-stopped run: partial answer, which budget, the overshoot, real costs", async () => {
    // a project budget (a project may lower budgets); the daemon reads it for the next task
    writeFileSync(join(ws, ".rlmd.toml"), "[run]\nmax_usd = 0.01\n");
    await ask(JSON.stringify({ cells: ["a = 1", "b = 2", "c = 3", "d = 4", "e = 5", "f = 6"] }));
    const panel = await findWebview("#meta", "max_usd");
    await panel.locator("#note", { hasText: /the spend budget \(\$0\.0100\) ended the run; \$0\.\d+ spent, \$0\.\d+ \(\d+%\) over/ }).waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "answer-budget.png") });
    await panel.locator("#traj").click();
    const traj = await findWebview("#summary ~ #note", "spend budget"); // the trajectory's note, not the answer's
    await traj.locator(".timeline-row").first().waitFor();
    await page.waitForTimeout(300);
    await page.screenshot({ path: join(ARTIFACTS, "trajectory-budget.png") });
    rmSync(join(ws, ".rlmd.toml"));
  });

  await step("Restart daemon: a new daemon process, the extension reconnects", async () => {
    const before = readFileSync(join(home, "run", "daemon.pid"), "utf8").trim();
    await runCommand("rlmd: Restart daemon");
    await page.locator(".notifications-toasts", { hasText: "daemon restarted" }).first().waitFor();
    await statusItem("rlmd: ready").waitFor();
    const after = readFileSync(join(home, "run", "daemon.pid"), "utf8").trim();
    if (!after || after === before) throw new Error(`daemon pid ${before} → ${after}`);
  });

  await step("Pick models: lists the daemon's models, saves the choice in the settings", async () => {
    await runCommand("rlmd: Pick models");
    // several quick-input lists exist (the command palette's is hidden): only visible rows;
    // choose with the keyboard (clicks race the widget's re-render between the two picks)
    const rows = page.locator(".quick-input-list .monaco-list-row:visible");
    for (const title of ["rlmd: root model", "rlmd: sub model"]) {
      await page.locator(".quick-input-widget:visible", { hasText: title }).waitFor();
      if (title.includes("root")) await rows.nth(1).waitFor(); // "(default)" + the daemon's models
      await page.locator(".quick-input-widget:visible input").first().fill("(default)");
      await rows.filter({ hasText: "(default)" }).first().waitFor();
      await page.waitForTimeout(200);
      await page.keyboard.press("Enter");
    }
    await page.locator(".notifications-toasts", { hasText: "root model (default), sub model (default)" }).first().waitFor();
    const saved = JSON.parse(readFileSync(join(ws, ".vscode", "settings.json"), "utf8"));
    if (saved["rlmd.rootModel"] !== "" || saved["rlmd.subModel"] !== "") throw new Error(JSON.stringify(saved));
  });

  await step("rlmd.pythonPath without rlmd: one notification with the reason and a fix button", async () => {
    const bare = "/usr/bin/python3"; // Debian's Python: no rlmd installed
    workspaceSettings({ "rlmd.pythonPath": bare });
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "cannot run rlmd" });
    await toast.first().waitFor();
    const text = await toast.first().textContent();
    if (!text.includes("No module named") || !text.includes("Open settings")) throw new Error(`toast: ${text}`);
    await statusItem("rlmd not installed for").waitFor();
    await page.waitForTimeout(2000); // room for any further (generic) error to show up
    await page.screenshot({ path: join(ARTIFACTS, "python-without-rlmd.png") });
    const mine = await toast.count();
    const generic = await page.locator(".notifications-toasts .notification-toast", { hasText: /could not start|server/i }).count();
    if (mine !== 1 || generic !== 0) throw new Error(`${mine} pythonPath notifications, ${generic} generic ones`);
    workspaceSettings({});
    await statusItem("rlmd: ready").waitFor({ timeout: 90_000 });
  });

  await step("the daemon log reaches the output channel; the client log names the daemon", async () => {
    const logs = join(ud, "logs");
    const files = [];
    const walk = (d) => {
      for (const f of readdirSync(d)) {
        const p = join(d, f);
        if (statSync(p).isDirectory()) walk(p);
        else files.push(p);
      }
    };
    walk(logs);
    const clientLog = files.find((f) => f.endsWith("rlmd.log"));
    if (!clientLog) throw new Error(`no rlmd.log among ${files.join(", ")}`);
    const text = readFileSync(clientLog, "utf8");
    if (!text.includes("connected to rlmd")) throw new Error(`client log: ${text.slice(-2000)}`);
    if (!existsSync(join(home, "run", "daemon.log"))) throw new Error("no daemon log");
  });
} catch (e) {
  failed = true;
  if (page) await page.screenshot({ path: join(ARTIFACTS, "failure.png") }).catch(() => undefined);
} finally {
  await browser?.close().catch(() => undefined);
  try {
    process.kill(-cs.pid, "SIGTERM");
  } catch {
    /* gone */
  }
  writeFileSync(csLog, csOut);
  // stop the daemon the extension started in the temp home
  try {
    const pid = Number(readFileSync(join(home, "run", "daemon.pid"), "utf8").trim());
    if (pid) process.kill(pid, "SIGTERM");
    for (let i = 0; i < 100; i++) {
      try {
        process.kill(pid, 0);
        await new Promise((r) => setTimeout(r, 100));
      } catch {
        break;
      }
    }
  } catch {
    /* no daemon */
  }
  await new Promise((r) => setTimeout(r, 300));
  try {
    process.kill(-cs.pid, "SIGKILL");
  } catch {
    /* gone */
  }
  if (!failed) rmSync(base, { recursive: true, force: true });
  else log(`kept ${base} for inspection`);
}
const passed = results.filter((r) => r[1]).length;
const nfail = results.length - passed + (failed && results.every((r) => r[1]) ? 1 : 0);
log(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
console.log(`workbench: ${passed} passed, ${nfail} failed`);
process.exit(nfail ? 1 : 0);
