// What an RDMA port says of its fabric (issue 12): GID 0, LID, the NIC's
// PCIe link, and the switch side from iblinkinfo's output.

#include "runtime/host/rdma_fabric.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

/// One sysfs attribute, trimmed; absent: nullopt quietly; unreadable:
/// nullopt and a warning.
std::optional<std::string> attribute(const std::string& prefix, const std::string& rel,
                                     std::vector<std::string>& warnings) {
  auto f = read_small_file(prefix + rel, 4096);
  if (!f.opened && (f.error == ENOENT || f.error == ENOTDIR))
    return std::nullopt;
  if (f.error != 0) {
    warnings.push_back(rel + ": " + std::strerror(f.error));
    return std::nullopt;
  }
  return std::string{trim(f.text)};
}

bool all_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
}

/// "0x12" or "18" -> 18; nullopt for anything else.
std::optional<uint32_t> parse_lid(std::string_view text) {
  text = trim(text);
  if (starts_with(text, "0x") || starts_with(text, "0X"))
    return parse_hex_u32(text);
  auto v = parse_u64(text);
  if (!v || *v > UINT32_MAX)
    return std::nullopt;
  return static_cast<uint32_t>(*v);
}

/// The tokens of `s` split at runs of blanks.
std::vector<std::string_view> tokens(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t'))
      ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t')
      ++j;
    if (j > i)
      out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

/// `s` without its bracketed parts ("1[  ]" -> "1", "[ext]" -> ""): the
/// external port numbers iblinkinfo prints in brackets hold blanks.
std::string without_brackets(std::string_view s) {
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '[')
      ++depth;
    else if (c == ']' && depth > 0)
      --depth;
    else if (depth == 0)
      out += c;
  }
  return out;
}

/// "17[  ]" or "17" -> 17.
std::optional<uint32_t> port_number(std::string_view token) {
  auto bracket = token.find('[');
  auto v = parse_u64(token.substr(0, bracket));
  if (!v || *v > 255)
    return std::nullopt;
  return static_cast<uint32_t>(*v);
}

}  // namespace

std::pair<std::string, std::string> split_gid(std::string_view text) {
  text = trim(text);
  auto parts = split(text, ':');
  if (parts.size() != 8)
    return {};
  std::string groups[8];
  for (size_t i = 0; i < 8; ++i) {
    if (parts[i].size() > 4 || !all_hex(parts[i]))
      return {};
    std::string g(4 - parts[i].size(), '0');
    for (char c : parts[i])
      g += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    groups[i] = g;
  }
  auto join = [&](int from) {
    return groups[from] + ":" + groups[from + 1] + ":" + groups[from + 2] + ":" + groups[from + 3];
  };
  return {join(0), join(4)};
}

void read_rdma_port_fabric(const std::string& prefix, const std::string& device_dir,
                           const std::string& port_dir, v1::RdmaPort& port,
                           std::vector<std::string>& warnings) {
  if (auto gid = attribute(prefix, port_dir + "/gids/0", warnings)) {
    auto [subnet, guid] = split_gid(*gid);
    if (subnet.empty() && !gid->empty())
      warnings.push_back(port_dir + "/gids/0: not a GID: \"" + gid->substr(0, 64) + "\"");
    else if (guid != "0000:0000:0000:0000") {
      port.set_subnet_prefix(subnet);
      port.set_port_guid(guid);
    }
  }
  if (auto text = attribute(prefix, port_dir + "/lid", warnings)) {
    if (auto lid = parse_lid(*text))
      port.set_lid(*lid);
    else
      warnings.push_back(port_dir + "/lid: not a LID: \"" + text->substr(0, 32) + "\"");
  }
  // The NIC's PCIe link: a bad read or an "Unknown" speed leaves it out.
  auto width = [&](const char* name, auto set) {
    if (auto text = attribute(prefix, device_dir + "/device/" + name, warnings)) {
      auto v = parse_u64(*text);
      if (v && *v > 0 && *v <= 32)
        set(static_cast<uint32_t>(*v));
      else
        warnings.push_back(device_dir + "/device/" + name + ": not a lane count: \"" +
                           text->substr(0, 32) + "\"");
    }
  };
  width("current_link_width", [&](uint32_t v) { port.set_pcie_link_width(v); });
  width("max_link_width", [&](uint32_t v) { port.set_pcie_max_link_width(v); });
  if (auto text = attribute(prefix, device_dir + "/device/current_link_speed", warnings))
    port.set_pcie_link_speed(*text);
  if (auto text = attribute(prefix, device_dir + "/device/max_link_speed", warnings))
    port.set_pcie_max_link_speed(*text);
}

