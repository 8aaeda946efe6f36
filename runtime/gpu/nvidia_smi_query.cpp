// `nvidia-smi -q`: the recovery action per GPU (issue 18, rule 6). See
// nvidia_smi_query.hpp for the source of the field.

#include "runtime/gpu/nvidia_smi_query.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "runtime/gpu/nvidia_smi.hpp"

namespace astraeus {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

} // namespace

std::optional<uint32_t> recovery_action_from_word(std::string_view word) {
  static const std::pair<const char*, uint32_t> words[] = {
    {"none", 0},           {"reset", 1},           {"gpu reset", 1},
    {"reboot", 2},         {"node reboot", 2},     {"drain p2p", 3},
    {"drain and reset", 4}, {"drain p2p and reset", 4}, {"recover imex domain", 5},
    {"bus reset", 6},      {"system reboot", 7},
  };
  auto w = lower(trim(word));
  for (const auto& [text, value] : words)
    if (w == text)
      return value;
  return std::nullopt;
}

size_t apply_nvidia_smi_query(std::string_view text, std::vector<v1::Gpu>& gpus) {
  v1::Gpu* gpu = nullptr;
  size_t count = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    // A GPU section: "GPU 00000000:3B:00.0" at the start of a line.
    if (line.size() > 4 && line.compare(0, 4, "GPU ") == 0 && line.find(':') != 4) {
      gpu = nullptr;
      if (auto pci = normalize_pci_bus_id(trim(line.substr(4))))
        for (auto& g : gpus)
          if (g.pci_address() == *pci)
            gpu = &g;
      continue;
    }
    if (gpu == nullptr)
      continue;
    auto colon = line.find(':');
    if (colon == std::string_view::npos || trim(line.substr(0, colon)) != "GPU Recovery Action")
      continue;
    auto value = trim(line.substr(colon + 1));
    if (auto action = recovery_action_from_word(value)) {
      gpu->set_recovery_action(*action);
      ++count;
    } else if (lower(value).find("unknown error") != std::string::npos) {
      gpu->add_unknown_fields("recovery_action: Unknown Error");
    }
  }
  return count;
}

} // namespace astraeus
