#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "messages/error.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

/// A fresh folder under the test temp dir, removed with everything in it.
struct temp_dir {
  std::string path;

  temp_dir() {
    std::string pattern = testing::TempDir() + "astraeus-store-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr)
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    path = pattern;
  }

  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

std::unique_ptr<Store> open_or_fail(const std::string& path) {
  auto st = Store::open(path);
  EXPECT_TRUE(st) << render_error(st.error());
  return st ? std::move(*st) : nullptr;
}

v1::MachineRecord machine(const std::string& name) {
  v1::MachineRecord rec;
  rec.set_name(name);
  rec.set_machine_id("id-" + name);
  rec.set_cordoned(true);
  (*rec.mutable_labels())["pool"] = "h100";
  rec.set_registered_unix_ms(1700000000000);
  rec.mutable_last_facts()->mutable_cpu()->set_logical_cpus(64);
  return rec;
}

} // namespace

TEST(Store, FamilyNamesAreStable) {
  EXPECT_STREQ(to_string(family::machines), "machines");
  EXPECT_STREQ(to_string(family::gpus), "gpus");
  EXPECT_STREQ(to_string(family::faults), "faults");
  EXPECT_STREQ(to_string(family::runs), "runs");
  EXPECT_STREQ(to_string(family::workers), "workers");
  EXPECT_STREQ(to_string(family::tokens), "tokens");
  EXPECT_STREQ(to_string(family::validations), "validations");
  EXPECT_STREQ(to_string(family::audit), "audit");
}

TEST(Store, PutGetRoundTripsAMachineRecord) {
  temp_dir dir;
  auto st = open_or_fail(dir.path + "/a/b/controller");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->path(), dir.path + "/a/b/controller");
  auto rec = machine("gpu-01");
  ASSERT_FALSE(st->put(family::machines, "gpu-01", rec));
  v1::MachineRecord copy;
  auto found = st->get(family::machines, "gpu-01", copy);
  ASSERT_TRUE(found) << render_error(found.error());
  EXPECT_TRUE(*found);
  EXPECT_EQ(copy.SerializeAsString(), rec.SerializeAsString());
  EXPECT_EQ(copy.labels().at("pool"), "h100");
  // Families are separate key spaces.
  v1::MachineRecord other;
  auto absent = st->get(family::gpus, "gpu-01", other);
  ASSERT_TRUE(absent);
  EXPECT_FALSE(*absent);
}

TEST(Store, ReopenKeepsDataInEveryFamily) {
  temp_dir dir;
  std::vector<family> all = {family::machines, family::gpus,
                             family::faults,   family::runs,
                             family::workers,  family::tokens,
                             family::validations, family::audit};
  {
    auto st = open_or_fail(dir.path);
    ASSERT_TRUE(st);
    for (auto f : all)
      ASSERT_FALSE(st->put(f, "k", machine(to_string(f))));
  }
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  for (auto f : all) {
    v1::MachineRecord rec;
    auto found = st->get(f, "k", rec);
    ASSERT_TRUE(found) << render_error(found.error());
    EXPECT_TRUE(*found) << to_string(f);
    EXPECT_EQ(rec.name(), to_string(f));
  }
}

TEST(Store, SecondOpenOfAnOpenStoreFailsNamingThePath) {
  temp_dir dir;
  auto first = open_or_fail(dir.path);
  ASSERT_TRUE(first);
  auto second = Store::open(dir.path);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error(), ec::store_failure);
  auto text = render_error(second.error());
  EXPECT_NE(text.find(dir.path), std::string::npos) << text;
  EXPECT_NE(text.find("in use"), std::string::npos) << text;
  // The first stays usable.
  EXPECT_FALSE(first->put(family::runs, "r", machine("x")));
}

TEST(Store, BytesThatDoNotParseAreACorruptRecordNamingTheKey) {
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  ASSERT_FALSE(st->put_raw(family::machines, "gpu-07", "\xff\xff"));
  v1::MachineRecord rec;
  auto found = st->get(family::machines, "gpu-07", rec);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error(), ec::corrupt_record);
  auto text = render_error(found.error());
  EXPECT_NE(text.find("gpu-07"), std::string::npos) << text;
  EXPECT_NE(text.find("machines"), std::string::npos) << text;
  // load_all fails on the same record rather than dropping it.
  ASSERT_FALSE(st->put(family::machines, "gpu-01", machine("gpu-01")));
  auto all = st->load_all<v1::MachineRecord>(family::machines);
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error(), ec::corrupt_record);
  EXPECT_NE(render_error(all.error()).find("gpu-07"), std::string::npos);
}

TEST(Store, EraseRemovesAKeyAndErasingAnAbsentKeyIsFine) {
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  ASSERT_FALSE(st->put(family::tokens, "t1", machine("a")));
  ASSERT_FALSE(st->erase(family::tokens, "t1"));
  v1::MachineRecord rec;
  auto found = st->get(family::tokens, "t1", rec);
  ASSERT_TRUE(found);
  EXPECT_FALSE(*found);
  EXPECT_FALSE(st->erase(family::tokens, "never-there", false));
}

