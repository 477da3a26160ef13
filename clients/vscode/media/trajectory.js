// The trajectory webview's script: the run tree (tokens, latency, cost on runs and calls;
// path:line links in answers and outputs) and a timeline of the tree. Data comes in
// "update" messages from the extension (see panels.ts); DOM nodes only, never innerHTML.
// @ts-check
(function () {
  // eslint-disable-next-line no-undef
  const vscode = acquireVsCodeApi();
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const open = new Set(JSON.parse(sessionStorage.getItem("open") || "[]"));
  const money = (c) => {
    const v = Number(c || 0);
    if (!v) return "$0";
    if (v >= 1) return "$" + v.toFixed(2);
    return v >= 0.001 ? "$" + v.toFixed(4) : "$" + v.toFixed(6);
  };
  const toks = (n) => {
    const v = Math.trunc(Number(n || 0));
    return v < 1000 ? String(v) : v < 1e6 ? (v / 1000).toFixed(1) + "k" : (v / 1e6).toFixed(1) + "M";
  };
  const secs = (s) => (s === undefined || s === null ? "-" : s < 10 ? s.toFixed(1) + "s" : Math.round(s) + "s");
  const totals = (u) => {
    const t = (u && (u.total || u)) || {};
    return { cost: t.cost_usd || 0, tin: t.input_tokens || 0, tout: t.output_tokens || 0, wall: u && u.wall_time_s };
  };
  function details(id, summaryText, cls, defaultOpen) {
    const d = el("details", cls);
    d.dataset.id = id;
    d.open = open.has(id) || (defaultOpen && !open.has("closed:" + id));
    d.addEventListener("toggle", () => {
      if (d.open) {
        open.add(id);
        open.delete("closed:" + id);
      } else {
        open.delete(id);
        open.add("closed:" + id);
      }
      sessionStorage.setItem("open", JSON.stringify([...open]));
    });
    d.appendChild(el("summary", "", summaryText));
    return d;
  }
  function segments(parent, segs, text) {
    if (!segs) {
      parent.textContent = text;
      return;
    }
    for (const s of segs) {
      if (typeof s === "string") {
        parent.appendChild(document.createTextNode(s));
        continue;
      }
      const a = el("a", "file-link", s.text);
      a.title = "Open " + s.path + (s.line ? ":" + s.line : "");
      a.addEventListener("click", () => vscode.postMessage({ type: "open", path: s.path, line: s.line, column: s.column }));
      parent.appendChild(a);
    }
  }
  function pre(label, text, cls, segs) {
    const w = el("div");
    w.appendChild(el("div", "label", label));
    const p = el("pre", cls || "");
    segments(p, segs, text);
    w.appendChild(p);
    return w;
  }
  function nodeLabel(n) {
    if (n.kind === "iteration") return "iteration " + ((n.index || 0) + 1) + (n.state === "running" ? " …" : "");
    if (n.kind === "model_call")
      return (
        (n.role || "model") + " call " + (n.model ? "(" + n.model + ") " : "") +
        (n.input_tokens !== undefined ? toks(n.input_tokens) + "→" + toks(n.output_tokens) + " tok · " + money(n.cost_usd) + " · " + secs(n.latency_s) : "…")
      );
    if (n.kind === "cell") {
      const l = (n.code || "").split("\n").find((x) => x.trim() && !x.startsWith("_n = len(context)")) || "";
      return "cell " + ((n.index || 0) + 1) + (n.error ? " ✗ " : ": ") + l.slice(0, 80);
    }
    return n.kind;
  }
  function renderNode(n) {
    const d = details(n.id, nodeLabel(n), "node node-" + n.kind, n.kind === "iteration");
    if (n.code) d.appendChild(pre("code", n.code, "code"));
    if (n.response) d.appendChild(pre("response", n.response));
    if (n.stdout) d.appendChild(pre("stdout", n.stdout, "stdout", n.stdout_segments));
    if (n.stderr) d.appendChild(pre("stderr", n.stderr, "err"));
    if (n.error) d.appendChild(pre("error", n.error, "err"));
    for (const c of n.children || []) d.appendChild(renderNode(c));
    for (const r of n.runs || []) d.appendChild(renderRun(r));
    return d;
  }
  function renderRun(r) {
    const t = totals(r.usage);
    const d = details(
      r.id,
      "run " + r.id.slice(0, 8) + " · depth " + r.depth + " · " + r.status + " · " + toks(t.tin) + "/" + toks(t.tout) + " tok · " +
        money(t.cost) + (t.wall !== undefined ? " · " + secs(t.wall) : "") + " · " + (r.question || "").split("\n")[0].slice(0, 80),
      "run status-" + r.status,
      true,
    );
    if (r.note) d.appendChild(el("div", "note", r.note));
    for (const n of r.nodes || []) d.appendChild(renderNode(n));
    for (const c of r.runs || []) d.appendChild(renderRun(c));
    if (r.answer !== undefined && r.answer !== null)
      d.appendChild(pre(r.answer_source === "extraction" ? "partial answer" : "answer", r.answer, "answer", r.answer_segments));
    if (r.error) d.appendChild(pre("error", r.error, "err"));
    return d;
  }
  function renderTimeline(rows) {
    const box = document.getElementById("timeline");
    box.replaceChildren();
    const span = Math.max(0.001, ...rows.map((r) => r.end));
    for (const r of rows) {
      if (r.kind === "model_call" && rows.length > 60) continue; // keep big trees readable
      const row = el("div", "bar-row timeline-row");
      const label = el("div", "bar-label", "\u00a0".repeat(r.depth * 2) + r.label);
      label.title = r.label;
      const track = el("div", "bar-track");
      const bar = el("div", "bar kind-" + r.kind + (r.error ? " error" : ""));
      bar.style.left = (100 * r.start) / span + "%";
      bar.style.width = Math.max(0.3, (100 * (r.end - r.start)) / span) + "%";
      bar.title = secs(r.end - r.start) + " · " + toks(r.tokens) + " tok · " + money(r.cost_usd);
      track.appendChild(bar);
      row.appendChild(label);
      row.appendChild(track);
      row.appendChild(el("span", "badge", secs(r.end - r.start) + " · " + toks(r.tokens) + " tok · " + money(r.cost_usd)));
      box.appendChild(row);
    }
  }
  window.addEventListener("message", (ev) => {
    const m = ev.data;
    if (!m || m.type !== "update") return;
    const root = m.root;
    const tree = document.getElementById("tree");
    document.getElementById("title").textContent = "Trajectory " + (root ? root.id.slice(0, 8) : "");
    document.getElementById("summary").textContent = m.summary || "no data";
    document.getElementById("note").textContent = m.note || "";
    renderTimeline(m.rows || []);
    tree.replaceChildren();
    if (root) tree.appendChild(renderRun(root));
  });
  vscode.postMessage({ type: "ready" });
})();
