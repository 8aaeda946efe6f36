// The console's Validation page (issue 19/21; bring-up-a-gpu-cluster.md,
// steps 3, 4 and 6): /o/<org>/w/<workspace>/validation?cluster=<cluster>
// &validation=<id>. The Cluster Report (the same rows as `astra astraeus
// report`), "What to fix (N)", a "Run acceptance" offer while no machine is
// accepted yet, Run checks (suite and pool, then Start: POST /validations),
// Download as a printable page or JSON, and the pools' Policies; the pairs'
// matrix as a heat map and the all-reduce curve (issue 12).
// Loaded before console.js, whose helpers (el, api, show, failed, isAdmin)
// it uses when its page is drawn.
"use strict";

const REPORT_COLUMNS = [
  ["MACHINE", "machine"], ["STATE", "state"], ["VERDICT", "verdict"], ["QUICK", "quick"],
  ["DCGM", "dcgm"], ["BURN", "burn"], ["COPIES", "copies"], ["DISK", "disk"],
  ["PAIRS", "pairs"], ["ALL-REDUCE", "all_reduce"],
];
const SUITES = [["acceptance", "Acceptance"], ["quick", "Quick"], ["dcgm", "DCGM"],
                ["burn", "Burn-in"], ["copies", "Copies"], ["disk", "Disk"],
                ["network", "Network (pairs)"]];

function cell(word) {
  const w = word || "—";
  return el("td", { class: "verdict-" + String(w).toLowerCase().replace(/[^a-z]/g, ""), text: w });
}

function reportTable(report) {
  return el("table", { id: "report" },
    el("tr", {}, REPORT_COLUMNS.map(([h]) => el("th", { text: h }))),
    (report.rows || []).map((r) => el("tr", { id: "report-" + r.machine, "data-verdict": r.verdict || "" },
      REPORT_COLUMNS.map(([, k]) => (k === "machine" ? el("td", {}, el("strong", { text: r.machine }))
                                                     : cell(r[k]))))));
}

// The pairs' matrix (issue 12): each pair's bandwidth summed over its rails
// as a share of the best pair's, red at half the best or less, green at the
// best; a cell's title lists its rails. As `astra astraeus report --html`.
function pairsMatrix(report) {
  const pairs = report.pairs || [];
  if (pairs.length === 0) return "";
  const cells = new Map();
  const names = new Set();
  const key = (x, y) => (x < y ? x + "|" + y : y + "|" + x);
  for (const p of pairs) {
    names.add(p.a); names.add(p.b);
    const c = cells.get(key(p.a, p.b)) || { gbps: 0, rails: [] };
    c.gbps += p.gbps || 0;
    c.rails.push(p);
    cells.set(key(p.a, p.b), c);
  }
  const best = Math.max(...[...cells.values()].map((c) => c.gbps));
  const machines = [...names].sort();
  return [el("h2", { id: "pairs-title", text: "Pairs: % of the best pair (" + best.toFixed(1) + " Gb/s)" }),
    el("table", { id: "pairs" },
      el("tr", {}, el("th", { text: "" }), machines.map((m) => el("th", { text: m }))),
      machines.map((x) => el("tr", {}, el("th", { text: x }), machines.map((y) => {
        const c = x === y ? null : cells.get(key(x, y));
        if (!c) return el("td", { text: x === y ? "·" : "—" });
        const f = best > 0 ? c.gbps / best : 0;
        const hue = Math.round(Math.min(Math.max((f - 0.5) / 0.5, 0), 1) * 120);
        return el("td", { style: "background:hsl(" + hue + ",70%,80%)", text: Math.round(f * 100) + "%",
                          title: c.rails.map((r) => r.device + " " + (r.gbps || 0).toFixed(1) + " Gb/s of "
                            + (r.rate_gbps || 0) + " trained").join("; ") });
      }))))];
}

