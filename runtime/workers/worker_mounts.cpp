#include "runtime/workers/worker_mounts.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>

#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include "messages/error.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

caf::error cannot(const std::string& what, const std::error_code& err) {
  return caf::make_error(ec::store_failure, "cannot " + what + ": " + err.message());
}

/// Gives `path` to `uid`:`gid` when the agent may (it runs as root); an
/// agent that is not root keeps it (its own workers run as itself).
void give_to(const fs::path& path, uint32_t uid, uint32_t gid) {
  if (::geteuid() == 0)
    static_cast<void>(::lchown(path.c_str(), uid, gid));
}

/// An empty folder at `dir` (what was there is removed), owned by uid:gid.
caf::error fresh_dir(const fs::path& dir, uint32_t uid, uint32_t gid) {
  std::error_code err;
  fs::remove_all(dir, err);
  fs::create_directories(dir, err);
  if (err)
    return cannot("create " + dir.string(), err);
  give_to(dir, uid, gid);
  return caf::none;
}

caf::error write_file(const fs::path& file, const std::string& content) {
  std::error_code err;
  fs::create_directories(file.parent_path(), err);
  fs::remove(file, err);  // read-only from an earlier start
  std::ofstream out{file, std::ios::binary | std::ios::trunc};
  out << content;
  if (!out.flush())
    return caf::make_error(ec::store_failure, "cannot write " + file.string());
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read,
                  err);
  return caf::none;
}

std::string base64(const std::string& bytes) {
  if (sodium_init() < 0)
    return {};
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL),
                  '\0');
  sodium_bin2base64(out.data(), out.size(),
                    reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.resize(out.size() - 1);  // the NUL
  return out + "\n";
}

/// Runs `cmd` through the shell; its exit status and the first 4 KiB of
/// its output.
std::pair<int, std::string> shell(const std::string& cmd) {
  return run_tool({"sh", "-c", cmd});
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

/// Unpacks the run's packed code into `<worker_dir>/code` (an entry with an
/// absolute name or a ".." part is refused), owned by uid:gid; the packed
/// file, base64, goes to `<worker_dir>/astra/code.tgz.b64`.
caf::error unpack_code(const v1::RunSpec& spec, const fs::path& worker_dir, uint32_t uid,
                       uint32_t gid) {
  auto code = worker_dir / "code";
  if (auto e = fresh_dir(code, uid, gid))
    return e;
  auto packed = worker_dir / "code.tgz";
  if (auto e = write_file(packed, spec.code_tgz()))
    return e;
  if (auto e = write_file(worker_dir / "astra" / "code.tgz.b64", base64(spec.code_tgz())))
    return e;
  auto [rc, listing] = shell("tar -tzf " + quoted(packed.string()));
  if (rc != 0)
    return caf::make_error(ec::invalid_request, "the run's code is not a gzip'd tar: "
                                                  + listing);
  std::istringstream names{listing};
  std::string name;
  while (std::getline(names, name)) {
    auto dotdot = name == ".." || name.rfind("../", 0) == 0
                  || name.find("/../") != std::string::npos
                  || (name.size() >= 3 && name.compare(name.size() - 3, 3, "/..") == 0);
    if (name.rfind('/', 0) == 0 || dotdot)
      return caf::make_error(ec::invalid_request,
                             "the run's code holds '" + name + "', outside its folder");
  }
  auto [xrc, out] = shell("tar -xzf " + quoted(packed.string()) + " -C " + quoted(code.string())
                          + " --no-same-owner --no-same-permissions");
  if (xrc != 0)
    return caf::make_error(ec::store_failure, "cannot unpack the run's code: " + out);
  if (::geteuid() == 0)
    shell("chown -R -h " + std::to_string(uid) + ":" + std::to_string(gid) + " "
          + quoted(code.string()));
  return caf::none;
}

/// The first component of absolute `path` that is a symbolic link, with
/// where it points ("/srv/data/hostetc -> /etc"); "" when none is.
std::string first_symlink(const std::string& path) {
  std::string at;
  std::string_view rest{path};
  while (!rest.empty()) {
    while (!rest.empty() && rest.front() == '/')
      rest.remove_prefix(1);
    if (rest.empty())
      break;
    auto end = rest.find('/');
    at += "/" + std::string{rest.substr(0, end)};
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0)
      return {};
    if (S_ISLNK(st.st_mode)) {
      std::error_code err;
      auto to = fs::read_symlink(at, err);
      return at + " -> " + (err ? std::string{"?"} : to.string());
    }
  }
  return {};
}

} // namespace

