#include "runtime/host/sysfs_text.hpp"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

namespace astraeus {
namespace {

namespace fs = std::filesystem;

using views = std::vector<std::string_view>;

TEST(SysfsText, TrimsTheCLocaleWhitespace) {
  EXPECT_EQ(trim(" \t1\n\r\f\v"), "1");
  EXPECT_EQ(trim("a b"), "a b");
  EXPECT_EQ(trim(" \n"), "");
  EXPECT_EQ(trim(""), "");
}

TEST(SysfsText, SplitsKeepingOrDroppingBlankLines) {
  EXPECT_EQ(split("a,,b", ','), (views{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (views{""}));
  EXPECT_EQ(split_lines("a\n\nb\n"), (views{"a", "", "b"}));
  EXPECT_EQ(split_lines("a\r\n\n\n"), (views{"a\r", "", ""}));
  EXPECT_EQ(split_lines(""), views{});
  EXPECT_EQ(split_lines("\n"), (views{""}));
  EXPECT_EQ(nonblank_lines(" a \n\n b"), (views{"a", "b"}));
  EXPECT_EQ(nonblank_lines("\n \n"), views{});
}

TEST(SysfsText, ParsesWholeIntegersIgnoringSurroundingWhitespace) {
  EXPECT_EQ(parse_u64("42\n"), 42u);
  EXPECT_EQ(parse_u64("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", " \n", "+1", "-1", "1 2", "12abc", "1.5", "18446744073709551616"})
    EXPECT_FALSE(parse_u64(bad)) << bad;
  EXPECT_EQ(parse_i64(" -1\n"), -1);
  for (const char* bad : {"", "+1", "--1", "1-", "9223372036854775808"})
    EXPECT_FALSE(parse_i64(bad)) << bad;
  EXPECT_EQ(parse_hex_u32("0x10de\n"), 0x10deu);
  EXPECT_EQ(parse_hex_u32("10DE"), 0x10deu);
  EXPECT_EQ(parse_hex_u32("0X030000"), 0x030000u);
  for (const char* bad : {"", "0x", "0xg", "100000000", "-1"})
    EXPECT_FALSE(parse_hex_u32(bad)) << bad;
}

TEST(SysfsText, ParsesFiniteDoublesWithoutTrimming) {
  EXPECT_EQ(parse_double("1.5"), 1.5);
  EXPECT_EQ(parse_double("-2"), -2.0);
  EXPECT_EQ(parse_double("1e3"), 1000.0);
  for (const char* bad : {"", " 1", "1\n", "1.5x", "inf", "nan", "1e999"})
    EXPECT_FALSE(parse_double(bad)) << bad;
}

TEST(SysfsText, LowerCasesAsciiOnly) {
  EXPECT_EQ(ascii_lower("0000:3B:00.0 \xC3\x89"), "0000:3b:00.0 \xC3\x89");
  EXPECT_TRUE(starts_with("gpu0", "gpu"));
  EXPECT_TRUE(starts_with("x", ""));
  EXPECT_FALSE(starts_with("gp", "gpu"));
  EXPECT_TRUE(all_digits("0123"));
  EXPECT_FALSE(all_digits(""));
  EXPECT_FALSE(all_digits("-1"));
}

TEST(SysfsText, RootPrefixDropsTrailingSlashes) {
  EXPECT_EQ(root_prefix("/"), "");
  EXPECT_EQ(root_prefix("///"), "");
  EXPECT_EQ(root_prefix(""), "");
  EXPECT_EQ(root_prefix("/tmp/fixture/"), "/tmp/fixture");
  EXPECT_EQ(root_prefix("fixture"), "fixture");
}

TEST(SysfsText, ReadsMissingEmptyGarbageAndOversizedFiles) {
  auto dir = fs::temp_directory_path() / ("sysfs_text_test." + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream{dir / name, std::ios::binary} << text;
    return (dir / name).string();
  };

  auto missing = read_small_file((dir / "missing").string());
  EXPECT_EQ(missing.error, ENOENT);
  EXPECT_FALSE(missing.opened);
  EXPECT_EQ(missing.text, "");

  auto not_dir = read_small_file(write("file", "x") + "/below");
  EXPECT_EQ(not_dir.error, ENOTDIR);
  EXPECT_FALSE(not_dir.opened);

  auto empty = read_small_file(write("empty", ""));
  EXPECT_EQ(empty.error, 0);
  EXPECT_TRUE(empty.opened);
  EXPECT_FALSE(empty.too_large);
  EXPECT_EQ(empty.text, "");

  std::string garbage{"\x00\xff" "1\n", 4};
  auto bytes = read_small_file(write("garbage", garbage));
  EXPECT_EQ(bytes.error, 0);
  EXPECT_EQ(bytes.text, garbage);

  std::string big(20000, 'a');
  auto exact = read_small_file(write("exact", big), big.size());
  EXPECT_FALSE(exact.too_large);
  EXPECT_EQ(exact.text.size(), big.size());
  auto over = read_small_file(write("over", big), 1000);
  EXPECT_TRUE(over.too_large);
  EXPECT_EQ(over.error, 0);
  EXPECT_EQ(over.text, big.substr(0, 1000));

  // A directory opens but cannot be read: the error comes from read(2).
  auto directory = read_small_file(dir.string());
  EXPECT_TRUE(directory.opened);
  EXPECT_EQ(directory.error, EISDIR);

  fs::remove_all(dir);
}

}  // namespace
}  // namespace astraeus
