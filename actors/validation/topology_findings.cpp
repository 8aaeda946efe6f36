// The cluster's fabrics and what looks miswired or degraded in them (issue
// 12): worked out from the RDMA ports each machine reports.

#include "actors/validation/topology_findings.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/host/pci_link.hpp"

namespace astraeus::validation {

namespace {

/// One port as the analysis sees it.
struct port_ref {
  const v1::MachineView* machine;
  const v1::RdmaPort* port;
};

/// A rail: the same device and port on every machine of a fabric.
using rail_key = std::tuple<std::string, std::string, uint32_t>;  // fabric, device, port

std::string fabric_of(const v1::MachineView& m, const v1::RdmaPort& p) {
  auto l = m.labels().find(fabric_label);
  if (l != m.labels().end() && !l->second.empty())
    return l->second;
  if (p.link_layer() == "Ethernet")
    return "ethernet";
  return p.subnet_prefix().empty() ? std::string{"infiniband"} : p.subnet_prefix();
}

/// "rail 5" for mlx5_5 (the device's trailing number), else "rail mlx5_x".
std::string rail_name(const std::string& device) {
  size_t i = device.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(device[i - 1])))
    --i;
  return "rail " + (i < device.size() && i > 0 && device[i - 1] == '_' ? device.substr(i) : device);
}

std::string port_name(const v1::MachineView& m, const v1::RdmaPort& p) {
  return m.name() + " " + p.device() + (p.port() > 1 ? " port " + std::to_string(p.port()) : "");
}

std::string gbps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::fabs(v - std::round(v)) < 0.05 ? "%.0f" : "%.1f", v);
  return buf;
}

/// The most common value of `values` (ties: the highest); 0 when empty.
double mode_of(const std::vector<double>& values) {
  std::map<double, int> count;
  for (double v : values)
    ++count[std::round(v * 10) / 10];
  double best = 0;
  int best_n = 0;
  for (const auto& [v, n] : count)
    if (n >= best_n) {
      best = v;
      best_n = n;
    }
  return best;
}

template <class T>
const T* most_common(const std::map<T, int>& count, int& n_out) {
  const T* best = nullptr;
  n_out = 0;
  for (const auto& [v, n] : count)
    if (n > n_out) {
      best = &v;
      n_out = n;
    }
  return best;
}

v1::CheckFinding finding(const v1::MachineView& m, std::string what, std::string fix) {
  v1::CheckFinding f;
  f.set_severity("warn");
  f.set_machine(m.name());
  f.set_check("topology");
  f.set_what(std::move(what));
  f.set_fix(std::move(fix));
  return f;
}

/// Ports trained below their peers, and ports down while their peers are up
/// (each also in `degraded`).
void rate_and_state(const std::map<rail_key, std::vector<port_ref>>& rails,
                    const std::map<std::string, std::vector<port_ref>>& by_fabric,
                    std::vector<v1::CheckFinding>& out, std::vector<degraded_port>& degraded) {
  auto mark = [&](const port_ref& pr) {
    degraded.push_back({pr.machine->name(),
                        pr.port->device() + ":" + std::to_string(pr.port->port()),
                        out.back().what()});
  };
  for (const auto& [key, ports] : rails) {
    const auto& fabric = std::get<0>(key);
    for (const auto& pr : ports) {
      const auto& p = *pr.port;
      std::vector<double> peers;
      bool peer_up = false;
      for (const auto& other : ports)
        if (other.machine != pr.machine && other.port->state() == "ACTIVE") {
          peers.push_back(other.port->rate_gbps());
          peer_up = true;
        }
      if (peers.empty())  // a machine alone on its fabric: its other ports
        for (const auto& other : by_fabric.at(fabric))
          if (other.machine == pr.machine && other.port != pr.port
              && other.port->state() == "ACTIVE")
            peers.push_back(other.port->rate_gbps());
      auto name = port_name(*pr.machine, p);
      if (p.state() != "ACTIVE") {
        if (peer_up || p.phys_state() == "Polling") {
          out.push_back(finding(
            *pr.machine,
            name + " is " + (p.state().empty() ? "not Active" : p.state()) +
              (p.phys_state().empty() ? "" : " (" + p.phys_state() + ")") +
              (peer_up ? ", its peers are Active: " + rail_name(p.device()) + " has no link on " +
                           pr.machine->name()
                       : ": its cable has no link"),
            "Check the cable and transceiver of " + name +
              " and the switch port it goes to (`ibstat " + p.device() +
              "` shows the port; Polling means no cable or no peer); NCCL_IB_HCA leaves the port "
              "out meanwhile."));
          mark(pr);
        }
        continue;
      }
      double expected = mode_of(peers);
      if (expected > 0 && p.rate_gbps() > 0 && p.rate_gbps() + 0.5 < expected) {
        out.push_back(finding(
          *pr.machine,
          name + " trained at " + gbps(p.rate_gbps()) + " Gb/s, its peers at " + gbps(expected) +
            " Gb/s: every collective over " + rail_name(p.device()) + " runs at that pace",
          "Reseat or replace the cable and transceiver of " + name + " (`mlxlink -d " +
            p.device() + " -m` shows the link's speed and errors); until then NCCL_IB_HCA can "
            "leave the port out."));
        mark(pr);
      }
    }
  }
}

