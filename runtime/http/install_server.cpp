// GET /api/v1/install.sh and /releases/ (runtime/http/install_server.hpp).

#include "runtime/http/install_server.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <sys/utsname.h>

#include "runtime/gate/tokens.hpp"

namespace astraeus::http {

namespace {

namespace fs = std::filesystem;

/// `text` fit for the inside of a single-quoted shell word.
std::string inside_quotes(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

void reply_text(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text, "text/plain; charset=utf-8");
}

bool valid_release_name(const std::string& name) {
  if (name.empty() || name.front() == '.')
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'
           || c == '+' || c == '~';
  });
}

std::string empty_folder_text(const std::string& dir) {
  return "this controller has no agent releases in " + dir
         + ": build them with `ninja -C build agent-release` (they go to "
           "build/share/astraeus/releases, which a controller run from build/bin serves), "
           "install them with `cmake --install build`, or set releases.dir\n";
}

} // namespace

std::string gate_address_for_host(const std::string& configured, const std::string& host_header) {
  if (!configured.empty() && configured.front() != ':')
    return configured;
  auto host = host_header;
  if (!host.empty() && host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    auto colon = host.find(':');
    if (colon != std::string::npos)
      host = host.substr(0, colon);
  }
  if (host.empty())
    host = "127.0.0.1";
  return host + configured;
}

std::string machine_architecture() {
  utsname u{};
  if (uname(&u) != 0)
    return "unknown";
  std::string m = u.machine;
  if (m == "x86_64")
    return "amd64";
  if (m == "aarch64")
    return "arm64";
  return m;
}

std::string default_releases_dir() {
  std::error_code err;
  auto exe = fs::read_symlink("/proc/self/exe", err);
  if (err)
    return "/usr/local/share/astraeus/releases";
  return (exe.parent_path().parent_path() / "share" / "astraeus" / "releases").string();
}

std::vector<std::string> release_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code err;
  for (fs::directory_iterator it{dir, err}, end; !err && it != end; it.increment(err))
    if (it->is_regular_file(err) && valid_release_name(it->path().filename().string()))
      out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string api_url_for_host(const installer_site& site, const std::string& host_header) {
  if (!site.advertise_url.empty()) {
    auto url = site.advertise_url;
    while (!url.empty() && url.back() == '/')
      url.pop_back();
    return url;
  }
  return site.scheme + "://" + (host_header.empty() ? std::string{"127.0.0.1"} : host_header);
}

std::string render_install_script(const installer_site& site, const std::string& host_header) {
  std::string text{install_script_template()};
  const std::pair<const char*, std::string> values[] = {
    {"@@ASTRAEUS_KEY@@", site.gate_key_hex},
    {"@@ASTRAEUS_APISERVER@@", gate_address_for_host(site.gate_address, host_header)},
    {"@@ASTRAEUS_RELEASES@@", api_url_for_host(site, host_header) + "/releases"},
    {"@@ASTRAEUS_ORG@@", site.organization},
    {"@@ASTRAEUS_ORG_ID@@", install_org_id(site.gate_key_hex)},
    {"@@ASTRAEUS_VERSION@@", ASTRAEUS_VERSION},
    {"@@ASTRAEUS_ARCH@@", machine_architecture()},
    {"@@ASTRAEUS_CURL_PIN@@", site.curl_pin},
  };
  for (const auto& [name, value] : values)
    replace_all(text, std::string{"'"} + name + "'", "'" + inside_quotes(value) + "'");
  return text;
}

bool serve_installer(const httplib::Request& req, httplib::Response& res,
                     const installer_site& site) {
  if (req.method != "GET" && req.method != "HEAD")
    return false;
  const auto& path = req.path;
  static const std::string prefix = "/releases";
  const bool releases = path.compare(0, prefix.size(), prefix) == 0
                        && (path.size() == prefix.size() || path[prefix.size()] == '/');
  if (path != "/api/v1/install.sh" && !releases)
    return false;  // not ours: no header of ours on another server's answer
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  if (path == "/api/v1/install.sh") {
    res.status = 200;
    res.set_content(render_install_script(site, req.get_header_value("Host")),
                    "text/x-shellscript; charset=utf-8");
    return true;
  }
  const auto& dir = site.releases_dir;
  auto files = release_files(dir);
  auto name = path.size() > prefix.size() + 1 ? path.substr(prefix.size() + 1) : std::string{};
  if (files.empty()) {
    reply_text(res, 404, empty_folder_text(dir));
    return true;
  }
  if (name.empty()) {
    std::string list;
    for (const auto& f : files)
      list += f + "\n";
    reply_text(res, 200, list);
    return true;
  }
  if (!valid_release_name(name) || std::find(files.begin(), files.end(), name) == files.end()) {
    reply_text(res, 404, "no release file '" + name + "' in " + dir + " (GET /releases/ lists them)\n");
    return true;
  }
  std::ifstream in{fs::path{dir} / name, std::ios::binary};
  std::ostringstream body;
  body << in.rdbuf();
  if (!in) {
    reply_text(res, 500, "cannot read " + dir + "/" + name + "\n");
    return true;
  }
  res.status = 200;
  res.set_content(body.str(), name == "SHA256SUMS" ? "text/plain; charset=utf-8"
                                                    : "application/octet-stream");
  return true;
}

} // namespace astraeus::http
