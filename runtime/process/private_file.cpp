#include "runtime/process/private_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace fs = std::filesystem;

caf::error write_private_file(const std::string& path, const std::string& text) {
  std::error_code err;
  auto parent = fs::path{path}.parent_path();
  if (!parent.empty() && !fs::exists(parent, err)) {
    fs::create_directories(parent, err);
    if (err)
      return caf::make_error(ec::store_failure, "cannot create " + parent.string()
                                                  + ": " + err.message());
    ::chmod(parent.c_str(), 0700);
  }
  auto tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return caf::make_error(ec::store_failure,
                           "cannot write " + tmp + ": " + std::strerror(errno));
  auto data = text + "\n";
  size_t off = 0;
  while (off < data.size()) {
    auto n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      auto why = std::string{std::strerror(errno)};
      ::close(fd);
      ::unlink(tmp.c_str());
      return caf::make_error(ec::store_failure, "cannot write " + tmp + ": " + why);
    }
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  fs::rename(tmp, path, err);
  if (err)
    return caf::make_error(ec::store_failure,
                           "cannot write " + path + ": " + err.message());
  return caf::none;
}

caf::expected<std::string> read_trimmed_file(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    return caf::make_error(ec::store_failure,
                           "cannot read " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string{trim(ss.str())};
}

} // namespace astraeus