// The all-reduce curve (issue 12): bus bandwidth (GB/s) by message size for
// each group of machines, then the expected figure and the verdict, as
// `astra astraeus report` prints it: 1 MiB and every fourth power of two
// above it, and the largest size measured.
function allReduceCurve(report) {
  const points = report.all_reduce || [];
  if (points.length === 0) return "";
  const heading = (p) => (p.machines || 0) + " machines";
  if (!points.some((p) => (p.curve || []).length > 0)) {
    return el("p", { id: "all-reduce", text: "All-reduce: not measured (" + points.map((p) =>
      heading(p) + ": " + (p.verdict || "not run") + (p.note ? ": " + p.note : "")).join("; ") + ")" });
  }
  const all = [...new Set(points.flatMap((p) => (p.curve || []).map((c) => Number(c.bytes))))]
    .sort((a, b) => a - b);
  const MiB = 1 << 20;
  const shown = all.filter((b) => {
    const m = b / MiB;
    return b === all[all.length - 1]
      || (b >= MiB && Number.isInteger(m) && (m & (m - 1)) === 0 && Math.log2(m) % 2 === 0);
  });
  const sizeText = (b) => (b >= 1 << 30 && b % (1 << 30) === 0 ? b / (1 << 30) + " GiB"
                         : b >= MiB && b % MiB === 0 ? b / MiB + " MiB"
                         : b >= 1024 && b % 1024 === 0 ? b / 1024 + " KiB" : b + " B");
  const at = (p, b) => (p.curve || []).find((c) => Number(c.bytes) === b);
  return [el("h2", { id: "all-reduce-title", text: "All-reduce: bus bandwidth (GB/s) by message size" }),
    el("table", { id: "all-reduce" },
      el("tr", {}, el("th", { text: "SIZE" }),
         points.map((p) => el("th", { title: (p.group || []).join(", "), text: heading(p) }))),
      shown.map((b) => el("tr", {}, el("th", { text: sizeText(b) }), points.map((p) => {
        const c = at(p, b);
        return el("td", { text: c ? Number(c.busbw_gbs || 0).toFixed(1) : "—" });
      }))),
      el("tr", {}, el("th", { text: "expected" }),
         points.map((p) => el("td", { text: Number(p.expected_gbs || 0).toFixed(1) }))),
      el("tr", {}, el("th", { text: "verdict" }), points.map((p) => cell(p.verdict))))];
}

function findingsList(report) {
  const findings = report.findings || [];
  return [el("h2", { id: "fix-title", text: "What to fix (" + findings.length + ")" }),
    findings.length === 0 ? el("p", { class: "muted", id: "fix", text: "Nothing: every check passes." })
      : el("ul", { id: "fix", class: "findings" }, findings.map((f) =>
          el("li", { class: "finding-" + (f.severity || "fail") },
             el("div", { text: (f.severity === "warn" ? "! " : "✗ ") + f.what }),
             f.fix ? el("div", { class: "fix", text: "fix: " + f.fix }) : "")))];
}

// The pools the report's machines are in, from the machines' labels.
function poolsOf(machines) {
  return [...new Set(machines.map((m) => (m.labels || {}).pool).filter(Boolean))].sort();
}

function select(id, options, chosen) {
  return el("select", { id, "aria-label": id },
    options.map(([value, words]) => el("option", { value, selected: value === chosen, text: words })));
}

async function startValidation(suite, pool, note) {
  try {
    const v = await api("POST", "/validations", { suite, pool, note });
    const q = new URLSearchParams(location.search);
    q.set("validation", v.id);
    history.replaceState(null, "", location.pathname + "?" + q.toString());
    await validationPage("validation " + v.id + ": " + v.suite + " on " + (v.machines || []).join(", "));
  } catch (err) { failed(err); }
}

function offer(report, validations, pools) {
  const accepted = validations.some((v) => v.suite === "acceptance"
                                           && (v.state === "Passed" || v.state === "Warned"));
  if (accepted || !isAdmin() || pools.length === 0) return "";
  return el("section", { class: "offer", id: "offer" },
    el("p", { text: "No machine is accepted yet. Acceptance runs the GPU diagnostics, a 10-minute "
                    + "burn-in, GPU copy bandwidth and the data disk on each machine; it starts only "
                    + "while the GPUs are free and gives way within seconds to real work." }),
    el("button", { type: "button", id: "run-acceptance", text: "Run acceptance",
                   onclick: () => startValidation("acceptance", pools[0], "") }),
    el("span", { class: "muted", text: " on pool " + pools[0] }));
}

