// The console's Topology page (issue 12; bring-up-a-gpu-cluster.md, step 5:
// "Open Compute → Topology → Findings for every finding, its evidence and
// its fix"): /o/<org>/compute/topology[?pool=P]. The findings (the same as
// `astra astraeus topology`), the fabrics with their machines and leaf
// switches, and what was not checked. Loaded before console.js, whose
// helpers (el, api, show) it uses when its page is drawn.
"use strict";

function topologyFindings(t) {
  const findings = t.findings || [];
  return [el("h2", { id: "findings-title", text: "Findings (" + findings.length + ")" }),
    findings.length === 0
      ? el("p", { class: "muted", id: "findings", text: "Nothing looks miswired or degraded." })
      : el("ul", { id: "findings", class: "findings" }, findings.map((f) =>
          el("li", { class: "finding-" + (f.severity || "warn"), "data-machine": f.machine || "" },
             el("div", { text: "! " + f.what }),
             f.fix ? el("div", { class: "fix", text: "fix: " + f.fix }) : "")))];
}

function fabricsTable(t) {
  const fabrics = t.fabrics || [];
  if (fabrics.length === 0)
    return el("p", { class: "muted", id: "fabrics", text: "No machine reports an RDMA port." });
  const join = (list) => (list && list.length ? list.join(", ") : "—");
  return el("table", { id: "fabrics" },
    el("tr", {}, ["Fabric", "Subnet", "Machines", "Leaf switches"].map((h) => el("th", { text: h }))),
    fabrics.map((f) => el("tr", { id: "fabric-" + f.name },
      el("td", {}, el("strong", { text: f.name })), el("td", { text: f.subnet_prefix || "—" }),
      el("td", { text: join(f.machines) }), el("td", { text: join(f.leaves) }))));
}

async function topologyPage() {
  const pool = new URLSearchParams(location.search).get("pool") || "";
  const t = await api("GET", "/topology" + (pool ? "?pool=" + encodeURIComponent(pool) : ""));
  const notChecked = t.not_checked || [];
  show(el("h1", { text: "Topology" }),
       ...topologyFindings(t),
       el("h2", { text: "Fabrics" }), fabricsTable(t),
       notChecked.length === 0 ? ""
         : el("div", { id: "not-checked" }, el("h2", { text: "Not checked" }),
              el("ul", {}, notChecked.map((n) => el("li", { class: "muted", text: n })))));
}
