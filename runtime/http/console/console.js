// The Astraeus console: plain JavaScript, no framework, no build step.
// Signs in with an API token (kept in sessionStorage, sent as
// "Authorization: Bearer" to the API), then draws the page the address
// names: /o/<org>/compute/gpus, /o/<org>/machines,
// /o/<org>/machines/<machine>/gpus/<uuid> (its charts: gpu_history.js),
// /o/<org>/w/<workspace>/validation (validation.js), /o/<org>/compute/topology
// (topology.js), /o/<org>/jobs, /o/<org>/w/<workspace>/jobs/<cluster>/<run>,
// /o/<org>/audit and the Machines page's Add machine (runs.js) (also under
// /console/...).
"use strict";

const ORG = document.querySelector('meta[name="astraeus-organization"]').content;
const CLUSTER = document.querySelector('meta[name="astraeus-cluster"]').content;
const API = "/api/v1/orgs/" + encodeURIComponent(ORG) + "/clusters/" + encodeURIComponent(CLUSTER);
const TOKEN_KEY = "astraeus.token";
const HEALTH_WORDS = {
  Healthy: "Healthy", Faulty: "Faulty", AtRisk: "At risk", Foreign: "Used outside Astraeus",
};
const main = document.getElementById("main");
let role = "";
let refreshTimer = 0;
// Whether an address's #do= clicks buttons: only where the controller serves
// plain HTTP on loopback (dev, the browser test), never over TLS, where a link
// would act without the person's confirmation.
const ADDRESS_ACTIONS =
  (document.querySelector('meta[name="astraeus-address-actions"]') || {}).content === "on";
// Set by an address with #do=clear-fault (address actions on): the
// confirmation was given there.
let confirmedByAddress = false;

// -- small helpers -------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return e;
}

function show(...nodes) {
  main.replaceChildren(...nodes.flat().filter((n) => n !== "" && n !== null && n !== undefined));
}

function num(x) {
  return x === undefined || x === null || x === "" ? undefined : Number(x);
}