function runChecks(pools) {
  if (!isAdmin()) return "";
  const suite = select("suite", SUITES, "acceptance");
  const pool = select("pool", pools.map((p) => [p, p]), pools[0]);
  return el("section", { id: "run-checks" }, el("h2", { text: "Run checks" }),
    el("label", { text: "Suite " }), suite, el("label", { text: " Pool " }), pool, " ",
    el("button", { type: "button", id: "start", text: "Start",
                   onclick: () => startValidation(suite.value, pool.value, "") }));
}

// Cancels a running validation (admins): its checks not ended stop and
// free their GPUs; those that ended keep their results.
async function cancelValidation(v) {
  const ask = "Cancel " + v.id + " (" + v.suite + ")?\n\nIts checks that have not ended stop and "
    + "free their GPUs; those that ended keep their results.";
  // The prompt is the confirmation and asks why (kept with it and audited).
  let reason = "";
  if (!confirmedByAddress) {
    const said = window.prompt(ask + "\n\nWhy? (kept with it and in the audit log; may be empty)", "");
    if (said === null) return;
    reason = said.replace(/[\x00-\x1f]/g, " ").slice(0, 1000);
  }
  confirmedByAddress = false;
  try {
    const r = await api("DELETE", "/validations/" + encodeURIComponent(v.id)
                                  + (reason ? "?reason=" + encodeURIComponent(reason) : ""));
    await validationPage("validation " + r.id + " cancelled.");
  } catch (err) { failed(err); }
}

function validationSection(v) {
  if (!v) return "";
  const cancelled = v.state === "Cancelled"
    ? el("p", { id: "cancelled", text: "Cancelled by " + (v.cancelled_by || "an admin")
                                       + (v.cancel_reason ? " (" + v.cancel_reason + ")" : "") + "." })
    : "";
  const cancel = v.state === "Running" && isAdmin()
    ? el("button", { type: "button", id: "cancel-validation", text: "Cancel validation",
                     onclick: () => cancelValidation(v) })
    : "";
  return el("section", { id: "validation", "data-state": v.state },
    el("h2", { text: v.id + " · " + v.suite + " · " + v.state + " (" + (v.trigger || "on-demand") + ")" }),
    cancelled, cancel,
    el("table", { id: "steps" },
      el("tr", {}, ["Machine", "Check", "State", "Verdict", "Why"].map((h) => el("th", { text: h }))),
      (v.steps || []).map((s) => el("tr", {}, el("td", { text: s.peer ? s.machine + "–" + s.peer : s.machine }),
        el("td", { text: s.check }),
        el("td", { text: s.state }), cell(s.verdict), el("td", { text: stepWhy(s) })))));
}

// Why a step stands as it does: the controller's reason (a skip, a failed
// start), else what the check itself said of a verdict other than pass (a
// step the check judged keeps its words in result.summary, as `astra
// validation ID` prints them), then what a controller restart did to it
// (its run went on, or it ran again).
function stepWhy(s) {
  let why = "";
  if (s.reason) why = s.reason;
  else if (s.verdict && s.verdict !== "pass" && s.result && s.result.summary) why = s.result.summary;
  if (s.restarted && !why.includes(s.restarted)) why += (why ? "; " : "") + s.restarted;
  return why;
}

