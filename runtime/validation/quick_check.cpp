#include "runtime/validation/quick_check.hpp"

#include <chrono>
#include <map>

#include "messages/gpu_read.hpp"
#include "runtime/gpu/gpu_discovery.hpp"
#include "runtime/gpu/nvml.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/workers/cdi.hpp"
#include "runtime/workers/cdi_host.hpp"

namespace astraeus::validation {

namespace {

using steady = std::chrono::steady_clock;

std::string under_root(const std::string& root, const std::string& path) {
  return root_prefix(root) + path;
}

/// NVML as a whole: loaded, initialised, answering in time; and each GPU.
void judge_nvml(const nvml_result& nv, double ms, const check_options& o, check_result& out) {
  const auto& t = o.policy.values();
  out.add_measurement({"nvml_probe", "", "", ms, "ms",
                       "each call < " + show_number(t.quick_nvml_deadline_ms),
                       nv.status == nvml_result::driver_status::unresponsive ? verdict::fail
                                                                             : verdict::pass});
  switch (nv.status) {
    case nvml_result::driver_status::ok: break;
    case nvml_result::driver_status::not_loaded:
      out.add_finding(verdict::fail, "", "the NVIDIA driver is not loaded: " + nv.detail,
                      "install the NVIDIA driver (the installer's --install-nvidia-driver) or load "
                      "it with `modprobe nvidia`; `dmesg | grep -i nvrm` says why it did not load");
      return;
    case nvml_result::driver_status::init_failed:
      out.add_finding(verdict::fail, "", "NVML does not initialise: " + nv.detail,
                      "check `dmesg | grep -i -e nvrm -e xid`; a driver and library of different "
                      "versions need the library reinstalled or the machine rebooted");
      return;
    case nvml_result::driver_status::unresponsive:
      out.add_finding(verdict::fail, "", "the NVIDIA driver does not answer: " + nv.detail,
                      "the driver is hung: drain the machine and reboot it");
      return;
  }
  for (const auto& g : nv.gpus) {
    auto status = read_status(g);
    auto name = g.id().empty() ? g.pci_address() : g.id();
    if (status == gpu_read_status::unresponsive)
      out.add_finding(verdict::fail, name, name + " does not answer NVML: " + g.status_detail(),
                      "reset the GPU when idle (`nvidia-smi -r -i " + g.pci_address()
                        + "`) or reboot the machine");
    else if (status == gpu_read_status::lost)
      out.add_finding(verdict::fail, name, name + " is lost to the driver: " + g.status_detail(),
                      "reboot the machine; if it is lost again, reseat or replace the GPU");
  }
}

/// Every NVIDIA GPU on the PCI bus is bound to the driver and listed by NVML.
void judge_bus(const bus_scan& bus, const nvml_result& nv, check_result& out) {
  if (nv.status != nvml_result::driver_status::ok)
    return;
  v1::GpuSection section;
  for (const auto& g : nv.gpus)
    *section.add_gpus() = g;
  size_t on_bus = 0;
  for (const auto& b : bus.gpus)
    if (b.vendor() == "nvidia") {
      ++on_bus;
      if (!b.missing().empty())
        out.add_finding(verdict::fail, b.pci_address(),
                        "GPU " + b.pci_address() + " is on the PCI bus but " + b.missing(),
                        b.driver().empty() || b.driver() == "nouveau"
                          ? "install the NVIDIA driver and blacklist nouveau, then reboot"
                          : "unbind it from " + b.driver() + " if it is not meant for a VM");
    }
  out.add_measurement({"gpus_seen", "", "", static_cast<double>(nv.gpus.size()), "GPUs",
                       "== " + std::to_string(on_bus) + " on the PCI bus",
                       on_bus != 0 && nv.gpus.size() != on_bus ? verdict::fail : verdict::pass});
  if (auto c = count_mismatch(bus, section, nv.gpus.size()))
    out.add_finding(verdict::fail, "", "the driver does not see every GPU: " + c->message(),
                    "look for Xid 79 or `RmInitAdapter failed` in `dmesg`; reboot, and reseat the "
                    "GPU that stays missing");
}

/// The NVIDIA CDI spec names exactly the GPUs NVML listed, with nodes that exist.
void judge_cdi(const nvml_result& nv, const check_options& o, check_result& out) {
  if (nv.status != nvml_result::driver_status::ok || nv.gpus.empty())
    return;
  cdi_options c;
  // The agent's folders when it said them (its cdi.*_dir), else the usual
  // ones under the host root.
  const std::string static_dir = o.cdi_static_dir.empty() ? "/etc/cdi" : o.cdi_static_dir;
  const std::string dynamic_dir = o.cdi_dynamic_dir.empty() ? "/var/run/cdi" : o.cdi_dynamic_dir;
  c.static_dir = o.cdi_static_dir.empty() ? under_root(o.host_root, static_dir) : static_dir;
  c.dynamic_dir = o.cdi_dynamic_dir.empty() ? under_root(o.host_root, dynamic_dir) : dynamic_dir;
  c.nvidia_ctk.clear();
  c.host_root = o.host_root;
  auto reg = load_cdi(c);
  std::vector<std::string> names;
  std::vector<cdi_gpu> discovered;
  for (const auto& g : nv.gpus) {
    if (g.id().empty())
      continue;
    names.push_back("nvidia.com/gpu=" + g.id());
    discovered.push_back(cdi_gpu{g.id(), g.pci_address(), g.has_index() ? int64_t{g.index()} : -1,
                                 nvidia_device_minor(o.host_root, g.pci_address())});
  }
  std::string fix = "regenerate it: `nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml "
                    "--device-name-strategy=uuid` (the agent does this when the driver changes)";
  bool any_nvidia = false;
  for (const auto& [key, dev] : reg.devices)
    any_nvidia = any_nvidia || dev.kind == "nvidia.com/gpu";
  for (const auto& [file, why] : reg.refused)
    out.add_finding(verdict::fail, "", "CDI spec " + file + " is invalid: " + why, fix);
  if (!any_nvidia && reg.stale.empty()) {
    out.add_finding(verdict::fail, "",
                    "there is no NVIDIA CDI spec in " + static_dir + " or " + dynamic_dir,
                    "install nvidia-container-toolkit (nvidia-ctk), then " + fix);
    out.add_measurement({"cdi_spec", "", "", 0, "valid", "== 1", verdict::fail});
    return;
  }
  auto stale = nvidia_spec_stale(reg, names, discovered);
  out.add_measurement({"cdi_spec", "", "", stale.empty() ? 1.0 : 0.0, "valid", "== 1",
                       stale.empty() ? verdict::pass : verdict::fail});
  if (!stale.empty())
    out.add_finding(verdict::fail, "", "the NVIDIA CDI spec is stale: " + stale, fix);
}

}  // namespace

void judge_links(const std::vector<gpu_link>& links, const thresholds& t, check_result& out) {
  for (const auto& l : links) {
    const auto& k = l.link;
    bool narrow = false;
    if (k.current_width && k.max_width) {
      narrow = *k.current_width < t.quick_link_width_fraction * *k.max_width;
      out.add_measurement({"pcie_width", l.gpu, "", static_cast<double>(*k.current_width), "lanes",
                           ">= " + show_number(t.quick_link_width_fraction * *k.max_width),
                           narrow ? verdict::fail : verdict::pass});
      if (narrow)
        out.add_finding(verdict::fail, l.gpu,
                        l.gpu + " (" + l.pci_address + ") PCIe link trained at "
                          + pcie_link_text(k.current_gts, k.current_width) + ", its maximum is "
                          + pcie_link_text(k.max_gts, k.max_width)
                          + ": host copies run at a fraction of their speed",
                        "reseat GPU " + l.gpu + " (" + l.pci_address
                          + ") or check its riser and slot; its link trained at "
                          + pcie_link_text(k.current_gts, k.current_width));
    }
    if (k.current_gts && k.max_gts) {
      bool slow = *k.current_gts + 0.01 < *k.max_gts;
      out.add_measurement({"pcie_speed", l.gpu, "", *k.current_gts, "GT/s",
                           "== " + show_number(*k.max_gts), slow ? verdict::warn : verdict::pass});
      // A narrow link's finding already names its speed.
      if (slow && !narrow)
        out.add_finding(verdict::warn, l.gpu,
                        l.gpu + " (" + l.pci_address + ") PCIe link runs at "
                          + pcie_link_text(k.current_gts, k.current_width) + " of "
                          + pcie_link_text(k.max_gts, k.max_width)
                          + " (an idle GPU may lower its link speed)",
                        "run `astraeus-check copies`: it reads the link under load; if it stays "
                        "below Gen" + std::to_string(pcie_generation(*k.max_gts))
                          + ", reseat GPU " + l.gpu + " or check its riser");
    }
    if (!k.error.empty())
      out.add_finding(verdict::warn, l.gpu, "cannot read the PCIe link of " + l.gpu + ": " + k.error,
                      "check that sysfs is mounted and the device is present");
  }
}

check_result run_quick(const check_options& o) {
  auto start = steady::now();
  check_result out;
  out.check = "quick";
  auto bus = scan_pci_gpus(o.host_root);

  nvml_options n;
  n.library = o.nvml_lib;
  n.call_deadline = std::chrono::milliseconds{
    static_cast<long long>(o.policy.values().quick_nvml_deadline_ms)};
  n.sysfs_root = o.host_root;
  nvml_result nv;
  double nvml_ms = 0;
  {
    nvml_prober prober{n};
    auto t0 = steady::now();
    nv = prober.probe();
    nvml_ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
  }
  judge_nvml(nv, nvml_ms, o, out);
  judge_bus(bus, nv, out);
  judge_cdi(nv, o, out);

  std::map<std::string, std::string> uuid_by_pci;
  for (const auto& g : nv.gpus)
    if (!g.id().empty())
      uuid_by_pci[g.pci_address()] = g.id();
  std::vector<gpu_link> links;
  for (const auto& b : bus.gpus) {
    if (b.vendor() != "nvidia")
      continue;
    auto i = uuid_by_pci.find(b.pci_address());
    links.push_back(gpu_link{i == uuid_by_pci.end() ? b.pci_address() : i->second,
                             b.pci_address(), read_pci_link(o.host_root, b.pci_address())});
  }
  judge_links(links, o.policy.values(), out);

  if (bus.gpus.empty() && nv.gpus.empty() && nv.status == nvml_result::driver_status::not_loaded) {
    out.findings.clear();
    out.measurements.clear();
    out.result = verdict::skipped;
    out.summary = "no NVIDIA GPU on the PCI bus and no driver: nothing to check";
  }
  return finish_result(std::move(out), start,
                       "driver " + nv.driver_version + " answers; " + std::to_string(nv.gpus.size())
                         + " GPU(s) seen, CDI spec valid, every PCIe link at its maximum");
}

}  // namespace astraeus::validation
