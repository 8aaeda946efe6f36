// The pairs' matrix of the Cluster Report (pair_matrix.hpp).

#include "actors/validation/pair_matrix.hpp"

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

} // namespace astraeus::validation
