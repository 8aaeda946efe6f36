#include "runtime/workers/worker_outputs.hpp"

#include <fstream>
#include <system_error>

#include <filesystem>

#include <unistd.h>

#include "messages/error.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

/// At most 60 characters of `x`, in double quotes.
std::string shown(const std::string& x) {
  return "\"" + (x.size() <= 60 ? x : x.substr(0, 57) + "...") + "\"";
}

} // namespace

std::string outputs_host_dir(const std::string& worker_dir) {
  return (fs::path{worker_dir} / "outputs").string();
}

caf::error prepare_outputs_dir(const std::string& worker_dir, unsigned uid, unsigned gid) {
  auto dir = outputs_host_dir(worker_dir);
  std::error_code err;
  fs::create_directories(dir, err);
  if (!err)
    fs::remove(fs::path{dir} / "outputs", err);
  if (err)
    return caf::make_error(ec::store_failure,
                           "cannot make the outputs folder " + dir + ": " + err.message());
  if (::chown(dir.c_str(), uid, gid) != 0)
    fs::permissions(dir, fs::perms::all, err);
  return caf::none;
}

worker_outputs parse_outputs(const std::string& text) {
  worker_outputs out;
  size_t start = 0;
  for (size_t number = 1; start < text.size(); ++number) {
    auto end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    auto line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos)
      continue;
    auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) {
      out.warnings.push_back("outputs line " + std::to_string(number) + ": " + shown(line)
                             + (eq == 0 ? " has no key" : " is not key=value")
                             + " (skipped)");
      continue;
    }
    out.values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

worker_outputs read_outputs(const std::string& worker_dir) {
  auto path = fs::path{outputs_host_dir(worker_dir)} / "outputs";
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return {};
  std::string text(max_outputs_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  bool cut = text.size() > max_outputs_bytes;
  if (cut) {
    text.resize(max_outputs_bytes);
    // The line the cap cut in two is not a value.
    auto last = text.rfind('\n');
    text.resize(last == std::string::npos ? 0 : last + 1);
  }
  auto out = parse_outputs(text);
  if (cut)
    out.warnings.push_back("outputs: the file is larger than "
                           + std::to_string(max_outputs_bytes)
                           + " bytes; only its lines within the first "
                           + std::to_string(max_outputs_bytes) + " bytes were read");
  return out;
}

} // namespace astraeus
