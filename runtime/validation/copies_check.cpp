#include "runtime/validation/copies_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "runtime/gpu/nvml.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/validation/cuda_driver.hpp"

namespace astraeus::validation {

namespace {

using steady = std::chrono::steady_clock;

std::string gbs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

/// How the link trained, for a fix line.
std::string link_fix(const copy_figures& g) {
  const auto& k = g.link;
  auto who = "GPU " + g.gpu + " (" + g.pci_address + ")";
  bool degraded = (k.current_width && k.max_width && *k.current_width < *k.max_width)
                  || (k.current_gts && k.max_gts && *k.current_gts + 0.01 < *k.max_gts);
  if (degraded)
    return "reseat " + who + " or check its riser; its link trained at "
           + pcie_link_text(k.current_gts, k.current_width) + " (its maximum is "
           + pcie_link_text(k.max_gts, k.max_width) + ")";
  return "its link is at " + pcie_link_text(k.current_gts, k.current_width)
         + ": check the GPU's NUMA placement (the copy's host memory), the IOMMU (iommu=pt) and "
           "the upstream link of its PCIe switch";
}

struct figure_ref {
  const char* name;
  const char* words;
  std::optional<double> copy_figures::*field;
};

constexpr figure_ref figures[] = {
  {"h2d", "host-to-device copies", &copy_figures::h2d},
  {"d2h", "device-to-host copies", &copy_figures::d2h},
  {"d2d", "device-local copies", &copy_figures::d2d},
  {"peer", "peer copies", &copy_figures::peer},
};

}  // namespace

std::optional<double> host_copy_floor(const pci_link& link, const thresholds& t) {
  if (!link.max_gts || !link.max_width)
    return std::nullopt;
  double raw = pcie_lane_gbs(*link.max_gts) * *link.max_width;
  if (raw <= 0)
    return std::nullopt;
  return raw * t.copies_pcie_efficiency;
}

void judge_copies(const std::vector<copy_figures>& gpus, const thresholds& t, check_result& out) {
  for (const auto& f : figures) {
    double best = 0;
    std::string best_gpu;
    for (const auto& g : gpus)
      if (auto v = g.*(f.field); v && *v > best) {
        best = *v;
        best_gpu = g.gpu;
      }
    for (const auto& g : gpus) {
      auto v = g.*(f.field);
      if (!v)
        continue;
      std::string name = f.name;
      std::optional<double> floor;
      std::string floor_why;
      if (name == "h2d" || name == "d2h") {
        floor = host_copy_floor(g.link, t);
        floor_why = "a " + pcie_link_text(g.link.max_gts, g.link.max_width) + " link gives";
      } else if (name == "peer" && g.nvswitch) {
        floor = t.copies_nvswitch_floor_gbs;
        floor_why = "NVSwitch gives";
      }
      double peer_floor = best * t.copies_peer_fraction;
      verdict result = verdict::pass;
      std::string expected;
      if (floor) {
        expected = ">= " + gbs(*floor);
        if (*v < *floor)
          result = verdict::fail;
        else if (*v < *floor * t.copies_warn_margin)
          result = verdict::warn;
      }
      if (gpus.size() > 1) {
        expected += std::string{expected.empty() ? "" : ", "} + ">= " + gbs(peer_floor)
                    + " (" + show_number(t.copies_peer_fraction) + " x best)";
        if (*v < peer_floor)
          result = worse(result, verdict::warn);
      }
      out.add_measurement({name, g.gpu, name == "peer" ? g.peer_gpu : "", *v, "GB/s", expected,
                           result});
      if (result == verdict::pass)
        continue;
      std::string what = g.gpu + " " + f.words
                         + (name == "peer" ? " to " + g.peer_gpu : std::string{}) + " run at "
                         + gbs(*v) + " GB/s";
      if (floor && *v < *floor * t.copies_warn_margin)
        what += ", " + std::string{*v < *floor ? "below" : "barely above"} + " the "
                + gbs(*floor) + " GB/s " + floor_why;
      if (gpus.size() > 1 && *v < peer_floor)
        what += std::string{floor && *v < *floor * t.copies_warn_margin ? "; " : ", "}
                + std::to_string(static_cast<int>(*v / best * 100 + 0.5)) + " % of the best GPU's "
                + gbs(best) + " GB/s (" + best_gpu + ")";
      std::string fix = name == "peer" ? (g.nvswitch ? "check the NVLink state of " + g.gpu
                                                         + " and " + g.peer_gpu
                                                         + " (`nvidia-smi nvlink -s`) and the "
                                                           "fabric manager"
                                                     : link_fix(g))
                        : name == "d2d" ? "run `astraeus-check dcgm --level 3` (memory bandwidth) "
                                          "on " + g.gpu + "; replace it if it stays slow"
                                        : link_fix(g);
      out.add_finding(result, g.gpu, what, fix);
    }
  }
}

}  // namespace astraeus::validation
