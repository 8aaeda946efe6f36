#include "runtime/workers/worker_rdma.hpp"

#include <algorithm>

#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

/// "231:192" -> {231, 192}.
std::optional<std::pair<int64_t, int64_t>> parse_dev_numbers(std::string_view text) {
  auto t = trim(text);
  auto colon = t.find(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  auto major = parse_u64(t.substr(0, colon));
  auto minor = parse_u64(t.substr(colon + 1));
  if (!major || !minor || *major > 4095 || *minor > (1u << 20))
    return std::nullopt;
  return std::pair{static_cast<int64_t>(*major), static_cast<int64_t>(*minor)};
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

} // namespace

bool worker_gets_rdma(const v1::WorkerOrder& order,
                      const std::map<std::string, std::string>& env) {
  if (order.rdma() || order.spec().rdma())
    return true;
  auto hca = env.find("NCCL_IB_HCA");
  return order.machine_count() > 1 && hca != env.end() && !hca->second.empty()
         && hca->second.front() != '^';
}

std::vector<std::string> hcas_in(const std::string& nccl_ib_hca,
                                 const std::vector<v1::RdmaPort>& ports) {
  std::string_view list = trim(nccl_ib_hca);
  bool exclude = !list.empty() && list.front() == '^';
  if (exclude)
    list.remove_prefix(1);
  // As NCCL reads it: one leading '=' makes every item an exact name (an
  // '=' before a later item is also taken as exact here, not literally).
  const bool all_exact = !list.empty() && list.front() == '=';
  if (all_exact)
    list.remove_prefix(1);
  std::vector<std::pair<bool, std::string>> items;  // exact, name
  if (!list.empty())
    for (auto item : split(list, ',')) {
      item = trim(item);
      const bool marked = !item.empty() && item.front() == '=';
      if (marked)
        item.remove_prefix(1);
      const bool exact = all_exact || marked;
      item = item.substr(0, item.find(':'));
      if (!item.empty())
        items.emplace_back(exact, std::string{item});
    }
  auto named = [&](const std::string& device) {
    return std::any_of(items.begin(), items.end(), [&](const auto& it) {
      return it.first ? device == it.second : starts_with(device, it.second);
    });
  };
  std::vector<std::string> out;
  for (const auto& p : ports) {
    if (p.state() != "ACTIVE" || listed(out, p.device()))
      continue;
    if (items.empty() || named(p.device()) != exclude)
      out.push_back(p.device());
  }
  return out;
}

rdma_grant rdma_devices_for(const std::vector<std::string>& hcas,
                            const std::vector<v1::RdmaPort>& ports,
                            const std::vector<std::string>& existing,
                            const std::string& host_root) {
  rdma_grant out;
  if (hcas.empty())
    return out;
  auto prefix = root_prefix(host_root);
  auto add = [&](const std::string& path, const std::string& dev_file) {
    if (listed(out.paths, path))
      return;
    if (!listed(existing, path)) {
      out.problems.push_back(path + " does not exist on the machine");
      return;
    }
    auto file = read_small_file(prefix + dev_file, 64);
    auto numbers = file.error == 0 ? parse_dev_numbers(file.text) : std::nullopt;
    if (!numbers) {
      out.problems.push_back(dev_file + ": no \"<major>:<minor>\" for " + path);
      return;
    }
    oci_device d;
    d.path = path;
    d.type = 'c';
    d.major = numbers->first;
    d.minor = numbers->second;
    d.file_mode = 0666;
    out.devices.push_back(d);
    out.paths.push_back(path);
  };
  for (const auto& hca : hcas) {
    auto port = std::find_if(ports.begin(), ports.end(), [&](const v1::RdmaPort& p) {
      return p.device() == hca && !p.uverbs().empty();
    });
    if (port == ports.end()) {
      out.problems.push_back(hca + " has no verbs device (infiniband_verbs) in sysfs");
      continue;
    }
    add("/dev/infiniband/" + port->uverbs(),
        "/sys/class/infiniband/" + hca + "/device/infiniband_verbs/" + port->uverbs() + "/dev");
  }
  add("/dev/infiniband/rdma_cm", "/sys/class/misc/rdma_cm/dev");
  return out;
}

} // namespace astraeus