caf::expected<std::vector<oci_mount>>
prepare_worker_mounts(const v1::RunSpec& spec, const std::string& worker_dir, uint32_t uid,
                      uint32_t gid) {
  std::vector<oci_mount> out;
  const fs::path dir{worker_dir};
  const std::vector<std::string> rw = {"rbind", "rw", "nosuid", "nodev"};
  const std::vector<std::string> ro = {"rbind", "ro", "nosuid", "nodev"};
  for (const auto& v : spec.volumes()) {
    if (v.type() == "EmptyDir") {
      auto host = dir / "volumes" / v.name();
      if (auto e = fresh_dir(host, uid, gid))
        return e;
      out.push_back({host.string(), v.mount_path(), rw});
      continue;
    }
    std::error_code err;
    if (!fs::exists(v.host_path(), err))
      return caf::make_error(ec::invalid_request, "volume " + v.name() + ": "
                                                    + v.host_path()
                                                    + " is not on this machine");
    // A named workspace's Bind path was checked against its grants as
    // spelled; the mount follows links, so a link made inside a granted
    // folder (by the workspace's own runs) would lead anywhere on the
    // machine (a new-user trial read /etc/shadow so). Such a path is
    // refused; an admin grants the real path.
    if (!spec.namespace_().empty())
      if (auto link = first_symlink(v.host_path()); !link.empty())
        return caf::make_error(ec::invalid_request,
                               "volume " + v.name() + ": " + v.host_path()
                                 + " goes through a symbolic link (" + link
                                 + "): a workspace's Bind path must not, as a link can lead "
                                   "past its grants; grant and bind the real path");
    out.push_back({v.host_path(), v.mount_path(), v.read_write() ? rw : ro});
  }
  for (int i = 0; i < spec.configs_size(); ++i)
    for (int j = 0; j < spec.configs(i).mounts_size(); ++j) {
      const auto& m = spec.configs(i).mounts(j);
      auto file = dir / "configs" / (std::to_string(i) + "-" + std::to_string(j));
      if (auto e = write_file(file, m.content()))
        return e;
      out.push_back({file.string(), m.mount_path(), ro});
    }
  if (!spec.code_tgz().empty()) {
    if (auto e = unpack_code(spec, dir, uid, gid))
      return e;
    out.push_back({(dir / "code").string(), container_code_dir, rw});
    out.push_back({(dir / "astra" / "code.tgz.b64").string(), container_code_file, ro});
  }
  return out;
}

caf::expected<std::string> prepare_host_code(const v1::RunSpec& spec,
                                             const std::string& worker_dir) {
  if (spec.code_tgz().empty())
    return std::string{};
  if (auto e = unpack_code(spec, worker_dir, ::getuid(), ::getgid()))
    return e;
  return (fs::path{worker_dir} / "code").string();
}

void remove_worker_mounts(const std::string& worker_dir) {
  std::error_code err;
  for (const char* made : {"volumes", "configs", "code", "astra", "code.tgz"})
    fs::remove_all(fs::path{worker_dir} / made, err);
}

std::string worker_user(const v1::RunSpec& spec, const oci_image& image) {
  return spec.user().empty() ? image.user : spec.user();
}

std::string passwd_home(const std::string& rootfs, uint32_t uid) {
  std::ifstream passwd{rootfs + "/etc/passwd"};
  std::string line;
  while (std::getline(passwd, line)) {
    std::vector<std::string> f;
    std::stringstream ss{line};
    std::string x;
    while (std::getline(ss, x, ':'))
      f.push_back(x);
    if (f.size() >= 6 && f[2] == std::to_string(uid) && !f[5].empty())
      return f[5];
  }
  return "/root";
}

} // namespace astraeus
