#include "messages/run_key.hpp"

#include "messages/astraeus.pb.h"

namespace astraeus {

std::string run_key(std::string_view workspace, std::string_view name) {
  if (workspace.empty() || workspace == default_workspace)
    return std::string{name};
  std::string out{workspace};
  out += '/';
  out += name;
  return out;
}

std::string run_key(const v1::RunSpec& spec) {
  return run_key(spec.workspace(), spec.name());
}

std::string run_ref(std::string_view workspace, std::string_view name) {
  if (workspace.empty())
    return std::string{name};
  std::string out{workspace};
  out += '/';
  out += name;
  return out;
}

run_ref_parts parse_run_ref(std::string_view ref) {
  auto slash = ref.find('/');
  if (slash == std::string_view::npos)
    return {{}, std::string{ref}};
  return {std::string{ref.substr(0, slash)}, std::string{ref.substr(slash + 1)}};
}

std::string describe_run(std::string_view ref) {
  auto parts = parse_run_ref(ref);
  if (parts.workspace.empty())
    return parts.name;
  return parts.name + " in workspace " + parts.workspace;
}

} // namespace astraeus
