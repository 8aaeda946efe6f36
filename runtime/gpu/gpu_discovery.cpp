#include "runtime/gpu/gpu_discovery.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/gpu_read.hpp"
#include "runtime/gpu/amd_gpus.hpp"
#include "runtime/gpu/nvidia_smi.hpp"
#include "runtime/host/pci_bus.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& p : parts)
    out += (out.empty() ? "" : sep) + p;
  return out;
}

fs::path under(const std::string& root, const char* path) {
  return fs::path{root} / fs::path{path}.relative_path();
}

uint32_t count_imex_channels(const std::string& root) {
  std::error_code err;
  uint32_t n = 0;
  for (auto it = fs::directory_iterator{under(root, "/dev/nvidia-caps-imex-channels"), err};
       !err && it != fs::directory_iterator{}; it.increment(err))
    if (it->path().filename().string().rfind("channel", 0) == 0)
      ++n;
  return n;
}

/// A model as the summary names it: without the vendor's words and the
/// board's form factor ("Tesla V100-SXM2-16GB" -> "V100", "NVIDIA GeForce
/// RTX 2080 Ti" -> "RTX 2080 Ti").
std::string short_model(std::string m) {
  for (const char* prefix : {"NVIDIA ", "Tesla ", "GeForce ", "AMD ", "Quadro "})
    if (m.rfind(prefix, 0) == 0)
      m.erase(0, std::string{prefix}.size());
  if (auto dash = m.find('-'); dash != std::string::npos && dash > 0)
    m.erase(dash);
  return m;
}

/// Every model with its count, most first ("1x V100, 1x RTX 2080 Ti"), so
/// a machine with two models names both (issue 18, rule 9).
std::string model_summary(const std::map<std::string, int>& models) {
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [model, n] : models)
    order.emplace_back(-n, model);
  std::sort(order.begin(), order.end());
  std::string out;
  for (const auto& [n, model] : order)
    out += (out.empty() ? "" : ", ") + std::to_string(-n) + "x " + short_model(model);
  return out;
}

v1::Condition condition(const char* type, bool status, const char* reason,
                        std::string message) {
  v1::Condition c;
  c.set_type(type);
  c.set_status(status);
  c.set_reason(reason);
  c.set_message(std::move(message));
  return c;
}

/// Adds the bus's GPUs to `out`, marking those a driver also reported (one
/// of `gpus`); the ones that miss something (a driver), in bus order.
std::vector<const v1::BusGpu*> add_bus(bus_scan& bus, const std::vector<v1::Gpu>& gpus,
                                       v1::GpuSection& out) {
  std::set<std::string> reported;
  for (const auto& g : gpus)
    reported.insert(g.pci_address());
  std::vector<const v1::BusGpu*> missing;
  for (auto& b : bus.gpus) {
    b.set_reported_by_driver(reported.count(b.pci_address()) > 0);
    if (!b.missing().empty())
      missing.push_back(&b);
    *out.add_bus() = b;
  }
  return missing;
}

/// Whether the PCI bus has an NVIDIA GPU. NVML installed but failing to
/// start on a host without one (an AMD-only host) is no NVIDIA problem: its
/// GPUs are reported normally (issue 18, rule 7).
bool nvidia_on_bus(const bus_scan& bus) {
  return std::any_of(bus.gpus.begin(), bus.gpus.end(),
                     [](const v1::BusGpu& b) { return b.vendor() == "nvidia"; });
}

} // namespace

