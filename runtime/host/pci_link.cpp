#include "runtime/host/pci_link.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

// Reads one link file; absent: nothing; unreadable or malformed: error.
std::optional<std::string> read_link_file(const std::string& root, const std::string& rel,
                                          std::string& error) {
  auto f = read_small_file(root_prefix(root) + rel, 4096);
  if (!f.opened && (f.error == ENOENT || f.error == ENOTDIR))
    return std::nullopt;
  if (f.error != 0) {
    error += (error.empty() ? "" : "; ") + rel + ": " + std::strerror(f.error);
    return std::nullopt;
  }
  return std::string{trim(f.text)};
}

}  // namespace

std::optional<double> parse_link_speed(std::string_view text) {
  text = trim(text);
  auto space = text.find(' ');
  if (space == std::string_view::npos)
    return std::nullopt;
  auto rest = trim(text.substr(space));
  if (!starts_with(rest, "GT/s"))
    return std::nullopt;
  auto v = parse_double(text.substr(0, space));
  if (!v || *v <= 0)
    return std::nullopt;
  return v;
}

int pcie_generation(double gts) {
  const double rates[] = {2.5, 5, 8, 16, 32, 64};
  for (int i = 0; i < 6; ++i)
    if (std::fabs(gts - rates[i]) < 0.01)
      return i + 1;
  return 0;
}

double pcie_lane_gbs(double gts) {
  switch (pcie_generation(gts)) {
    case 1:
    case 2: return gts * 0.8 / 8;
    case 3:
    case 4:
    case 5: return gts * 128.0 / 130.0 / 8;
    case 6: return gts * 242.0 / 256.0 / 8;
    default: return 0;
  }
}

std::string pcie_link_text(std::optional<double> gts, std::optional<int> width) {
  std::string speed = "?";
  if (gts) {
    int gen = pcie_generation(*gts);
    speed = gen ? "Gen" + std::to_string(gen) : show_number(*gts) + " GT/s";
  }
  return speed + " x" + (width ? std::to_string(*width) : std::string{"?"});
}

pci_link read_pci_link(const std::string& root, const std::string& address) {
  pci_link out;
  const std::string dir = "/sys/bus/pci/devices/" + address + "/";
  auto width = [&](const char* name, std::optional<int>& field) {
    auto text = read_link_file(root, dir + name, out.error);
    if (!text)
      return;
    auto v = parse_u64(*text);
    if (!v || *v == 0 || *v > 64) {
      out.error += (out.error.empty() ? "" : "; ") + dir + name + ": '" + *text + "'";
      return;
    }
    field = static_cast<int>(*v);
  };
  auto speed = [&](const char* name, std::optional<double>& field) {
    auto text = read_link_file(root, dir + name, out.error);
    if (!text)
      return;
    field = parse_link_speed(*text);
    if (!field)
      out.error += (out.error.empty() ? "" : "; ") + dir + name + ": '" + *text + "'";
  };
  width("current_link_width", out.current_width);
  width("max_link_width", out.max_width);
  speed("current_link_speed", out.current_gts);
  speed("max_link_speed", out.max_gts);
  return out;
}

}  // namespace astraeus