// The report as a page to print: the summary, the table, what to fix, the
// pairs' matrix and the all-reduce curve (the page's own, as drawn).
function printable(report) {
  const esc = (t) => String(t || "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  const rows = (report.rows || []).map((r) => "<tr>" + REPORT_COLUMNS.map(([, k]) =>
    "<td>" + esc(r[k] || "—") + "</td>").join("") + "</tr>").join("\n");
  const fixes = (report.findings || []).map((f) => "<li>" + esc(f.what)
    + (f.fix ? "<br>fix: " + esc(f.fix) : "") + "</li>").join("\n");
  return "<!doctype html><meta charset=\"utf-8\"><title>Cluster Report · " + esc(CLUSTER) + "</title>"
    + "<style>body{font:13px sans-serif}td,th{border-bottom:1px solid #ccc;padding:3px 8px;text-align:left}</style>"
    + "<h1>Cluster Report · " + esc(CLUSTER) + "</h1><p>" + esc(report.summary) + "</p><table><tr>"
    + REPORT_COLUMNS.map(([h]) => "<th>" + h + "</th>").join("") + "</tr>\n" + rows + "</table>"
    + "<h2>What to fix (" + (report.findings || []).length + ")</h2><ul>" + fixes + "</ul>"
    + [pairsMatrix(report), allReduceCurve(report)].flat()
      .filter((n) => n && n.outerHTML).map((n) => n.outerHTML).join("\n");
}

function downloads(report) {
  const link = (id, words, type, text, file) => el("a", {
    id, download: file, text: words,
    href: URL.createObjectURL(new Blob([text], { type })),
  });
  return el("p", { id: "download" }, "Download: ",
    link("download-html", "Printable page", "text/html", printable(report), "cluster-report.html"),
    " · ", link("download-json", "JSON", "application/json", JSON.stringify(report, null, 2),
                "cluster-report.json"));
}

async function savePolicy(pool, row) {
  try {
    await api("PUT", "/validation-policies/" + encodeURIComponent(pool), {
      require_acceptance: row.querySelector(".require").checked,
      burn_in_seconds: Number(row.querySelector(".burn").value) * 60,
      dcgm_level: Number(row.querySelector(".dcgm").value),
    });
    await validationPage("pool " + pool + ": policy saved");
  } catch (err) { failed(err); }
}

function policies(list, pools) {
  const byPool = new Map(list.map((p) => [p.pool, p]));
  const all = [...new Set([...pools, ...byPool.keys()])].sort();
  return el("section", { id: "policies" }, el("h2", { text: "Policies" }),
    all.length === 0 ? el("p", { class: "muted", text: "No pools yet: label machines pool=<name>." })
      : el("table", {},
          el("tr", {}, ["Pool", "New machines must pass acceptance", "Burn-in (min)", "DCGM level", ""]
            .map((h) => el("th", { text: h }))),
          all.map((pool) => {
            const p = byPool.get(pool) || {};
            const row = el("tr", { id: "policy-" + pool },
              el("td", { text: pool }),
              el("td", {}, el("input", { type: "checkbox", class: "require", checked: !!p.require_acceptance,
                                         disabled: !isAdmin() })),
              el("td", {}, el("input", { type: "number", class: "burn", min: "1", size: "4",
                                         value: String(Math.round((Number(p.burn_in_seconds) || 600) / 60)) })),
              el("td", {}, el("input", { type: "number", class: "dcgm", min: "1", max: "4", size: "2",
                                         value: String(p.dcgm_level || 2) })));
            row.append(el("td", {}, isAdmin() ? el("button", { type: "button", id: "save-policy-" + pool,
              text: "Save", onclick: () => savePolicy(pool, row) }) : ""));
            return row;
          })));
}

async function validationPage(notice) {
  const q = new URLSearchParams(location.search);
  const id = q.get("validation");
  const [report, list, machines, policyList, one] = await Promise.all([
    api("GET", "/report"), api("GET", "/validations"), api("GET", "/nodes"),
    api("GET", "/validation-policies"),
    id ? api("GET", "/validations/" + encodeURIComponent(id)).catch(() => null) : null,
  ]);
  const validations = list.validations || [];
  const pools = poolsOf(machines.machines || []);
  show(el("h1", { text: "Validation" }),
       notice ? el("p", { class: "notice", id: "notice", text: notice }) : "",
       el("p", { id: "report-summary", text: report.summary || "No checks have run yet." }),
       offer(report, validations, pools),
       validationSection(one),
       el("h2", { text: "Cluster Report" }), reportTable(report), findingsList(report), pairsMatrix(report),
       allReduceCurve(report),
       downloads(report), runChecks(pools), policies(policyList.policies || [], pools));
}