v1::GpuCapabilities summarise_gpus(const std::vector<v1::Gpu>& gpus) {
  v1::GpuCapabilities out;
  if (gpus.empty())
    return out;
  // The most common model describes the machine. A GPU whose model is not
  // known (lost before the driver named it) says nothing of it.
  std::map<std::string, int> models;
  for (const auto& g : gpus)
    if (!g.model().empty())
      ++models[g.model()];
  std::string top;
  int top_count = 0;
  for (const auto& [model, n] : models)
    if (n > top_count)
      std::tie(top, top_count) = std::tie(model, n);
  out.set_model(top);
  out.set_count(static_cast<uint32_t>(gpus.size()));
  out.set_summary(model_summary(models));
  bool all_data_centre = !models.empty();
  for (const auto& g : gpus) {
    if (out.vendor().empty())
      out.set_vendor(g.vendor());
    if (!top.empty() && g.model() == top && out.architecture().empty())
      out.set_architecture(g.architecture());
    if (out.driver_version().empty())
      out.set_driver_version(g.driver_version());
    if (!g.model().empty())
      all_data_centre = all_data_centre && g.data_centre();
    for (const auto& link : g.nvlinks()) {
      if (link.active())
        out.set_nvlink(true);
      if (link.remote_kind() == "switch")
        out.set_nvswitch_fabric(true);
    }
    if (g.fabric().state() == "completed" && !g.fabric().cluster_uuid().empty()) {
      out.set_nvswitch_fabric(true);
      if (out.nvlink_domain().empty())
        out.set_nvlink_domain(g.fabric().cluster_uuid() + "/"
                              + std::to_string(g.fabric().clique_id()));
    }
  }
  out.set_data_centre(all_data_centre);
  return out;
}

v1::Gpu gpu_identity(const v1::Gpu& gpu) {
  v1::Gpu id;
  id.set_id(gpu.id());
  id.set_vendor(gpu.vendor());
  id.set_model(gpu.model());
  if (gpu.has_index())
    id.set_index(gpu.index());
  id.set_pci_address(gpu.pci_address());
  if (gpu.has_numa_node())
    id.set_numa_node(gpu.numa_node());
  if (gpu.has_memory_total_bytes())
    id.set_memory_total_bytes(gpu.memory_total_bytes());
  id.set_architecture(gpu.architecture());
  id.set_compute_capability(gpu.compute_capability());
  id.set_data_centre(gpu.data_centre());
  id.set_serial(gpu.serial());
  id.set_vbios_version(gpu.vbios_version());
  return id;
}

gpu_discovery::gpu_discovery(gpu_discovery_options opts)
  : opts_(std::move(opts)) {
  opts_.nvml.sysfs_root = opts_.root;
  nvml_ = std::make_unique<nvml_prober>(opts_.nvml);
  if (opts_.store) {
    v1::GpuSection known;
    auto found = opts_.store->get(family::gpus, known_nvidia_gpus_key, known);
    if (!found)
      warn_once("discovery: the last known GPUs cannot be read from the store ("
                + render_error(found.error()) + "); they are forgotten");
    else if (*found)
      last_nvidia_.assign(known.gpus().begin(), known.gpus().end());
  }
}

void gpu_discovery::warn_once(const std::string& text) {
  if (logged_.insert(text).second)
    spdlog::warn("{}", text);
}

namespace {

/// A GPU the driver listed without its UUID: none at all (NVML: lost or
/// hung before it told it), or its PCI address in its place (nvidia-smi).
bool unnamed(const v1::Gpu& g) {
  return g.id().empty() || g.id() == g.pci_address();
}

/// Fills the identity fields `g` lacks from `known` (gpu_identity()).
void fill_missing(v1::Gpu& g, const v1::Gpu& known) {
  if (unnamed(g) && !known.id().empty())
    g.set_id(known.id());
  if (g.model().empty()) {
    g.set_model(known.model());
    g.set_data_centre(known.data_centre());
  }
  if (g.architecture().empty())
    g.set_architecture(known.architecture());
  if (g.compute_capability().empty())
    g.set_compute_capability(known.compute_capability());
  if (g.pci_address().empty())
    g.set_pci_address(known.pci_address());
  if (!g.has_index() && known.has_index())
    g.set_index(known.index());
  if (!g.has_numa_node() && known.has_numa_node())
    g.set_numa_node(known.numa_node());
  if (!g.has_memory_total_bytes() && known.has_memory_total_bytes())
    g.set_memory_total_bytes(known.memory_total_bytes());
  if (g.serial().empty())
    g.set_serial(known.serial());
  if (g.vbios_version().empty())
    g.set_vbios_version(known.vbios_version());
}

} // namespace

