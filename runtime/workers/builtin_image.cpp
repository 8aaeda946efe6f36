// The busybox image built from busybox-static (issue 13 item 1).

#include "runtime/workers/builtin_image.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "messages/error.hpp"

namespace astraeus {

namespace fs = std::filesystem;

const char* const busybox_applets[] = {
  "sh",    "ash",     "env",   "grep",  "egrep", "sort",  "id",     "df",    "du",
  "echo",  "printf",  "sleep", "ls",    "cat",   "head",  "tail",   "wc",    "cut",
  "tr",    "uniq",    "tee",   "sed",   "awk",   "find",  "xargs",  "true",  "false",
  "test",  "[",       "mkdir", "rm",    "rmdir", "cp",    "mv",     "ln",    "touch",
  "chmod", "chown",   "pwd",   "basename", "dirname", "seq", "expr", "which", "whoami",
  "hostname", "uname", "date", "nproc", "free",  "ps",    "kill",   "stat",  "sync",
  "mount", "umount",  "dmesg", "tar",   "gzip",  "gunzip", "vi",    "less",  "more",
  "ip",    "ping",    "nslookup", "wget", "nc",  "unshare", "timeout", "md5sum",
  "sha256sum", "yes", "dd",    "top",   "od",    "hexdump", nullptr,
};

namespace {

caf::error write_failed(const fs::path& p, const std::error_code& err) {
  return caf::make_error(ec::host_read_failure,
                         "cannot build the busybox image at " + p.string() + ": "
                           + err.message());
}

/// Writes `text` to `p`; false when it cannot.
bool write_file(const fs::path& p, const std::string& text) {
  std::ofstream out{p};
  out << text;
  return static_cast<bool>(out);
}

/// Fills `root` with the image's files.
caf::error fill(const fs::path& root, const std::string& busybox) {
  std::error_code err;
  for (const char* dir : {"bin", "etc", "dev", "proc", "sys", "tmp", "root", "usr/bin"})
    if (fs::create_directories(root / dir, err); err)
      return write_failed(root / dir, err);
  fs::permissions(root / "tmp", fs::perms::all | fs::perms::sticky_bit, err);
  if (fs::copy_file(busybox, root / "bin" / "busybox", err); err)
    return write_failed(root / "bin" / "busybox", err);
  for (const char* const* a = busybox_applets; *a != nullptr; ++a)
    if (fs::create_symlink("busybox", root / "bin" / *a, err); err)
      return write_failed(root / "bin" / *a, err);
  if (!write_file(root / "etc" / "passwd", "root:x:0:0:root:/root:/bin/sh\n")
      || !write_file(root / "etc" / "group", "root:x:0:\nwheel:x:10:root\n"))
    return write_failed(root / "etc", std::make_error_code(std::errc::io_error));
  return caf::none;
}

} // namespace

caf::error ensure_busybox_image(const std::string& images_dir, const std::string& busybox) {
  if (images_dir.empty())
    return caf::make_error(ec::invalid_request,
                           "no images folder is set (workers.images_dir)");
  auto image = fs::path{images_dir} / "busybox";
  std::error_code err;
  if (fs::exists(image, err) || fs::exists(image.string() + ".tar", err))
    return caf::none;
  if (::access(busybox.c_str(), X_OK) != 0)
    return caf::make_error(ec::invalid_request,
                           "image 'busybox' not found in " + images_dir + " and " + busybox
                             + " is missing: install Debian's busybox-static (bin/setup "
                               "does), or put an image at "
                             + image.string());
  if (fs::create_directories(images_dir, err); err)
    return write_failed(images_dir, err);
  // A folder of this build's own: the agent starts workers on several
  // threads, and two workers of one image starting together both build it
  // (one such build removed the other's half-built folder: "cannot build the
  // busybox image at .../bin/busybox: No such file or directory").
  static std::atomic<uint64_t> builds{0};
  auto building = fs::path{images_dir} / (".busybox.building." + std::to_string(::getpid())
                                          + "." + std::to_string(builds++));
  fs::remove_all(building, err);
  if (auto e = fill(building, busybox)) {
    fs::remove_all(building, err);
    return e;
  }
  fs::rename(building, image, err);
  if (err) {
    fs::remove_all(building, err);
    // Another worker built it at the same moment: that one is as good.
    if (fs::exists(image))
      return caf::none;
    return write_failed(image, err);
  }
  return caf::none;
}

} // namespace astraeus
