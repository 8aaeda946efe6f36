#include <cstdlib>
#include <filesystem>

#include "actor_fixture.hpp"

namespace astraeus::test {

temp_dir::temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "astraeus-test-XXXXXX").string();
  if (auto* p = ::mkdtemp(tmpl.data()))
    path_ = p;
}

temp_dir::~temp_dir() {
  std::error_code err;
  if (!path_.empty())
    std::filesystem::remove_all(path_, err);
}

} // namespace astraeus::test