void gpu_discovery::fill_identities(std::vector<v1::Gpu>& gpus, const bus_scan& bus) const {
  if (std::none_of(gpus.begin(), gpus.end(), unnamed))
    return;
  std::set<std::string> placed;  // PCI addresses of the GPUs listed
  for (const auto& g : gpus)
    if (!g.pci_address().empty())
      placed.insert(g.pci_address());
  // The last known GPU at its PCI address, else at its index.
  for (auto& g : gpus) {
    if (!unnamed(g))
      continue;
    auto known = std::find_if(last_nvidia_.begin(), last_nvidia_.end(), [&](const v1::Gpu& k) {
      if (!g.pci_address().empty())
        return k.pci_address() == g.pci_address();
      return g.has_index() && k.has_index() && k.index() == g.index()
             && !placed.count(k.pci_address());
    });
    if (known == last_nvidia_.end())
      continue;
    fill_missing(g, *known);
    placed.insert(g.pci_address());
  }
  // Still without a PCI address: the nvidia-bound devices of the bus that no
  // listed GPU has, when there are as many as such GPUs (both in PCI order:
  // NVML numbers GPUs in bus order).
  std::vector<const v1::BusGpu*> spare;
  for (const auto& b : bus.gpus)
    if (b.vendor() == "nvidia" && b.driver() == "nvidia" && !placed.count(b.pci_address()))
      spare.push_back(&b);
  auto lacking = std::count_if(gpus.begin(), gpus.end(),
                               [](const v1::Gpu& g) { return g.pci_address().empty(); });
  if (lacking > 0 && static_cast<size_t>(lacking) == spare.size()) {
    auto next = spare.begin();
    for (auto& g : gpus) {
      if (!g.pci_address().empty())
        continue;
      g.set_pci_address((*next)->pci_address());
      if (!g.has_numa_node() && (*next)->has_numa_node())
        g.set_numa_node((*next)->numa_node());
      ++next;
    }
  }
  // No UUID known: the PCI address stands for it, as with nvidia-smi.
  for (auto& g : gpus)
    if (g.id().empty())
      g.set_id(g.pci_address());
}

void gpu_discovery::keep_nvidia(const std::vector<v1::Gpu>& gpus) {
  std::vector<v1::Gpu> ids;
  for (const auto& g : gpus)
    if (!g.id().empty())
      ids.push_back(gpu_identity(g));
  auto same = [](const v1::Gpu& a, const v1::Gpu& b) {
    return a.SerializeAsString() == b.SerializeAsString();
  };
  if (std::equal(ids.begin(), ids.end(), last_nvidia_.begin(), last_nvidia_.end(), same))
    return;
  last_nvidia_ = std::move(ids);
  if (!opts_.store)
    return;
  caf::error err;
  if (last_nvidia_.empty()) {
    err = opts_.store->erase(family::gpus, known_nvidia_gpus_key);
  } else {
    v1::GpuSection known;
    for (const auto& g : last_nvidia_)
      *known.add_gpus() = g;
    err = opts_.store->put(family::gpus, known_nvidia_gpus_key, known);
  }
  if (err)
    warn_once("discovery: cannot keep the last known GPUs in the store ("
              + render_error(err) + "); an agent restarted while the driver "
              "is gone will not list them");
}

