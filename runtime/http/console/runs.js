// The console's Runs, a run's page, Audit and Add machine (issue 19; the
// seeds' addresses): /o/<org>/jobs (every run), /o/<org>/w/<workspace>/jobs/
// <cluster>/<run> (the page `astra run` prints: its workers and their logs,
// followed while they run), /o/<org>/audit (admins), and the Machines page's
// "Add machine" (machines.md, "Create one": set the pool, "Get the install
// command" — a join token valid 24 h — copy it, and "Machine <name>
// connected." when it registers). Loaded before console.js, whose helpers
// (el, api, show, failed, when, isAdmin, base) it uses.
"use strict";

let logTimer = 0;

function runLink(run) {
  const ws = run.spec.workspace || "default";
  return base() + "/w/" + encodeURIComponent(ws) + "/jobs/" + encodeURIComponent(CLUSTER) + "/"
         + encodeURIComponent(run.spec.name);
}

// A run's key (issue 13: names are per workspace): its name in the default
// workspace, "<workspace>/<name>" in any other, so two workspaces' runs of
// one name get rows of their own.
function runKey(run) {
  const ws = run.spec.workspace || "default";
  return ws === "default" ? run.spec.name : ws + "/" + run.spec.name;
}

async function runsPage() {
  const runs = (await api("GET", "/runs")).runs || [];
  const head = ["Run", "Workspace", "State", "Workers", "Submitted", "Why it waits"];
  show(el("h1", { text: "Runs" }),
       runs.length === 0 ? el("p", { class: "muted", id: "runs", text: "No runs yet." })
         : el("table", { id: "runs" }, el("tr", {}, head.map((h) => el("th", { text: h }))),
              runs.map((r) => el("tr", { id: "run-" + runKey(r) },
                el("td", {}, el("a", { href: runLink(r), text: r.spec.name })),
                el("td", { text: r.spec.workspace || "default" }),
                el("td", { class: "state-" + String(r.state || "").toLowerCase(), text: r.state }),
                el("td", { text: String((r.workers || []).length) }),
                el("td", { text: when(r.submitted_unix_ms) }),
                el("td", { class: "muted", text: r.waiting_reason || r.gpu_fault || "" })))));
}

// The API's query for a run of `workspace` (issue 13: names are per
// workspace; "" = the default workspace, else the only one).
function inWorkspace(workspace) {
  return workspace ? "workspace=" + encodeURIComponent(workspace) : "";
}

// Appends what worker `rank` of `run` (in `workspace`) wrote since
// `offset`, then again every 2 s while it runs (the log's next offset is
// the API's).
async function followLog(run, rank, offset, workspace) {
  clearTimeout(logTimer);
  const pre = document.getElementById("logs");
  if (!pre) return;
  try {
    const ws = inWorkspace(workspace);
    const chunk = await api("GET", "/runs/" + encodeURIComponent(run) + "/logs?worker=" + rank
                                   + "&offset=" + offset + (ws ? "&" + ws : ""));
    // LogChunk.data is bytes: base64 in the API's JSON.
    if (chunk.data)
      pre.textContent += new TextDecoder().decode(Uint8Array.from(atob(chunk.data), (c) => c.charCodeAt(0)));
    if (!chunk.finished)
      logTimer = setTimeout(
        () => followLog(run, rank, Number(chunk.next_offset || offset), workspace), 2000);
    else document.getElementById("logs-state").textContent = "The worker has ended.";
  } catch (err) {
    document.getElementById("logs-state").textContent = "No log: " + err.message;
  }
}

// An array's copies: how many were placed and how those that ended ended,
// naming each that did not complete (Run.copy_ends).
function copiesText(r) {
  const ends = r.copy_ends || [];
  let text = (r.copies_placed || 0) + " of " + r.spec.array_size + " placed";
  if (ends.length === 0) return text;
  const done = ends.filter((e) => e.state !== "Failed" && (e.reason || "").startsWith("completed"));
  text += ", " + ends.length + " ended (" + done.length + " completed)";
  for (const e of ends.filter((e) => !done.includes(e)))
    text += "; " + r.spec.name + "[" + (e.copy || 0) + "] " + e.state + ": " + e.reason;
  return text;
}