function bytes(x) {
  const n = num(x);
  if (n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + units[i];
}

function when(ms) {
  const n = num(ms);
  return n ? new Date(n).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "—";
}

function isAdmin() {
  return role === "owner" || role === "admin";
}

function base() {
  return "/o/" + encodeURIComponent(ORG);
}

// The run a worker belongs to: "train-0" -> "train", "a/b/0" -> "a/b".
function runOf(holder) {
  return holder.replace(/[-/.]\d+$/, "");
}

// A colour per run, the same on every page and every load.
function holderColour(holder) {
  let h = 0;
  for (const c of runOf(holder)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return "hsl(" + (h % 360) + ", 62%, 48%)";
}

// -- the API ---------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, send) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Authorization: "Bearer " + token, Accept: "application/json" };
  if (send !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(API + path, {
    method, headers, body: send === undefined ? undefined : JSON.stringify(send),
  });
  const text = await res.text();
  let body = {};
  try { body = text ? JSON.parse(text) : {}; } catch (e) { body = { message: text }; }
  if (!res.ok) throw new ApiError(res.status, body.code || "", body.message || res.statusText);
  return body;
}

function failed(err) {
  if (err instanceof ApiError && err.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    signIn("Your token was not accepted: " + err.message);
    return;
  }
  show(el("p", { class: "error", id: "error", text: err.message || String(err) }));
}

// -- sign in -----------------------------------------------------------------------

function signIn(message) {
  document.getElementById("nav").hidden = true;
  const input = el("input", { type: "password", id: "token", autocomplete: "off",
                              placeholder: "asta_…", "aria-label": "API token" });
  const form = el("form", { class: "sign-in", id: "sign-in" },
    el("h1", { text: "Sign in to " + ORG }),
    el("label", { for: "token", text: "API token (astra api-tokens create)" }),
    input,
    el("button", { type: "submit", text: "Sign in" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    start();
  });
  show(message ? el("p", { class: "error", text: message }) : "", form);
}

// -- Compute -> GPUs -----------------------------------------------------------------

function healthClass(h) {
  return "health-" + (HEALTH_WORDS[h] ? h.toLowerCase() : "unknown");
}

function gpuTitle(v) {
  const g = v.gpu || {};
  const parts = [(g.index !== undefined ? "GPU " + g.index + " " : "") + (g.model || g.id),
                 HEALTH_WORDS[v.health] || v.health || "unknown health"];
  for (const r of v.health_reasons || []) parts.push(r);
  parts.push(v.holder ? "held by " + v.holder : "free");
  const util = num(g.utilization_percent);
  if (util !== undefined) parts.push(util + " % busy");
  return parts.join(" · ");
}

function gpuSquare(v) {
  const g = v.gpu || {};
  const util = num(g.utilization_percent);
  const striped = !!v.holder && util !== undefined && util < 5;
  const a = el("a", {
    class: "gpu " + healthClass(v.health) + (v.holder ? " held" : "") + (striped ? " striped" : ""),
    href: base() + "/machines/" + encodeURIComponent(v.machine) + "/gpus/" + encodeURIComponent(g.id),
    title: gpuTitle(v), "data-uuid": g.id, "data-health": v.health,
    "data-holder": v.holder || "", "aria-label": gpuTitle(v),
  });
  if (v.health === "Healthy" && v.holder) a.style.backgroundColor = holderColour(v.holder);
  return a;
}

function legend() {
  const row = (cls, word, meaning) =>
    el("tr", {}, el("td", {}, el("span", { class: "gpu " + cls })), el("td", { text: word }),
       el("td", { text: meaning }));
  return el("table", { class: "legend", id: "legend" },
    el("tr", {}, el("th", {}), el("th", { text: "Health" }), el("th", { text: "Meaning" })),
    row("health-healthy", "Healthy", "Usable."),
    row("health-faulty", "Faulty", "Fenced: never assigned until the fault is cleared."),
    row("health-atrisk", "At risk", "Usable, avoided by new work while healthy GPUs are free."),
    row("health-foreign", "Used outside Astraeus", "Memory in use by something Astraeus did not start."),
    row("held-example", "Held", "Healthy and held by a run's worker: one colour per run (below the squares)."),
    row("held-example striped", "Striped", "Held by work but nearly idle (below 5 % busy)."));
}

// The machines a workspace can see (gpus.md: "Compute → GPUs in a
// workspace shows every GPU the workspace can see"): those carrying every
// label it was granted; null for every machine (the default workspace, or
// one granted no labels). Throws naming a workspace that does not exist.
async function machinesSeenBy(workspace) {
  if (!workspace || workspace === "default") return { names: null, grants: "" };
  const all = (await api("GET", "/workspaces")).workspaces || [];
  const ws = all.find((w) => w.name === workspace);
  if (!ws) throw new Error("no workspace named " + workspace + " (astra workspaces lists them)");
  const grants = Object.entries(ws.grants || {});
  if (grants.length === 0) return { names: null, grants: "" };
  const nodes = (await api("GET", "/nodes")).machines || [];
  const names = new Set(nodes.filter((m) => grants.every(([k, v]) => (m.labels || {})[k] === v))
                             .map((m) => m.name));
  return { names, grants: grants.map(([k, v]) => k + "=" + v).join(", ") };
}

async function gpusPage(workspace) {
  const [all, seen] = await Promise.all([api("GET", "/gpus"), machinesSeenBy(workspace)]);
  const list = (all.gpus || []).filter((v) => !seen.names || seen.names.has(v.machine));
  const byMachine = new Map();
  for (const v of list) {
    if (!byMachine.has(v.machine)) byMachine.set(v.machine, []);
    byMachine.get(v.machine).push(v);
  }
  const machines = [...byMachine.keys()].sort();
  const holders = [...new Set(list.filter((v) => v.holder).map((v) => runOf(v.holder)))].sort();
  const sections = machines.map((m) => {
    const gpus = byMachine.get(m).sort((a, b) => (num(a.gpu.index) || 0) - (num(b.gpu.index) || 0));
    return el("section", { class: "machine", "data-machine": m },
      el("h2", {}, el("a", { href: base() + "/machines/" + encodeURIComponent(m), text: m }),
         el("span", { class: "muted", text: " · " + gpus.length + " GPU" + (gpus.length === 1 ? "" : "s") })),
      el("div", { class: "squares" }, gpus.map(gpuSquare)));
  });
  const holderKey = holders.length === 0 ? el("p", { class: "muted", text: "No GPU is held by work." })
    : el("p", { class: "holders", id: "holders" }, "Held by: ",
         holders.map((h) => {
           const s = el("span", { class: "gpu" });
           s.style.backgroundColor = holderColour(h);
           return el("span", { class: "holder" }, s, h + "  ");
         }));
  show(el("h1", { text: "GPUs" }),
       el("p", { class: "muted", id: "gpus-scope",
                 text: list.length + " GPUs on " + machines.length + " machine"
                       + (machines.length === 1 ? "" : "s") + " in " + CLUSTER
                       + (seen.names ? " that workspace " + workspace + " can see (machines labelled "
                                       + seen.grants + ")" : "") }),
       list.length ? sections
         : el("p", { class: "muted", text: seen.names
             ? "No GPU is on a machine labelled " + seen.grants + ": label machines so (astra label NAME "
               + seen.grants.split(", ").join(" ") + ")."
             : "No GPUs yet: add a machine." }),
       holderKey, el("h2", { text: "Legend" }), legend());
}

// -- Machines --------------------------------------------------------------------------

function conditionsOf(m) {
  const conds = ((m.facts || {}).gpus || {}).conditions || [];
  const out = conds.map((c) => (c.status ? "✓ " : "✗ ") + c.type + ": " + c.reason
                              + (c.message ? " (" + c.message + ")" : ""));
  for (const r of m.pressure_reasons || []) out.push("✗ " + r);
  return out.length ? out.map((t) => el("div", { text: t })) : "—";
}

async function setCordon(name, on) {
  try {
    await api("POST", "/nodes/" + encodeURIComponent(name) + (on ? "/cordon" : "/uncordon"));
    await machinesPage();
  } catch (err) { failed(err); }
}

// machines.md, "Where a machine keeps data": an organisation admin chooses
// it on the machine's row (PUT /nodes/NAME/data-location), as `astra machine
// data-location NAME PATH` does; the API's error names a bad path.
async function setDataLocation(name, path) {
  try {
    await api("PUT", "/nodes/" + encodeURIComponent(name) + "/data-location", { path });
    await machinesPage();
  } catch (err) { failed(err); }
}

function dataLocationCell(m) {
  const cell = el("td", { class: "data-location", id: "data-location-" + m.name,
                          text: m.data_location ? m.data_location + " (" + m.data_location_source + ")"
                                                : "Choose where to keep data on " + m.name });
  if (!isAdmin()) return cell;
  const input = el("input", { type: "text", id: "data-location-path-" + m.name, size: "18",
                              value: m.data_location || "", placeholder: "/mnt/nvme0/astraeus",
                              "aria-label": "Data location of " + m.name });
  cell.append(el("div", {}, input,
    el("button", { type: "button", id: "set-data-location-" + m.name, text: "Set",
                   onclick: () => setDataLocation(m.name, input.value.trim()) })));
  return cell;
}

// The quick check's badge (bring-up seed: "a bad driver, a GPU off the bus or
// an unanswering NVML shows at once as a badge"), as `astra machines` shows
// it; its title says why.
function quickBadge(m) {
  if (!m.quick) return "";
  return el("span", { class: "badge quick-" + m.quick, id: "quick-" + m.name,
                      title: m.quick_summary || "", text: "quick " + m.quick });
}

function machineRow(m) {
  const facts = m.facts || {};
  const labels = Object.entries(m.labels || {}).filter(([k]) => k !== "pool")
    .map(([k, v]) => k + "=" + v).join(", ");
  const gpus = (facts.gpus || {}).gpus || [];
  const models = [...new Set(gpus.map((g) => g.model))].join(", ");
  const action = !isAdmin() ? "" : m.cordoned
    ? el("button", { type: "button", id: "uncordon-" + m.name, onclick: () => setCordon(m.name, false), text: "Uncordon" })
    : el("button", { type: "button", id: "cordon-" + m.name, onclick: () => setCordon(m.name, true), text: "Cordon" });
  return el("tr", { id: "machine-" + m.name, "data-state": m.state, "data-cordoned": m.cordoned ? "true" : "false" },
    el("td", {}, el("strong", {}, el("a", { href: base() + "/machines/" + encodeURIComponent(m.name),
                                            text: m.name }))),
    el("td", {}, el("span", { class: "badge " + m.state, text: m.state || "—" }),
       m.cordoned ? el("span", { class: "badge Cordoned", text: "Cordoned" }) : "", quickBadge(m)),
    el("td", { text: (m.labels || {}).pool || "—" }),
    el("td", { text: labels || "—" }),
    el("td", { text: gpus.length ? gpus.length + " × " + models : "none" },
       el("div", { class: "muted", text: (facts.gpus || {}).read_as || "" })),
    el("td", { text: ((facts.cpu || {}).logical_cpus || "—") + " CPUs" }),
    el("td", { text: bytes((facts.memory || {}).total_bytes) }),
    dataLocationCell(m),
    el("td", {}, conditionsOf(m)),
    el("td", {}, action));
}

async function machinesPage() {
  const list = (await api("GET", "/nodes")).machines || [];
  const head = ["Machine", "State", "Pool", "Labels", "GPUs", "CPU", "Memory", "Data location",
                "Conditions", ""];
  show(el("h1", { text: "Machines" }), addMachineButton(),
       list.length === 0 ? el("p", { class: "muted", text: "No machines yet." })
         : el("table", { id: "machines" }, el("tr", {}, head.map((h) => el("th", { text: h }))),
              list.map(machineRow)));
}

// -- A GPU's page ---------------------------------------------------------------------------

function fact(dt, dd, id) {
  return [el("dt", { text: dt }), el("dd", { id, text: dd })];
}

async function clearFault(v) {
  const g = v.gpu;
  const ask = "Clear the fault of " + g.id + " on " + v.machine + "?\n\n"
    + "Clear a fault only after the GPU was reset or replaced. If the fault comes back, the GPU is fenced again.";
  if (!confirmedByAddress && !window.confirm(ask)) return;
  confirmedByAddress = false;
  try {
    const r = await api("POST", "/nodes/" + encodeURIComponent(v.machine) + "/gpus/"
                                + encodeURIComponent(g.id) + "/clear-fault");
    await gpuPage(v.machine, g.id, r.cleared ? "Fault cleared." : "No fault was latched for this GPU.");
  } catch (err) { failed(err); }
}

function latchesTable(latches) {
  if (!latches.length) return el("p", { class: "muted", id: "faults", text: "No fault latched." });
  return el("table", { id: "faults" },
    el("tr", {}, ["Fault", "Source", "Evidence", "First seen", "Count"].map((h) => el("th", { text: h }))),
    latches.map((l) => el("tr", { class: "latch" }, el("td", { text: l.reason }), el("td", { text: l.source }),
                          el("td", { text: l.evidence || "" }), el("td", { text: when(l.first_seen_unix_ms) }),
                          el("td", { text: String(l.count || 1) }))));
}

// The GPU's NVLink links, one row each, as NVML reports them: state, the
// device at the other end, and the link's error counters ("—" where the
// driver gave none).
function nvlinkTable(links) {
  if (!links.length) return el("p", { class: "muted", id: "nvlinks", text: "No NVLink reported." });
  const count = (x) => (x === undefined || x === null ? "—" : String(x));
  const peer = (l) => (l.remote_kind && l.remote_kind !== "unknown" ? l.remote_kind + " " : "")
                      + (l.remote_pci_address || "");
  return el("table", { id: "nvlinks" },
    el("tr", {}, ["Link", "State", "Other end", "Replay errors", "Recovery errors", "CRC errors"]
                   .map((h) => el("th", { text: h }))),
    links.map((l) => el("tr", { class: "nvlink" + (l.active ? "" : " down"), id: "nvlink-" + (l.link || 0),
                               "data-active": String(!!l.active) },
                        el("td", { text: String(l.link || 0) }), el("td", { text: l.active ? "Active" : "Down" }),
                        el("td", { text: peer(l) || "—" }), el("td", { text: count(l.replay_errors) }),
                        el("td", { text: count(l.recovery_errors) }), el("td", { text: count(l.crc_errors) }))));
}

// "18 links, 1 down, 12 CRC errors": the GPU page's NVLink fact.
function nvlinkSummary(links) {
  if (!links.length) return "—";
  const down = links.filter((l) => !l.active).length;
  const crc = links.reduce((sum, l) => sum + Number(l.crc_errors || 0), 0);
  return links.length + " links" + (down ? ", " + down + " down" : ", all active")
         + (crc ? ", " + crc + " CRC errors" : "");
}

async function gpuPage(machine, uuid, notice) {
  const v = await api("GET", "/nodes/" + encodeURIComponent(machine) + "/gpus/" + encodeURIComponent(uuid));
  const g = v.gpu || {};
  const latches = g.latches || [];
  const util = num(g.utilization_percent);
  const links = g.nvlinks || [];
  const button = isAdmin() && latches.length
    ? el("button", { type: "button", class: "danger", id: "clear-fault", text: "Clear fault",
                     onclick: () => clearFault(v) }) : "";
  const history = await gpuHistorySection(machine, g.id || uuid);
  show(el("h1", { text: (g.model || "GPU") + " · " + machine }),
       notice ? el("p", { class: "notice", id: "notice", text: notice }) : "",
       el("dl", { class: "facts", id: "gpu" },
          fact("UUID", g.id, "gpu-uuid"),
          fact("Model", g.model || "—", "gpu-model"),
          fact("Health", (HEALTH_WORDS[v.health] || v.health) + ((v.health_reasons || []).length
               ? ": " + v.health_reasons.join("; ") : ""), "gpu-health"),
          fact("Held by", v.holder || "free", "gpu-holder"),
          fact("Utilisation", util === undefined ? "—" : util + " %", "gpu-util"),
          fact("Memory", bytes(g.memory_used_bytes) + " of " + bytes(g.memory_total_bytes), "gpu-memory"),
          fact("Power", (num(g.power_watts) === undefined ? "—" : num(g.power_watts).toFixed(0) + " W")
               + (num(g.power_limit_watts) ? " of " + num(g.power_limit_watts).toFixed(0) + " W" : ""), "gpu-power"),
          fact("Temperature", num(g.temperature_c) === undefined ? "—" : g.temperature_c + " °C", "gpu-temp"),
          fact("Clocks", (g.sm_clock_mhz || "—") + " MHz SM, " + (g.memory_clock_mhz || "—") + " MHz memory", "gpu-clocks"),
          fact("NVLink", nvlinkSummary(links), "gpu-nvlink"),
          fact("PCI", g.pci_address || "—", "gpu-pci"),
          fact("Last seen", when(v.last_seen_unix_ms) + (v.machine_up ? "" : " (machine not Up: last known)"), "gpu-seen")),
       history,
       el("h2", { text: "Latched faults" }), latchesTable(latches), button,
       el("h2", { text: "NVLink" }), nvlinkTable(links),
       el("p", {}, el("a", { href: base() + "/compute/gpus", text: "← All GPUs" })));
  return v;
}

// -- routing ----------------------------------------------------------------------------------

// The page's path without its /o/<org> (and /w/<workspace>) or /console
// prefix, and the workspace it names ("" when none).
function route() {
  let p = location.pathname;
  let workspace = "";
  const o = p.match(/^\/o\/([^/]+)(\/w\/([^/]+))?/);
  if (o) {
    if (decodeURIComponent(o[1]) !== ORG) return { org: decodeURIComponent(o[1]) };
    p = p.slice(o[0].length);
    if (o[3]) workspace = decodeURIComponent(o[3]);
  } else if (p.startsWith("/console")) {
    p = p.slice("/console".length);
  }
  return { path: p.replace(/\/+$/, "") || "/compute/gpus", workspace };
}

function markNav(which) {
  document.getElementById("nav-gpus").href = base() + "/compute/gpus";
  document.getElementById("nav-machines").href = base() + "/machines";
  document.getElementById("nav-validation").href = base() + "/w/default/validation?cluster="
                                                    + encodeURIComponent(CLUSTER);
  document.getElementById("nav-topology").href = base() + "/compute/topology";
  document.getElementById("nav-runs").href = base() + "/jobs";
  document.getElementById("nav-audit").href = base() + "/audit";
  for (const id of ["nav-gpus", "nav-machines", "nav-validation", "nav-topology", "nav-runs",
                    "nav-audit"])
    document.getElementById(id).classList.toggle("current", id === which);
}

// Parameters after '#': token=<API token> signs in; do=<button id> (see
// draw). Both leave the address once read, so a reload, a bookmark or Back
// does not sign in or act again.
function fragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("token"))
    sessionStorage.setItem(TOKEN_KEY, params.get("token"));
  if (params.has("token") || params.has("do")) {
    const rest = new URLSearchParams(params);
    rest.delete("token");
    rest.delete("do");
    const left = rest.toString();
    history.replaceState(null, "", location.pathname + location.search + (left ? "#" + left : ""));
  }
  params.delete("token");
  return params;
}

async function draw(r, params) {
  const path = r.path;
  let m;
  if (path === "/compute/gpus" || path === "/gpus") {
    markNav("nav-gpus");
    await gpusPage(r.workspace);
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => draw(r, new URLSearchParams()).catch(failed), 10000);
  } else if (path === "/machines") {
    markNav("nav-machines");
    await machinesPage();
  } else if (path === "/jobs") {
    // runs.js: every run; a run's page is the address `astra run` prints.
    markNav("nav-runs");
    await runsPage();
  } else if ((m = path.match(/^\/jobs\/[^/]+\/([^/]+)$/))) {
    markNav("nav-runs");
    await runPage(decodeURIComponent(m[1]),
                  Number(new URLSearchParams(location.search).get("worker") || 0), r.workspace);
  } else if (path === "/audit") {
    markNav("nav-audit");
    await auditPage();
  } else if (path === "/compute/topology") {
    // topology.js (issue 12): the findings, the fabrics, what was not checked.
    markNav("nav-topology");
    await topologyPage();
  } else if (path === "/validation") {
    // validation.js (issue 21): /o/<org>/w/<workspace>/validation?cluster=&validation=
    markNav("nav-validation");
    await validationPage();
  } else if ((m = path.match(/^\/machines\/([^/]+)$/))) {
    // topology.js: one machine, its ports and their cabling, its findings.
    markNav("nav-machines");
    await machinePage(decodeURIComponent(m[1]));
  } else if ((m = path.match(/^\/machines\/([^/]+)\/gpus\/([^/]+)$/))) {
    markNav("nav-gpus");
    await gpuPage(decodeURIComponent(m[1]), decodeURIComponent(m[2]));
  } else {
    show(el("h1", { text: "No such page" }), el("p", { id: "error", text: location.pathname }),
         el("p", {}, el("a", { href: base() + "/compute/gpus", text: "Compute → GPUs" })));
    return;
  }
  // #do=<button id> clicks that button once, as a person would (the
  // browser test's way in); for Clear fault and Cancel validation the
  // address is the confirmation.
  // Several ids ("do=add-machine,get-install-command") click in turn, each
  // once it has appeared (within 3 s).
  for (const id of (ADDRESS_ACTIONS ? params.get("do") || "" : "").split(",").filter(Boolean)) {
    let button = document.getElementById(id);
    for (let i = 0; !button && i < 60; i++) {
      await new Promise((done) => setTimeout(done, 50));
      button = document.getElementById(id);
    }
    if (!button || button.tagName !== "BUTTON") break;
    confirmedByAddress = button.id === "clear-fault" || button.id === "cancel-validation";
    button.click();
  }
}

async function start() {
  const params = fragment();
  const r = route();
  if (r.org !== undefined) {
    show(el("h1", { text: "No such organisation" }),
         el("p", { id: "error", text: "No organisation named " + r.org + " (this controller serves " + ORG + ")." }));
    return;
  }
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    signIn();
    return;
  }
  try {
    const me = await api("GET", "/whoami");
    role = me.role || "";
    document.getElementById("who").textContent = me.name + " (" + role + ")";
    document.getElementById("nav").hidden = false;
    await draw(r, params);
  } catch (err) { failed(err); }
}

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  signIn();
});
start();