/// A NIC whose PCIe link trained narrower or slower than it can (once per
/// device).
void nic_links(const std::vector<port_ref>& all, std::vector<v1::CheckFinding>& out) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& pr : all) {
    const auto& p = *pr.port;
    if (!seen.insert({pr.machine->name(), p.device()}).second)
      continue;
    auto cur = parse_link_speed(p.pcie_link_speed());
    auto max = parse_link_speed(p.pcie_max_link_speed());
    bool narrow = p.pcie_link_width() > 0 && p.pcie_max_link_width() > 0
                  && p.pcie_link_width() < p.pcie_max_link_width();
    bool slow = cur && max && *cur + 0.01 < *max;
    if (!narrow && !slow)
      continue;
    auto w = [](uint32_t x) { return x > 0 ? std::optional<int>{static_cast<int>(x)} : std::nullopt; };
    std::string now = pcie_link_text(cur, w(p.pcie_link_width()));
    std::string can = pcie_link_text(max, w(p.pcie_max_link_width()));
    auto where = p.pci_address().empty() ? std::string{} : " (PCI " + p.pci_address() + ")";
    out.push_back(finding(
      *pr.machine,
      pr.machine->name() + " " + p.device() + "'s PCIe link runs at " + now + ", it can run at " +
        can + ": the port may not reach its " + gbps(p.rate_gbps()) + " Gb/s",
      "Reseat the NIC of " + pr.machine->name() + " " + p.device() + where +
        " or move it to a full-width slot; `lspci -vv` shows its LnkSta against LnkCap."));
  }
}

/// Ports cabled to the leaf that most of another rail's ports go to.
void wrong_leaves(const std::map<rail_key, std::vector<port_ref>>& rails,
                  std::vector<v1::CheckFinding>& out) {
  // Each rail's leaf: the switch most of its ports go to (at least two).
  std::map<rail_key, std::string> leaf_of;
  std::map<std::pair<std::string, std::string>, rail_key> rail_of_leaf;  // (fabric, leaf)
  for (const auto& [key, ports] : rails) {
    std::map<std::string, int> count;
    for (const auto& pr : ports)
      if (!pr.port->switch_guid().empty())
        ++count[pr.port->switch_guid()];
    int n = 0;
    if (const auto* leaf = most_common(count, n); leaf != nullptr && n >= 2) {
      leaf_of[key] = *leaf;
      rail_of_leaf[{std::get<0>(key), *leaf}] = key;
    }
  }
  for (const auto& [key, ports] : rails) {
    auto mine = leaf_of.find(key);
    if (mine == leaf_of.end())
      continue;
    for (const auto& pr : ports) {
      const auto& p = *pr.port;
      if (p.switch_guid().empty() || p.switch_guid() == mine->second)
        continue;
      auto other = rail_of_leaf.find({std::get<0>(key), p.switch_guid()});
      if (other == rail_of_leaf.end() || other->second == key)
        continue;
      auto leaf_name = [&](const std::string& guid) {
        for (const auto& q : ports)
          if (q.port->switch_guid() == guid && !q.port->switch_name().empty())
            return q.port->switch_name();
        return guid;
      };
      std::string here = p.switch_name().empty() ? p.switch_guid() : p.switch_name();
      auto name = port_name(*pr.machine, p);
      out.push_back(finding(
        *pr.machine,
        name + " is cabled to " + here + " port " + std::to_string(p.switch_port()) + ", " +
          rail_name(std::get<1>(other->second)) + "'s leaf; " + rail_name(p.device()) +
          "'s other ports go to " + leaf_name(mine->second) + ": a cable on the wrong rail's leaf",
        "Move the cable of " + name + " to " + leaf_name(mine->second) +
          " (compare `iblinkinfo` with the cabling plan); until then traffic on " +
          rail_name(p.device()) + " crosses the spine."));
    }
  }
}