TEST(Store, ForEachVisitsInKeyOrderAndStopsEarly) {
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  for (auto key : {"gpu-03", "gpu-01", "gpu-02", "a"})
    ASSERT_FALSE(st->put(family::machines, key, machine(key), false));
  ASSERT_FALSE(st->put(family::gpus, "other-family", machine("z")));
  std::vector<std::string> keys;
  ASSERT_FALSE(st->for_each(family::machines,
                            [&](std::string_view k, std::string_view) {
                              keys.emplace_back(k);
                              return true;
                            }));
  EXPECT_EQ(keys,
            (std::vector<std::string>{"a", "gpu-01", "gpu-02", "gpu-03"}));
  keys.clear();
  ASSERT_FALSE(st->for_each(family::machines,
                            [&](std::string_view k, std::string_view) {
                              keys.emplace_back(k);
                              return keys.size() < 2;
                            }));
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "gpu-01"}));
  auto all = st->load_all<v1::MachineRecord>(family::machines);
  ASSERT_TRUE(all) << render_error(all.error());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[1].first, "gpu-01");
  EXPECT_EQ((*all)[1].second.name(), "gpu-01");
}

TEST(Store, OpenOnARegularFileFailsNamingThePath) {
  temp_dir dir;
  auto file = dir.path + "/not-a-folder";
  std::ofstream{file} << "x";
  auto st = Store::open(file);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error(), ec::store_failure);
  auto text = render_error(st.error());
  EXPECT_NE(text.find(file), std::string::npos) << text;
  // A folder that cannot be created because a parent is a file, too.
  auto below = Store::open(file + "/db");
  ASSERT_FALSE(below);
  EXPECT_NE(render_error(below.error()).find(file + "/db"), std::string::npos);
}

// The fault hook (issue 11): a test makes writes fail through the calls
// production makes; the errors read as a real failure's.
TEST(StoreFaults, TheNextWriteFailsNamingTheStoreAndNothingIsWritten) {
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  st->faults().fail_next_writes();
  auto err = st->put(family::machines, "gpu-01", machine("gpu-01"));
  ASSERT_TRUE(err);
  EXPECT_EQ(err, ec::store_failure);
  auto text = render_error(err);
  EXPECT_NE(text.find("store " + dir.path), std::string::npos) << text;
  EXPECT_NE(text.find("machines key \"gpu-01\""), std::string::npos) << text;
  EXPECT_NE(text.find("IO error"), std::string::npos) << text;
  v1::MachineRecord out;
  EXPECT_FALSE(*st->get(family::machines, "gpu-01", out)) << "nothing was written";
  // Only the next one: the write after it goes through.
  EXPECT_FALSE(st->put(family::machines, "gpu-01", machine("gpu-01")));
  EXPECT_TRUE(*st->get(family::machines, "gpu-01", out));
  EXPECT_EQ(st->faults().failed(), 1u);
}

TEST(StoreFaults, NWritesOfEveryKindFailThenWritesResume) {
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  ASSERT_FALSE(st->put(family::machines, "a", machine("a")));
  st->faults().fail_next_writes(4);
  EXPECT_EQ(st->put_raw(family::machines, "b", "x"), ec::store_failure);
  EXPECT_EQ(st->erase(family::machines, "a"), ec::store_failure);
  std::vector<Store::change> batch{{family::machines, "c", std::string{"y"}}};
  auto failed_batch = st->write(batch);
  EXPECT_EQ(failed_batch, ec::store_failure);
  EXPECT_NE(render_error(failed_batch).find("a batch of 1 change(s)"), std::string::npos);
  EXPECT_EQ(st->put(family::machines, "d", machine("d")), ec::store_failure);
  EXPECT_EQ(st->faults().armed(), 0u);
  v1::MachineRecord out;
  EXPECT_TRUE(*st->get(family::machines, "a", out)) << "the failed erase removed nothing";
  EXPECT_FALSE(st->write(batch));
  EXPECT_EQ(st->faults().failed(), 4u);
}

TEST(StoreFaults, ADiskFullReadsAsRocksDbsNoSpace) {
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  st->faults().fail_next_writes(1, store_faults::kind::disk_full);
  auto text = render_error(st->put(family::machines, "gpu-01", machine("gpu-01")));
  EXPECT_NE(text.find("No space left on device"), std::string::npos) << text;
}

TEST(StoreFaults, AFullDiskIsRefusedNamingTheStoreAndItsFreeBytes) {
  // Issue 23 item 1: "store full: PATH has N bytes free".
  temp_dir dir;
  auto st = open_or_fail(dir.path);
  ASSERT_TRUE(st);
  st->faults().fail_next_writes(1, store_faults::kind::disk_full);
  auto text = render_error(st->put(family::machines, "gpu-01", machine("gpu-01")));
  EXPECT_NE(text.find("store full: " + dir.path + " has "), std::string::npos) << text;
  EXPECT_NE(text.find(" bytes free"), std::string::npos) << text;
  // An injected fault stops nothing: the next write goes through.
  EXPECT_FALSE(st->put(family::machines, "gpu-01", machine("gpu-01")));
  EXPECT_EQ(st->write_problem(), "");
}
