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

// A machine's page (bring-up-a-gpu-cluster.md, step 5: "open the machine for
// the same, beside its ports and their cabling"): /o/<org>/machines/<name>.
// Its state and quick check, its GPUs, its RDMA ports (state, rate, subnet,
// the leaf switch and port each is cabled to) and the topology findings that
// name it, as `astra machine NAME` and `astra astraeus topology` say them.
function portsTable(m) {
  const ports = (m.facts || {}).rdma_ports || [];
  if (ports.length === 0) return el("p", { class: "muted", id: "ports", text: "No RDMA port reported." });
  const leaf = (p) => (p.switch_name || p.switch_guid
    ? (p.switch_name || p.switch_guid) + (p.switch_port ? " port " + p.switch_port : "") : "—");
  return el("table", { id: "ports" },
    el("tr", {}, ["Port", "State", "Rate", "Link layer", "Subnet", "Cabled to", "PCIe link"]
      .map((h) => el("th", { text: h }))),
    ports.map((p) => el("tr", { id: "port-" + p.device + "-" + (p.port || 1), "data-state": p.state || "" },
      el("td", {}, el("strong", { text: p.device + (p.port > 1 ? " port " + p.port : "") })),
      el("td", { text: p.state || "—" }), el("td", { text: p.rate || "—" }),
      el("td", { text: p.link_layer || "—" }), el("td", { text: p.subnet_prefix || "—" }),
      el("td", { text: leaf(p) }),
      el("td", { text: p.pcie_link_width ? "x" + p.pcie_link_width + (p.pcie_max_link_width
        && p.pcie_max_link_width !== p.pcie_link_width ? " of x" + p.pcie_max_link_width : "")
        + (p.pcie_link_speed ? " " + p.pcie_link_speed : "") : "—" }))));
}

async function machinePage(name) {
  const [m, t, views] = await Promise.all([
    api("GET", "/nodes/" + encodeURIComponent(name)),
    api("GET", "/topology").catch(() => ({ findings: [] })),
    api("GET", "/nodes/" + encodeURIComponent(name) + "/gpus").catch(() => ({ gpus: [] })),
  ]);
  const gpus = ((m.facts || {}).gpus || {}).gpus || [];
  // Each GPU's health and why, as its square on Compute → GPUs says it.
  const health = new Map((views.gpus || []).map((v) => [v.gpu.id, v]));
  const healthOf = (g) => {
    const v = health.get(g.id);
    if (!v) return "";
    return " · " + (v.health || "—") + ((v.health_reasons || []).length ? " (" + v.health_reasons.join("; ") + ")" : "")
      + (v.holder ? " · held by " + v.holder : "");
  };
  const mine = { findings: (t.findings || []).filter((f) => f.machine === name) };
  show(el("h1", { text: name }),
       el("p", { id: "machine-state" },
          el("span", { class: "badge " + m.state, text: m.state || "—" }),
          m.cordoned ? el("span", { class: "badge Cordoned", text: "Cordoned" }) : "",
          m.quick ? el("span", { class: "badge quick-" + m.quick, id: "quick",
                                 text: "quick " + m.quick }) : "",
          m.quick_summary ? el("span", { class: "muted", text: " " + m.quick_summary }) : ""),
       el("h2", { text: "GPUs" }),
       gpus.length === 0 ? el("p", { class: "muted", text: "No GPU reported." })
         : el("ul", { id: "machine-gpus" }, gpus.map((g) => el("li", { "data-health": (health.get(g.id) || {}).health || "" },
             el("a", { href: base() + "/machines/" + encodeURIComponent(name) + "/gpus/"
                             + encodeURIComponent(g.id), text: (g.index !== undefined ? g.index + ": " : "")
                             + (g.model || "GPU") + " " + g.id }),
             healthOf(g)))),
       m.accepted_reason ? el("p", { id: "accepted-as-is", text: "Accepted as-is without passing: "
                                                                 + m.accepted_reason }) : "",
       el("h2", { text: "Ports and their cabling" }), portsTable(m),
       ...topologyFindings(mine));
}