/// The ports of `machines` (only those of `pool` unless empty), grouped.
struct port_groups {
  std::vector<port_ref> all;
  std::map<rail_key, std::vector<port_ref>> rails;
  std::map<std::string, std::vector<port_ref>> by_fabric;
  std::map<std::string, std::vector<std::string>> not_discovered;  // why -> machines
};

port_groups group_ports(const v1::MachineList& machines, const std::string& pool) {
  port_groups g;
  for (const auto& m : machines.machines()) {
    if (!pool.empty()) {
      auto p = m.labels().find("pool");
      if (p == m.labels().end() || p->second != pool)
        continue;
    }
    bool infiniband = false;
    for (const auto& p : m.facts().rdma_ports()) {
      port_ref pr{&m, &p};
      g.all.push_back(pr);
      auto fabric = fabric_of(m, p);
      g.rails[{fabric, p.device(), p.port()}].push_back(pr);
      g.by_fabric[fabric].push_back(pr);
      infiniband = infiniband || p.link_layer() == "InfiniBand";
    }
    const auto& how = m.facts().fabric_discovery();
    if (infiniband && how != "iblinkinfo" && how != "ibnetdiscover")
      g.not_discovered[how.empty() ? std::string{"not reported"} : how].push_back(m.name());
  }
  return g;
}

} // namespace

std::vector<degraded_port> degraded_ports(const v1::MachineList& machines,
                                          const std::string& pool) {
  auto g = group_ports(machines, pool);
  std::vector<v1::CheckFinding> found;
  std::vector<degraded_port> out;
  rate_and_state(g.rails, g.by_fabric, found, out);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.machine, a.port) < std::tie(b.machine, b.port);
  });
  return out;
}

v1::TopologyReport analyse_topology(const v1::MachineList& machines, const std::string& pool,
                                    int64_t now_unix_ms) {
  v1::TopologyReport out;
  out.set_generated_unix_ms(now_unix_ms);
  auto [all, rails, by_fabric, not_discovered] = group_ports(machines, pool);
  for (const auto& [name, ports] : by_fabric) {
    auto* f = out.add_fabrics();
    f->set_name(name);
    std::set<std::string> names, leaves;
    for (const auto& pr : ports) {
      if (f->subnet_prefix().empty() && !pr.port->subnet_prefix().empty())
        f->set_subnet_prefix(pr.port->subnet_prefix());
      names.insert(pr.machine->name());
      if (!pr.port->switch_guid().empty())
        leaves.insert(pr.port->switch_name().empty() ? pr.port->switch_guid()
                                                     : pr.port->switch_name());
    }
    for (const auto& n : names)
      f->add_machines(n);
    for (const auto& l : leaves)
      f->add_leaves(l);
  }
  std::vector<v1::CheckFinding> found;
  std::vector<degraded_port> degraded;
  rate_and_state(rails, by_fabric, found, degraded);
  nic_links(all, found);
  wrong_leaves(rails, found);
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(a.machine(), a.what()) < std::tie(b.machine(), b.what());
  });
  for (auto& f : found)
    *out.add_findings() = std::move(f);
  for (const auto& [why, names] : not_discovered) {
    std::string list;
    for (const auto& n : names)
      list += (list.empty() ? "" : ", ") + n;
    out.add_not_checked("leaf switches (and so wrong-leaf cabling): " + why + " on " + list);
  }
  if (!by_fabric.empty())
    out.add_not_checked("spine switches: not worked out (only the leaf each port is cabled to "
                        "is known)");
  return out;
}

} // namespace astraeus::validation
