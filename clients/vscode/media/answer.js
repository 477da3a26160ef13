// The answer panel's webview script: the answer as Markdown (headings, lists, fenced code,
// `code`, **bold**, *em*) with the workspace's path:line references as links, a Copy button
// and a follow-up box. Built from DOM nodes only (never innerHTML): the answer is model output.
// @ts-check
(function () {
  // eslint-disable-next-line no-undef
  const vscode = acquireVsCodeApi();
  const data = JSON.parse(document.getElementById("data").textContent || "{}");
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  function linkify(parent, text) {
    let at = 0;
    while (at < text.length) {
      let best = null;
      for (const r of data.refs) {
        const i = text.indexOf(r.text, at);
        if (i >= 0 && (!best || i < best.i)) best = { i, r };
      }
      if (!best) {
        parent.appendChild(document.createTextNode(text.slice(at)));
        return;
      }
      if (best.i > at) parent.appendChild(document.createTextNode(text.slice(at, best.i)));
      const ref = best.r;
      const a = el("a", "file-link", ref.text);
      a.title = "Open " + ref.path + (ref.line ? ":" + ref.line : "");
      a.addEventListener("click", () => vscode.postMessage({ type: "open", path: ref.path, line: ref.line, column: ref.column }));
      parent.appendChild(a);
      at = best.i + ref.text.length;
    }
  }
  function inline(parent, text) {
    const re = /(`[^`]+`|\*\*[^*]+\*\*|\*[^*\s][^*]*\*)/g;
    let at = 0;
    let m;
    while ((m = re.exec(text))) {
      if (m.index > at) linkify(parent, text.slice(at, m.index));
      const t = m[0];
      const tag = t.startsWith("`") ? "code" : t.startsWith("**") ? "strong" : "em";
      const cut = tag === "strong" ? 2 : 1;
      const e = el(tag);
      linkify(e, t.slice(cut, -cut));
      parent.appendChild(e);
      at = m.index + t.length;
    }
    if (at < text.length) linkify(parent, text.slice(at));
  }
  function markdown(root, text) {
    const lines = text.split("\n");
    let list = null;
    let para = null;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.startsWith("```")) {
        list = para = null;
        const code = [];
        i++;
        while (i < lines.length && !lines[i].startsWith("```")) code.push(lines[i++]);
        const pre = el("pre");
        linkify(pre, code.join("\n"));
        root.appendChild(pre);
        continue;
      }
      const h = /^(#{1,4})\s+(.*)$/.exec(line);
      if (h) {
        list = para = null;
        const e = el("h" + Math.min(4, h[1].length + 1));
        inline(e, h[2]);
        root.appendChild(e);
        continue;
      }
      const li = /^\s*(?:[-*]|\d+[.)])\s+(.*)$/.exec(line);
      if (li) {
        para = null;
        if (!list) {
          list = el(/^\s*\d/.test(line) ? "ol" : "ul");
          root.appendChild(list);
        }
        const item = el("li");
        inline(item, li[1]);
        list.appendChild(item);
        continue;
      }
      if (!line.trim()) {
        list = para = null;
        continue;
      }
      list = null;
      if (!para) {
        para = el("p");
        root.appendChild(para);
      } else para.appendChild(document.createTextNode(" "));
      inline(para, line);
    }
  }
  const answer = document.getElementById("answer");
  if (data.answer) markdown(answer, data.answer);
  else answer.textContent = "(no answer)";
  document.getElementById("note").textContent = data.note || "";
  document.getElementById("meta").textContent = data.meta;
  document.getElementById("error").textContent = data.error || "";
  document.getElementById("question").textContent = data.question;
  document.getElementById("traj").addEventListener("click", () => vscode.postMessage({ type: "trajectory", runId: data.runId }));
  document.getElementById("copy").addEventListener("click", () => vscode.postMessage({ type: "copy" }));
  const box = /** @type {HTMLTextAreaElement} */ (document.getElementById("followup"));
  const ask = () => {
    if (box.value.trim()) {
      vscode.postMessage({ type: "followup", question: box.value });
      box.value = "";
    }
  };
  document.getElementById("ask").addEventListener("click", ask);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) ask();
  });
})();
