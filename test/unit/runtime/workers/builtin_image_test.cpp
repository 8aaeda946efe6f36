// `--image busybox` on a fresh machine: the image built from busybox-static
// (runtime/workers/builtin_image.cpp), found by find_image.

#include "runtime/workers/builtin_image.hpp"

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "messages/error.hpp"
#include "runtime/workers/oci_bundle.hpp"

namespace astraeus {
namespace {

namespace fs = std::filesystem;

/// A stand-in for /bin/busybox: any executable file.
fs::path fake_busybox(const fs::path& dir) {
  auto p = dir / "busybox";
  std::ofstream{p} << "#!/bin/sh\n";
  fs::permissions(p, fs::perms::owner_all);
  return p;
}

TEST(BusyboxImage, ANameWithNoImageIsBuiltFromBusyboxStatic) {
  test::temp_dir dir;
  auto images = fs::path{dir.path()} / "images";
  auto bb = fake_busybox(dir.path());
  ASSERT_FALSE(ensure_busybox_image(images.string(), bb.string()));
  auto root = images / "busybox";
  EXPECT_TRUE(fs::is_regular_file(root / "bin" / "busybox"));
  EXPECT_EQ(fs::read_symlink(root / "bin" / "sh"), "busybox");
  EXPECT_TRUE(fs::is_symlink(root / "bin" / "env"));
  EXPECT_TRUE(fs::is_directory(root / "dev"));
  std::ifstream group{root / "etc" / "group"};
  std::string text{std::istreambuf_iterator<char>{group}, {}};
  EXPECT_EQ(text, "root:x:0:\nwheel:x:10:root\n") << "the seed's id prints 10(wheel)";
  // Nothing half-built is left beside it.
  size_t entries = 0;
  for (auto& e : fs::directory_iterator{images}) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

// Two workers of the busybox image starting at once on one agent (its start
// threads) both build it: both starts succeed, one image, nothing left
// beside it (a shared temporary folder made one of them fail, 2026-12-06).
TEST(BusyboxImage, TwoStartsBuildingItAtOnceBothSucceed) {
  test::temp_dir dir;
  auto bb = fake_busybox(dir.path());
  for (int round = 0; round < 20; ++round) {
    auto images = fs::path{dir.path()} / ("images-" + std::to_string(round));
    caf::error first, second;
    std::thread other([&] { second = ensure_busybox_image(images.string(), bb.string()); });
    first = ensure_busybox_image(images.string(), bb.string());
    other.join();
    ASSERT_FALSE(first) << "round " << round << ": " << render_error(first);
    ASSERT_FALSE(second) << "round " << round << ": " << render_error(second);
    EXPECT_EQ(fs::read_symlink(images / "busybox" / "bin" / "sh"), "busybox");
    size_t entries = 0;
    for (auto& e : fs::directory_iterator{images}) {
      (void)e;
      ++entries;
    }
    EXPECT_EQ(entries, 1u) << "round " << round << ": only the image";
  }
}

TEST(BusyboxImage, AnImageTheOperatorPutThereIsKept) {
  test::temp_dir dir;
  auto images = fs::path{dir.path()} / "images";
  fs::create_directories(images / "busybox" / "mine");
  ASSERT_FALSE(ensure_busybox_image(images.string(), "/nonexistent/busybox"));
  EXPECT_TRUE(fs::is_directory(images / "busybox" / "mine"));
  EXPECT_FALSE(fs::exists(images / "busybox" / "bin"));
}

TEST(BusyboxImage, WithoutBusyboxStaticTheErrorSaysWhatToInstall) {
  test::temp_dir dir;
  auto err = ensure_busybox_image(dir.path(), "/nonexistent/busybox");
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("busybox-static"), std::string::npos) << render_error(err);
}

TEST(BusyboxImage, FindImageBuildsItForTheNameBusybox) {
  if (!fs::exists("/bin/busybox"))
    GTEST_SKIP() << "busybox-static is not installed";
  test::temp_dir dir;
  auto found = find_image("busybox", dir.path());
  ASSERT_TRUE(found) << render_error(found.error());
  EXPECT_EQ(found->kind, "rootfs");
  EXPECT_EQ(found->path, (fs::path{dir.path()} / "busybox").string());
  // Another name is still "not found", naming where it looked.
  auto other = find_image("alpine", dir.path());
  ASSERT_FALSE(other);
  EXPECT_NE(render_error(other.error()).find("image 'alpine' not found"), std::string::npos);
}

} // namespace
} // namespace astraeus
