// A GPU's history on its console page (issue 19): one SVG line chart per
// series (utilisation, memory, temperature, power, clocks, errors) over the
// 24 h the controller keeps, from GET …/nodes/<machine>/gpus/<uuid>/history.
// Plain SVG, no library. console.js calls gpuHistorySection().
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

// Each series: its key (the chart's id), title, unit and how a sample gives it.
const GPU_HISTORY_SERIES = [
  { key: "utilization", title: "Utilisation", unit: "%", fixed: [0, 100],
    value: (s) => s.utilization_percent },
  { key: "memory", title: "Memory used", unit: "GiB",
    value: (s) => s.memory_used_bytes === undefined ? undefined : Number(s.memory_used_bytes) / 2 ** 30 },
  { key: "temperature", title: "Temperature", unit: "°C", value: (s) => s.temperature_c },
  { key: "power", title: "Power", unit: "W", value: (s) => s.power_watts },
  { key: "sm-clock", title: "SM clock", unit: "MHz", value: (s) => s.sm_clock_mhz },
  { key: "memory-clock", title: "Memory clock", unit: "MHz", value: (s) => s.memory_clock_mhz },
  { key: "errors", title: "Errors (Xid events and uncorrectable ECC, running count)", unit: "",
    value: (s) => Number(s.xid_events || 0) + Number(s.ecc_uncorrectable || 0) },
];

function svgEl(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

function chartNumber(x) {
  return Math.abs(x) >= 100 || Number.isInteger(x) ? x.toFixed(0) : x.toFixed(1);
}

function chartTime(ms) {
  return new Date(ms).toISOString().slice(11, 16);
}

// One line chart of `points` ([time ms, value] oldest first) between t0 and t1.
function lineChart(series, points, t0, t1) {
  const w = 560, h = 120, left = 48, right = 8, top = 8, bottom = 20;
  const values = points.map((p) => p[1]);
  let [lo, hi] = series.fixed || [Math.min(...values), Math.max(...values)];
  if (hi === lo) { lo -= 1; hi += 1; }
  const x = (t) => left + (w - left - right) * (t - t0) / Math.max(1, t1 - t0);
  const y = (v) => top + (h - top - bottom) * (1 - (v - lo) / (hi - lo));
  const line = points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
  const unit = series.unit ? " " + series.unit : "";
  return svgEl("svg", { class: "chart", id: "chart-" + series.key, viewBox: "0 0 " + w + " " + h,
                        width: w, height: h, role: "img",
                        "aria-label": series.title + ", " + points.length + " points" },
    svgEl("line", { x1: left, y1: top, x2: left, y2: h - bottom, class: "axis" }),
    svgEl("line", { x1: left, y1: h - bottom, x2: w - right, y2: h - bottom, class: "axis" }),
    svgEl("text", { x: left - 4, y: top + 8, "text-anchor": "end" }, chartNumber(hi) + unit),
    svgEl("text", { x: left - 4, y: h - bottom, "text-anchor": "end" }, chartNumber(lo) + unit),
    svgEl("text", { x: left, y: h - 4 }, chartTime(t0)),
    svgEl("text", { x: w - right, y: h - 4, "text-anchor": "end" }, chartTime(t1) + " UTC"),
    svgEl("polyline", { points: line, class: "series" }));
}

// The history part of a GPU's page: a chart per series it reported, or a
// sentence saying why there is none.
async function gpuHistorySection(machine, uuid) {
  const box = el("section", { id: "gpu-history" }, el("h2", { text: "Over time" }));
  let h;
  try {
    h = await api("GET", "/nodes/" + encodeURIComponent(machine) + "/gpus/" + encodeURIComponent(uuid)
                         + "/history?max_points=600");
  } catch (err) {
    box.append(el("p", { class: "muted", text: "No history: " + err.message }));
    return box;
  }
  const samples = h.samples || [];
  if (!samples.length) {
    box.append(el("p", { class: "muted", text: "No history kept yet." }));
    return box;
  }
  const t0 = Number(samples[0].unix_ms), t1 = Number(samples[samples.length - 1].unix_ms);
  const hours = Math.round(Number(h.retention_seconds || 0) / 3600);
  box.append(el("p", { class: "muted",
                       text: samples.length + " points from " + when(t0) + " to " + when(t1)
                             + " (raw for the last hour, then 1- and 5-minute means; " + hours + " h kept)" }));
  for (const s of GPU_HISTORY_SERIES) {
    const points = samples.map((x) => [Number(x.unix_ms), s.value(x)])
      .filter((p) => p[1] !== undefined && p[1] !== null).map((p) => [p[0], Number(p[1])]);
    if (!points.length) continue;
    box.append(el("div", { class: "chart-box" }, el("h3", { text: s.title }), lineChart(s, points, t0, t1)));
  }
  return box;
}
