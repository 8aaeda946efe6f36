// The pairs' matrix and the all-reduce curve of the Cluster Report
// (pair_matrix.hpp).

#include "actors/validation/pair_matrix.hpp"
#include "actors/validation/all_reduce_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

namespace astraeus::validation {

namespace {

constexpr const char* middle_dot = "\xC2\xB7";  // "·"
constexpr const char* em_dash = "\xE2\x80\x94";  // "—"

/// One pair, its rails together.
struct pair_cell {
  double gbps = 0;
  std::string verdict = "pass";
  std::vector<const v1::PairResult*> rails;
};

/// The matrix's figures: machines, cells by unordered pair, the best total.
struct matrix {
  std::vector<std::string> machines;
  std::map<std::pair<std::string, std::string>, pair_cell> cells;
  double best = 0;
  size_t rails = 0;

  const pair_cell* at(const std::string& x, const std::string& y) const {
    auto it = cells.find(std::minmax(x, y));
    return it == cells.end() ? nullptr : &it->second;
  }
};

int rank(const std::string& v) {
  return v == "fail" ? 2 : v == "warn" ? 1 : 0;
}

matrix build(const google::protobuf::RepeatedPtrField<v1::PairResult>& pairs) {
  matrix m;
  std::set<std::string> names;
  std::set<std::string> devices;
  for (const auto& p : pairs) {
    names.insert(p.a());
    names.insert(p.b());
    devices.insert(p.device());
    auto& c = m.cells[std::minmax(p.a(), p.b())];
    c.gbps += p.gbps();
    if (rank(p.verdict()) > rank(c.verdict))
      c.verdict = p.verdict();
    c.rails.push_back(&p);
  }
  m.machines.assign(names.begin(), names.end());
  for (const auto& [k, c] : m.cells)
    m.best = std::max(m.best, c.gbps);
  m.rails = devices.size();
  return m;
}

int percent(const matrix& m, const pair_cell& c) {
  return m.best > 0 ? static_cast<int>(std::lround(c.gbps / m.best * 100)) : 0;
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

/// `text` right-aligned in `width` columns (UTF-8 characters count once).
std::string right(const std::string& text, size_t width) {
  size_t chars = 0;
  for (unsigned char c : text)
    chars += (c & 0xC0) != 0x80;
  return std::string(width > chars ? width - chars : 0, ' ') + text;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;"
                                                                        : std::string(1, c);
  return out;
}

std::string heading(const matrix& m) {
  return "Pairs: % of the best pair (" + fixed1(m.best) + " Gb/s over "
         + std::to_string(m.rails) + (m.rails == 1 ? " rail)" : " rails)");
}

} // namespace

std::string pairs_matrix_text(const google::protobuf::RepeatedPtrField<v1::PairResult>& pairs) {
  if (pairs.empty())
    return {};
  auto m = build(pairs);
  size_t name_w = 0;
  for (const auto& n : m.machines)
    name_w = std::max(name_w, n.size());
  size_t cell_w = std::max<size_t>(name_w, 5);
  std::string out = heading(m) + "\n" + std::string(name_w, ' ');
  for (const auto& n : m.machines)
    out += " " + right(n, cell_w);
  out += "\n";
  for (const auto& x : m.machines) {
    out += x + std::string(name_w - x.size(), ' ');
    for (const auto& y : m.machines) {
      std::string cell = middle_dot;
      if (x != y) {
        const auto* c = m.at(x, y);
        cell = !c ? std::string{em_dash}
                  : std::to_string(percent(m, *c)) + "%"
                      + (c->verdict == "fail" ? "!" : c->verdict == "warn" ? "~" : "");
      }
      out += " " + right(cell, cell_w);
    }
    out += "\n";
  }
  return out + "(~ a rail warns, ! a rail fails; What to fix names them)\n";
}

std::string pairs_matrix_html(const google::protobuf::RepeatedPtrField<v1::PairResult>& pairs) {
  if (pairs.empty())
    return {};
  auto m = build(pairs);
  std::string out = "<h2>" + escape(heading(m)) + "</h2>\n<table class=\"pairs\"><tr><th></th>";
  for (const auto& n : m.machines)
    out += "<th>" + escape(n) + "</th>";
  out += "</tr>\n";
  for (const auto& x : m.machines) {
    out += "<tr><th>" + escape(x) + "</th>";
    for (const auto& y : m.machines) {
      const auto* c = x == y ? nullptr : m.at(x, y);
      if (!c) {
        out += std::string("<td>") + (x == y ? middle_dot : em_dash) + "</td>";
        continue;
      }
      double f = m.best > 0 ? c->gbps / m.best : 0;
      // Red at half the best pair or less, green at the best.
      int hue = static_cast<int>(std::lround(std::clamp((f - 0.5) / 0.5, 0.0, 1.0) * 120));
      std::string title;
      for (const auto* r : c->rails)
        title += (title.empty() ? "" : "; ") + r->device() + " " + fixed1(r->gbps())
                 + " Gb/s of " + fixed1(r->rate_gbps()) + " trained, "
                 + std::to_string(static_cast<int>(std::lround(r->of_best() * 100)))
                 + "% of the best";
      out += "<td class=\"" + c->verdict + "\" style=\"background:hsl(" + std::to_string(hue)
             + ",70%,80%)\" title=\"" + escape(title) + "\">" + std::to_string(percent(m, *c))
             + "%</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

namespace {

/// The sizes the curve shows: 1 MiB and every fourth power of two above it
/// (4 MiB, 16 MiB, ...), and the largest size measured.
std::vector<uint64_t> curve_sizes(const std::vector<v1::AllReducePoint>& points) {
  std::set<uint64_t> all;
  for (const auto& p : points)
    for (const auto& s : p.curve())
      all.insert(s.bytes());
  std::vector<uint64_t> out;
  for (auto b : all) {
    bool shown = b >= (1u << 20) && (b >> 20) > 0 && ((b >> 20) & ((b >> 20) - 1)) == 0
                 && __builtin_ctzll(b >> 20) % 2 == 0;
    if (shown || b == *all.rbegin())
      out.push_back(b);
  }
  return out;
}

const v1::AllReduceSize* at_size(const v1::AllReducePoint& p, uint64_t bytes) {
  for (const auto& s : p.curve())
    if (s.bytes() == bytes)
      return &s;
  return nullptr;
}

std::string group_heading(const v1::AllReducePoint& p) {
  return std::to_string(p.machines()) + " machines";
}

/// Whether any group has a figure: with none (every group skipped, no
/// shared rail) there is no curve, only why.
bool any_measured(const std::vector<v1::AllReducePoint>& points) {
  return std::any_of(points.begin(), points.end(),
                     [](const v1::AllReducePoint& p) { return p.curve_size() > 0; });
}

/// "All-reduce: not measured (2 machines: skipped: <why>; 3 machines:
/// fail: <why>)": each group's verdict ("not run" when it has none) and why.
std::string not_measured_line(const std::vector<v1::AllReducePoint>& points) {
  std::string groups;
  for (const auto& p : points)
    groups += (groups.empty() ? "" : "; ") + group_heading(p) + ": "
              + (p.verdict().empty() ? std::string{"not run"} : p.verdict())
              + (p.note().empty() ? "" : ": " + p.note());
  return "All-reduce: not measured (" + groups + ")";
}

} // namespace

std::string all_reduce_curve_text(const std::vector<v1::AllReducePoint>& points) {
  if (points.empty())
    return {};
  if (!any_measured(points))
    return not_measured_line(points) + "\n";
  std::string out = "All-reduce: bus bandwidth (GB/s) by message size\n";
  size_t w = 10;
  for (const auto& p : points)
    w = std::max(w, group_heading(p).size());
  out += right("SIZE", 8);
  for (const auto& p : points)
    out += "  " + right(group_heading(p), w);
  out += "\n";
  for (auto b : curve_sizes(points)) {
    out += right(size_text(b), 8);
    for (const auto& p : points) {
      const auto* s = at_size(p, b);
      out += "  " + right(s ? fixed1(s->busbw_gbs()) : std::string{em_dash}, w);
    }
    out += "\n";
  }
  out += right("expected", 8);
  for (const auto& p : points)
    out += "  " + right(fixed1(p.expected_gbs()), w);
  out += "\n" + right("verdict", 8);
  for (const auto& p : points)
    out += "  " + right(p.verdict().empty() ? std::string{em_dash} : p.verdict(), w);
  return out + "\n";
}

std::string all_reduce_curve_html(const std::vector<v1::AllReducePoint>& points) {
  if (points.empty())
    return {};
  if (!any_measured(points))
    return "<p>" + escape(not_measured_line(points)) + "</p>\n";
  std::string out = "<h2>All-reduce: bus bandwidth (GB/s) by message size</h2>\n"
                    "<table class=\"allreduce\"><tr><th>size</th>";
  for (const auto& p : points)
    out += "<th title=\"" + escape([&] {
             std::string g;
             for (const auto& m : p.group())
               g += (g.empty() ? "" : ", ") + m;
             return g;
           }()) + "\">" + escape(group_heading(p)) + "</th>";
  out += "</tr>\n";
  for (auto b : curve_sizes(points)) {
    out += "<tr><th>" + escape(size_text(b)) + "</th>";
    for (const auto& p : points) {
      const auto* s = at_size(p, b);
      if (!s) {
        out += std::string("<td>") + em_dash + "</td>";
        continue;
      }
      // A bar: the share of the expected figure, red at half or less, green at all of it.
      double f = p.expected_gbs() > 0 ? s->busbw_gbs() / p.expected_gbs() : 0;
      int hue = static_cast<int>(std::lround(std::clamp((f - 0.5) / 0.5, 0.0, 1.0) * 120));
      int width = static_cast<int>(std::lround(std::clamp(f, 0.0, 1.0) * 100));
      out += "<td title=\"" + std::to_string(static_cast<int>(std::lround(f * 100)))
             + "% of expected\" style=\"background:linear-gradient(to right,hsl("
             + std::to_string(hue) + ",70%,75%) " + std::to_string(width) + "%,transparent "
             + std::to_string(width) + "%)\">" + fixed1(s->busbw_gbs()) + "</td>";
    }
    out += "</tr>\n";
  }
  out += "<tr><th>expected</th>";
  for (const auto& p : points)
    out += "<td>" + fixed1(p.expected_gbs()) + "</td>";
  out += "</tr>\n<tr><th>verdict</th>";
  for (const auto& p : points)
    out += "<td class=\"" + escape(p.verdict()) + "\">" + escape(p.verdict()) + "</td>";
  return out + "</tr>\n</table>\n";
}

} // namespace astraeus::validation