async function runPage(name, rank, workspace) {
  const ws = inWorkspace(workspace);
  const r = await api("GET", "/runs/" + encodeURIComponent(name) + (ws ? "?" + ws : ""));
  const ended = r.state === "Stopped" || r.state === "Failed";
  const workers = r.workers || [];
  const head = ["Worker", "Rank", "Machine", "GPUs", "State", "PID"];
  show(el("h1", { text: r.spec.name }),
       el("dl", { class: "facts", id: "run" },
          el("dt", { text: "State" }), el("dd", { id: "run-state", text: r.state }),
          el("dt", { text: "Image" }), el("dd", { text: r.spec.image || "(host process)" }),
          el("dt", { text: "Submitted" }), el("dd", { text: when(r.submitted_unix_ms) }),
          r.waiting_reason ? [el("dt", { text: ended ? "Why it ended" : "Why it waits" }),
                              el("dd", { id: "run-waiting", text: r.waiting_reason })] : "",
          r.spec.array_size ? [el("dt", { text: "Copies" }), el("dd", { id: "run-copies", text: copiesText(r) })] : "",
          r.gpu_fault ? [el("dt", { text: "GPU fault" }), el("dd", { id: "run-gpu-fault", text: r.gpu_fault })] : "",
          r.master_addr ? [el("dt", { text: "MASTER_ADDR" }), el("dd", { text: r.master_addr })] : ""),
       el("h2", { text: "Workers" }),
       workers.length === 0 ? el("p", { class: "muted", id: "workers", text: "No worker placed yet." })
         : el("table", { id: "workers" }, el("tr", {}, head.map((h) => el("th", { text: h }))),
              workers.map((w) => el("tr", { id: "worker-" + w.rank },
                el("td", {}, el("a", { href: location.pathname + "?worker=" + w.rank, text: w.name || String(w.rank) })),
                el("td", { text: String(w.rank || 0) }), el("td", { text: w.machine }),
                el("td", { text: (w.gpu_ids || []).join(", ") || "—" }),
                el("td", { text: w.state }), el("td", { text: w.pid ? String(w.pid) : "—" })))),
       el("h2", { text: "Log of worker " + rank }),
       el("p", { class: "muted", id: "logs-state", text: "Following while it runs." }),
       el("pre", { id: "logs", class: "logs" }),
       el("p", {}, el("a", { href: base() + "/jobs", text: "← All runs" })));
  if (workers.length > 0) await followLog(name, rank, 0, workspace);
}

async function auditPage() {
  const records = (await api("GET", "/audit?limit=200")).records || [];
  show(el("h1", { text: "Audit" }),
       records.length === 0 ? el("p", { class: "muted", id: "audit", text: "Nothing audited yet." })
         : el("table", { id: "audit" },
              el("tr", {}, ["When", "Who", "Action", "Target", "Result"].map((h) => el("th", { text: h }))),
              records.map((a) => el("tr", {}, el("td", { text: when(a.unix_ms) }), el("td", { text: a.who }),
                                    el("td", { text: a.action }), el("td", { text: a.target }),
                                    el("td", { text: a.result })))));
}

// Add machine (admins): a join token valid 24 h for the pool chosen, its
// install command to copy, and the new machine named once it registers.
async function addMachine() {
  const pool = el("input", { id: "add-pool", "aria-label": "pool", placeholder: "h100" });
  const out = el("div", { id: "add-result" });
  const get = async () => {
    try {
      const labels = pool.value.trim() ? { pool: pool.value.trim() } : {};
      const t = await api("POST", "/enrollment-tokens", { labels, ttl_seconds: 86400 });
      const copy = el("button", { type: "button", id: "copy-install", text: "Copy",
                                  onclick: () => navigator.clipboard && navigator.clipboard.writeText(t.install) });
      out.replaceChildren(el("p", { text: "Run this on the machine, as root (its token is valid for 24 hours"
                                         + (pool.value.trim() ? " and puts it in pool " + pool.value.trim() : "") + "):" }),
                          el("pre", { id: "install-command", text: t.install }), copy,
                          el("p", { class: "muted", id: "add-waiting", text: "Waiting for the machine to connect…" }));
      // The machine that used this token, as `astra tokens list` names it
      // (not whichever machine appeared first: a batch install, or a
      // reinstalled machine whose name is known, named the wrong one).
      const poll = async () => {
        const used = (await api("GET", "/enrollment-tokens/" + encodeURIComponent(t.id))).used_by;
        if (used)
          document.getElementById("add-waiting").textContent = "Machine " + used + " connected.";
        else setTimeout(() => poll().catch(failed), 2000);
      };
      setTimeout(() => poll().catch(failed), 2000);
    } catch (err) { out.replaceChildren(el("p", { class: "error", text: err.message })); }
  };
  document.getElementById("add-machine-dialog").replaceChildren(
    el("h2", { text: "Add machine" }),
    el("label", {}, "Pool ", pool),
    el("button", { type: "button", id: "get-install-command", text: "Get the install command", onclick: get }),
    out);
}

function addMachineButton() {
  if (!isAdmin()) return "";
  return [el("button", { type: "button", id: "add-machine", text: "Add machine",
                         onclick: () => addMachine().catch(failed) }),
          el("div", { id: "add-machine-dialog", class: "dialog" })];
}