std::map<uint32_t, ib_switch_link> parse_iblinkinfo(std::string_view text) {
  std::map<uint32_t, ib_switch_link> out;
  ib_switch_link current;  // the default form's "Switch:" header
  for (auto line : split_lines(text)) {
    auto t = trim(line);
    if (starts_with(t, "Switch:")) {
      // "Switch: 0x0c42a10300aabbcc QM9700 leaf-01:"
      auto rest = trim(t.substr(7));
      auto space = rest.find(' ');
      current = {};
      current.switch_guid = std::string{rest.substr(0, space)};
      if (space != std::string_view::npos) {
        auto name = trim(rest.substr(space));
        if (!name.empty() && name.back() == ':')
          name.remove_suffix(1);
        current.switch_name = std::string{trim(name)};
      }
      continue;
    }
    if (starts_with(t, "CA:")) {
      current = {};  // an HCA's own section: not a switch's ports
      continue;
    }
    auto open = t.find("==(");
    auto close = t.find(")==>");
    if (open == std::string_view::npos || close == std::string_view::npos || close < open)
      continue;
    ib_switch_link sw = current;
    auto left = t.substr(0, open);
    if (starts_with(left, "0x")) {
      // --line: 0x<guid> "<name>" <lid> <port>[..]
      auto q1 = left.find('"');
      auto q2 = q1 == std::string_view::npos ? q1 : left.find('"', q1 + 1);
      if (q2 == std::string_view::npos)
        continue;
      sw.switch_guid = std::string{trim(left.substr(0, q1))};
      sw.switch_name = std::string{trim(left.substr(q1 + 1, q2 - q1 - 1))};
      left = left.substr(q2 + 1);
    }
    if (sw.switch_guid.empty())
      continue;
    auto left_text = without_brackets(left);
    auto l = tokens(left_text);
    if (l.size() < 2)
      continue;
    auto sport = port_number(l[l.size() - 1]);
    if (!sport)
      continue;
    // Right: [0x<peer guid>] <peer lid> <peer port>[..] "<desc>" ( ... )
    auto right = t.substr(close + 4);
    auto quote = right.find('"');
    auto right_text = without_brackets(right.substr(0, quote));
    auto r = tokens(right_text);
    if (!r.empty() && starts_with(r[0], "0x"))
      r.erase(r.begin());
    if (r.size() < 2)
      continue;  // a port that is down: no peer
    auto peer_lid = parse_lid(r[0]);
    if (!peer_lid || *peer_lid == 0 || !port_number(r[1]))
      continue;
    sw.switch_port = *sport;
    out[*peer_lid] = sw;
  }
  return out;
}

void apply_switch_links(v1::HostFacts& facts, const std::map<uint32_t, ib_switch_link>& links,
                        const std::string& how) {
  bool infiniband = false;
  for (auto& port : *facts.mutable_rdma_ports()) {
    if (port.link_layer() != "InfiniBand")
      continue;
    infiniband = true;
    auto l = port.lid() == 0 ? links.end() : links.find(port.lid());
    if (l == links.end())
      continue;
    port.set_switch_guid(l->second.switch_guid);
    port.set_switch_name(to_valid_utf8(l->second.switch_name));
    port.set_switch_port(l->second.switch_port);
  }
  facts.set_fabric_discovery(infiniband ? how : std::string{});
}

}  // namespace astraeus