std::vector<v1::Gpu> gpu_discovery::vanished_since_last(const std::vector<v1::Gpu>& listed,
                                                        const bus_scan& bus) const {
  std::set<std::string> ids, pcis;
  for (const auto& g : listed) {
    ids.insert(g.id());
    pcis.insert(g.pci_address());
  }
  // A scan that found no NVIDIA device at all is no scan (a container
  // without /sys/bus/pci, a host root without it), as count_mismatch takes
  // it: "from the PCI bus" would send someone to reseat a card on evidence
  // the agent does not have (a new-user trial).
  const bool scanned = std::any_of(bus.gpus.begin(), bus.gpus.end(),
                                   [](const v1::BusGpu& b) { return b.vendor() == "nvidia"; });
  std::vector<v1::Gpu> out;
  for (const auto& known : last_nvidia_) {
    if (known.id().empty() || ids.count(known.id()) || pcis.count(known.pci_address()))
      continue;
    v1::Gpu g = known;
    set_read_status(g, gpu_read_status::lost);
    auto on_bus = std::find_if(bus.gpus.begin(), bus.gpus.end(), [&](const v1::BusGpu& b) {
      return b.pci_address() == known.pci_address();
    });
    g.set_status_detail(on_bus != bus.gpus.end()
                          ? "missing from NVML: on PCI at " + known.pci_address()
                        : scanned ? "missing from NVML and from the PCI bus (was at "
                                      + known.pci_address() + ")"
                                  : "missing from NVML (was at " + known.pci_address()
                                      + "; the PCI bus was not read)");
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<v1::Condition> count_mismatch(const bus_scan& bus, const v1::GpuSection& section,
                                            size_t nvml_count) {
  std::set<std::string> in_nvml;
  for (const auto& g : section.gpus())
    if (g.vendor() == "nvidia" && !g.pci_address().empty()
        && !(read_status(g) == gpu_read_status::lost
             && g.status_detail().rfind("missing from NVML", 0) == 0))
      in_nvml.insert(g.pci_address());
  size_t on_bus = 0, bound = 0;
  std::vector<std::string> where;
  std::set<std::string> bus_pcis;
  for (const auto& b : bus.gpus) {
    if (b.vendor() != "nvidia")
      continue;
    ++on_bus;
    bus_pcis.insert(b.pci_address());
    if (b.driver() == "nvidia")
      ++bound;
    else
      where.push_back(b.pci_address() + ": on the PCI bus, not bound to the nvidia driver");
    if (b.driver() == "nvidia" && !in_nvml.count(b.pci_address()))
      where.push_back(b.pci_address() + ": bound to the nvidia driver, missing from NVML");
  }
  for (const auto& g : section.gpus())
    if (g.vendor() == "nvidia" && !g.pci_address().empty() && !bus_pcis.count(g.pci_address()))
      where.push_back(g.pci_address() + ": " + (in_nvml.count(g.pci_address())
                                                  ? "listed by NVML, not on the PCI bus"
                                                  : "missing from the PCI bus and NVML"));
  // Without a bus scan (no sysfs) there is nothing to compare with.
  if (on_bus == 0 || (on_bus == bound && bound == nvml_count && where.empty()))
    return std::nullopt;
  return condition("GPU counts agree", false, "GPUCountMismatch",
                   "PCI bus " + std::to_string(on_bus) + ", nvidia driver "
                     + std::to_string(bound) + ", NVML " + std::to_string(nvml_count) + "; "
                     + join(where, "; "));
}

gpu_discovery::~gpu_discovery() = default;

v1::GpuSection gpu_discovery::discover(bool rdma_up) {
  v1::GpuSection out;
  std::vector<v1::Gpu> gpus;
  std::vector<std::string> tried;
  enum class nvidia_read { none, driver, smi, unresponsive, unavailable };
  std::optional<size_t> nvml_count;  // GPUs NVML listed, when it answered
  auto nvidia = nvidia_read::none;
  std::string nvidia_problem;
  std::string driver_version, cuda_version;
  std::string smi_detail;  // what nvidia-smi could not do, when it was read

  // The PCI bus first: it places GPUs the driver lists without an address.
  auto bus = scan_pci_gpus(opts_.root);

  auto nv = nvml_->probe();
  const auto& lib = opts_.nvml.library;
  switch (nv.status) {
    case nvml_result::driver_status::ok:
      tried.push_back("NVML " + lib + ": driver " + nv.driver_version + ", "
                      + std::to_string(nv.gpus.size()) + " GPU(s)");
      nvidia = nv.gpus.empty() ? nvidia_read::none : nvidia_read::driver;
      driver_version = nv.driver_version;
      cuda_version = nv.cuda_version;
      fill_identities(nv.gpus, bus);
      for (auto& g : nv.gpus) {
        if (g.driver_version().empty())
          g.set_driver_version(nv.driver_version);
        gpus.push_back(g);
      }
      nvml_count = nv.gpus.size();
      // A GPU of the last pass NVML no longer lists is lost, not gone: it is
      // listed (and latched) with where it still is.
      // It stays among the known GPUs (its identity: model, index, serial)
      // for as long as it is gone, so later passes list it with its facts,
      // not as a bare UUID and address (a user trial saw its /metrics
      // labels empty from the second pass on).
      {
        auto kept = nv.gpus;
        for (auto& g : vanished_since_last(nv.gpus, bus)) {
          warn_once("discovery: GPU " + g.id() + ": " + g.status_detail());
          kept.push_back(g);
          gpus.push_back(std::move(g));
        }
        keep_nvidia(kept);
      }
      break;
    case nvml_result::driver_status::unresponsive:
      tried.push_back("NVML " + lib + ": unresponsive (" + nv.detail + ")");
      nvidia = nvidia_read::unresponsive;
      nvidia_problem = nv.detail;
      break;
    case nvml_result::driver_status::init_failed:
    case nvml_result::driver_status::not_loaded: {
      tried.push_back("NVML " + lib + ": "
                      + (nv.status == nvml_result::driver_status::not_loaded
                           ? "not loaded ("
                           : "init failed (")
                      + nv.detail + ")");
      auto smi = read_nvidia_smi(opts_.nvidia_smi, opts_.nvidia_smi_deadline);
      for (const auto& w : smi.warnings)
        warn_once("discovery: " + w);
      if (smi.ok) {
        tried.push_back("nvidia-smi " + opts_.nvidia_smi + ": "
                        + std::to_string(smi.gpus.size()) + " GPU(s)"
                        + (smi.detail.empty() ? "" : " (" + smi.detail + ")"));
        if (!smi.gpus.empty()) {
          nvidia = nvidia_read::smi;
          smi_detail = smi.detail;
          driver_version = smi.driver_version;
          cuda_version = smi.cuda_version;
          fill_identities(smi.gpus, bus);
          for (auto& g : smi.gpus) {
            // nvidia-smi has no NUMA node: the kernel's, as NVML's fallback.
            if (!g.has_numa_node() && !g.pci_address().empty()) {
              auto numa = read_pci_numa_node(opts_.root, g.pci_address());
              if (numa.node)
                g.set_numa_node(*numa.node);
              else if (!numa.error.empty())
                g.add_unknown_fields("numa_node: " + numa.error);
            }
            if (g.driver_version().empty())
              g.set_driver_version(smi.driver_version);
            gpus.push_back(g);
          }
          keep_nvidia(smi.gpus);
        }
      } else {
        tried.push_back("nvidia-smi " + opts_.nvidia_smi + ": " + smi.detail);
        if ((nv.status == nvml_result::driver_status::init_failed && nvidia_on_bus(bus))
            || !last_nvidia_.empty()) {
          // The driver is there (or was) but does not answer.
          nvidia = nvidia_read::unavailable;
          nvidia_problem = nv.detail;
        }
      }
      break;
    }
  }
  if (nvidia == nvidia_read::unresponsive || nvidia == nvidia_read::unavailable) {
    // Keep the last known GPUs, marked as not answering.
    for (auto g : last_nvidia_) {
      set_read_status(g, nvidia == nvidia_read::unresponsive ? gpu_read_status::unresponsive
                                                            : gpu_read_status::unavailable);
      g.set_status_detail(nvidia_problem);
      gpus.push_back(std::move(g));
    }
  }

  auto amd = read_amd_gpus(opts_.root);
  tried.push_back("amdgpu sysfs: " + std::to_string(amd.gpus.size()) + " GPU(s)");
  for (const auto& w : amd.warnings)
    warn_once("discovery: " + w);
  for (auto& g : amd.gpus) {
    if (g.driver_version().empty())
      g.set_driver_version(amd.driver_version);
    gpus.push_back(std::move(g));
  }

  tried.push_back("PCI bus: " + std::to_string(bus.gpus.size())
                  + " display/3D controller(s)");
  for (const auto& w : bus.warnings)
    warn_once("discovery: " + w);

  for (const auto& g : gpus)
    for (const auto& u : g.unknown_fields())
      if (logged_.insert(g.id() + " " + u).second)
        spdlog::info("discovery: GPU {}: {}", g.id(), u);

  auto missing = add_bus(bus, gpus, out);

  // How the GPUs were read.
  bool any_driver = !gpus.empty() && nvidia != nvidia_read::unresponsive
                    && nvidia != nvidia_read::unavailable;
  if (nvidia == nvidia_read::unresponsive) {
    set_read_as(out, gpu_read_as::unresponsive);
    out.set_detail(nvidia_problem + "; the last known GPUs are kept");
  } else if (nvidia == nvidia_read::unavailable) {
    set_read_as(out, gpu_read_as::unavailable);
    out.set_detail(nvidia_problem + "; the last known GPUs are kept");
  } else if (nvidia == nvidia_read::smi) {
    set_read_as(out, gpu_read_as::nvidia_smi);
    // What nvidia-smi could not give (lines it printed that are unusable, a
    // query that failed) shows on the machine's page.
    if (!smi_detail.empty())
      out.set_detail("nvidia-smi: " + smi_detail);
  } else if (any_driver) {
    set_read_as(out, gpu_read_as::driver);
  } else {
    set_read_as(out, gpu_read_as::no_gpu);
    out.set_detail("no GPU found: " + join(tried, "; "));
  }
  for (auto& g : gpus)
    *out.add_gpus() = std::move(g);
  for (auto& t : tried)
    out.add_tried(std::move(t));

  // Conditions.
  if (nvidia == nvidia_read::unresponsive) {
    *out.add_conditions() = condition("GPU subsystem ready", false,
                                      "DriverUnresponsive", nvidia_problem);
  } else if (nvidia == nvidia_read::unavailable) {
    *out.add_conditions() = condition("GPU subsystem ready", false,
                                      "DriverUnavailable", nvidia_problem);
  } else if (!missing.empty()) {
    const auto& b = *missing.front();
    const char* reason = "DriverNotInstalled";
    if (b.driver() == "nouveau")
      reason = "WrongDriver";
    else if (b.driver() == "vfio-pci")
      reason = "GPUPassedThrough";
    std::vector<std::string> lines;
    for (const auto* m : missing)
      lines.push_back(m->pci_address() + " ("
                      + (m->name().empty() ? m->device_id() : m->name())
                      + "): " + m->missing());
    *out.add_conditions() = condition("GPU subsystem ready", false, reason,
                                      join(lines, "; "));
  } else if (out.gpus_size() > 0) {
    // Counted as they answered: a GPU lost, unreadable or whose call hangs
    // did not (a new-user trial read "answered for 8" with 2 lost and 1
    // hanging). A call that hangs is the seed's DriverUnresponsive
    // (shared/seeds/gpus.md, conditions), for one GPU as for all.
    size_t answered = 0;
    std::map<std::string, size_t> not_answered;  // status -> GPUs
    std::vector<std::string> hung;
    for (const auto& g : out.gpus()) {
      auto status = read_status(g);
      if (answers(status)) {
        ++answered;
        continue;
      }
      ++not_answered[to_string(status)];
      if (status == gpu_read_status::unresponsive)
        hung.push_back(g.id() + ": "
                       + (g.status_detail().empty() ? "a call did not return" : g.status_detail()));
    }
    std::string said = (nvidia == nvidia_read::smi ? std::string{"nvidia-smi"} : "the driver")
                       + " answered for " + std::to_string(answered)
                       + (answered == static_cast<size_t>(out.gpus_size())
                            ? std::string{}
                            : " of " + std::to_string(out.gpus_size()))
                       + " GPU(s)";
    for (const auto& [status, n] : not_answered)
      said += ", " + std::to_string(n) + " " + status;
    if (!hung.empty())
      *out.add_conditions() = condition("GPU subsystem ready", false, "DriverUnresponsive",
                                        join(hung, "; ") + "; " + said);
    else
      *out.add_conditions() = condition("GPU subsystem ready", true, "DriverResponding", said);
  } else {
    *out.add_conditions() = condition("GPU subsystem ready", true, "NoGPU",
                                      "no GPU on this machine");
  }
  if (nvml_count)
    if (auto counts = count_mismatch(bus, out, *nvml_count))
      *out.add_conditions() = std::move(*counts);
  *out.add_conditions() = condition("GPUs healthy", true, "AllGPUsHealthy",
                                    "no GPU is fenced");

  // Capabilities.
  std::vector<v1::Gpu> listed{out.gpus().begin(), out.gpus().end()};
  auto caps = summarise_gpus(listed);
  if (caps.driver_version().empty())
    caps.set_driver_version(driver_version);
  caps.set_cuda_version(cuda_version);
  caps.set_rocm_version(amd.rocm_version);
  caps.set_imex_channels(count_imex_channels(opts_.root));
  caps.set_rdma(rdma_up);
  *out.mutable_capabilities() = std::move(caps);
  return out;
}

} // namespace astraeus
