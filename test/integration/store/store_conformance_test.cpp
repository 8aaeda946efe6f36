// The store's conformance suite (issue 15): one set of tests, run against
// both backends, RocksDB in a temporary folder and etcd as a real
// single-member `etcd` on loopback ports. Label "ha".

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "integration/store/etcd_cluster.hpp"
#include "messages/astraeus.pb.h"
#include "store/etcd_store.hpp"
#include "store/rocksdb_store.hpp"

namespace astraeus::itest {
namespace {

/// One backend under test, fresh for each test.
class StoreConformance : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    if (GetParam() == "rocksdb") {
      auto opened = Store::open((dir_ / "rocksdb").string());
      ASSERT_TRUE(opened) << render_error(opened.error());
      store_ = std::move(*opened);
      return;
    }
    start_etcd(0);
  }

  void TearDown() override {
    store_.reset();
    if (etcd_)
      etcd_->dump(HasFailure());
  }

  /// (Re)starts the etcd member with `quota` bytes of backend quota.
  void start_etcd(uint64_t quota) {
    store_.reset();
    etcd_.reset();
    etcd_ = std::make_unique<etcd_cluster>(dir_.path(), 1, quota);
    ASSERT_TRUE(etcd_->wait_ready(10s)) << "etcd did not start";
    etcd_options opts;
    opts.endpoints = etcd_->endpoints();
    opts.prefix = "/astraeus/conformance/";
    auto opened = etcd_store::open(opts);
    ASSERT_TRUE(opened) << render_error(opened.error());
    store_ = std::move(*opened);
  }

  bool is_etcd() const {
    return GetParam() == "etcd";
  }

  /// Makes every revision before the current one unavailable to `watch`.
  void compact_history() {
    if (is_etcd()) {
      auto rev = store_->revision();
      ASSERT_TRUE(rev);
      ASSERT_FALSE(static_cast<etcd_store&>(*store_).compact(*rev));
      return;
    }
    for (size_t i = 0; i <= rocksdb_store::change_log_capacity; ++i)
      ASSERT_FALSE(store_->put_raw(family::audit, "filler" + std::to_string(i), "x", false));
  }

  temp_dir dir_{"astraeus-store"};
  std::unique_ptr<etcd_cluster> etcd_;
  std::shared_ptr<Store> store_;
};

std::map<std::string, std::string> dump(Store& st, family f) {
  std::map<std::string, std::string> out;
  auto err = st.for_each(f, [&](std::string_view k, std::string_view v) {
    out.emplace(std::string{k}, std::string{v});
    return true;
  });
  EXPECT_FALSE(err) << render_error(err);
  return out;
}

TEST_P(StoreConformance, PutGetEraseRoundTrip) {
  v1::MachineRecord rec;
  rec.set_name("gpu-01");
  rec.set_machine_id("m-1");
  ASSERT_FALSE(store_->put(family::machines, "gpu-01", rec));
  v1::MachineRecord back;
  auto found = store_->get(family::machines, "gpu-01", back);
  ASSERT_TRUE(found) << render_error(found.error());
  EXPECT_TRUE(*found);
  EXPECT_EQ(back.machine_id(), "m-1");
  // Families are separate key spaces.
  v1::MachineRecord other;
  EXPECT_FALSE(*store_->get(family::gpus, "gpu-01", other));
  ASSERT_FALSE(store_->erase(family::machines, "gpu-01"));
  EXPECT_FALSE(*store_->get(family::machines, "gpu-01", back));
  // Erasing an absent key is no error.
  EXPECT_FALSE(store_->erase(family::machines, "never-there"));
  // Arbitrary bytes round-trip, empty values included.
  std::string bytes{"\0\xff\x01 binary", 10};
  ASSERT_FALSE(store_->put_raw(family::audit, std::string{"k\0\xff", 3}, bytes));
  ASSERT_FALSE(store_->put_raw(family::audit, "empty", ""));
  auto raw = store_->get_raw(family::audit, std::string{"k\0\xff", 3});
  ASSERT_TRUE(raw && *raw);
  EXPECT_EQ(**raw, bytes);
  auto empty = store_->get_raw(family::audit, "empty");
  ASSERT_TRUE(empty && *empty);
  EXPECT_EQ(**empty, "");
}

TEST_P(StoreConformance, CorruptRecordIsNamed) {
  ASSERT_FALSE(store_->put_raw(family::machines, "bad", "\xff\xff\xff"));
  v1::MachineRecord rec;
  auto got = store_->get(family::machines, "bad", rec);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), static_cast<uint8_t>(ec::corrupt_record));
  EXPECT_NE(render_error(got.error()).find("machines key \"bad\""), std::string::npos)
    << render_error(got.error());
}

TEST_P(StoreConformance, ScanIsOrderedAndPerFamily) {
  for (auto k : {"b", "a", "c", "a\xff", "ab"})
    ASSERT_FALSE(store_->put_raw(family::runs, k, std::string{"v-"} + k));
  ASSERT_FALSE(store_->put_raw(family::workers, "z", "other family"));
  // 1,200 keys: more than one page of etcd's range reads.
  std::vector<Store::change> many;
  for (int i = 0; i < 1200; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "w%05d", i);
    many.push_back({family::workspaces, key, std::string(10, 'x')});
  }
  ASSERT_FALSE(store_->write_chunked(many));
  auto runs = dump(*store_, family::runs);
  std::vector<std::string> keys;
  for (auto& [k, v] : runs)
    keys.push_back(k);
  // Bytewise: 'b' (0x62) sorts before 0xff.
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "ab", "a\xff", "b", "c"}));
  std::vector<std::string> order;
  ASSERT_FALSE(store_->for_each(family::runs, [&](std::string_view k, std::string_view v) {
    order.emplace_back(k);
    EXPECT_EQ(v, "v-" + std::string{k});
    return order.size() < 2;  // stops early
  }));
  EXPECT_EQ(order, (std::vector<std::string>{"a", "ab"}));
  EXPECT_EQ(dump(*store_, family::workspaces).size(), 1200u);
  EXPECT_EQ(dump(*store_, family::workers).size(), 1u);
}

TEST_P(StoreConformance, BatchIsAtomic) {
  ASSERT_FALSE(store_->put_raw(family::tokens, "old", "1"));
  std::vector<Store::change> batch = {{family::tokens, "t1", std::string{"a"}},
                                      {family::machines, "m1", std::string{"b"}},
                                      {family::tokens, "old", std::nullopt}};
  ASSERT_FALSE(store_->write(batch));
  EXPECT_EQ(dump(*store_, family::tokens), (std::map<std::string, std::string>{{"t1", "a"}}));
  EXPECT_EQ(dump(*store_, family::machines).size(), 1u);
  // A failed batch applies nothing.
  store_->faults().fail_next_writes(1);
  std::vector<Store::change> failing = {{family::tokens, "t2", std::string{"x"}},
                                        {family::tokens, "t1", std::nullopt}};
  auto err = store_->write(failing);
  ASSERT_TRUE(err);
  EXPECT_EQ(err.code(), static_cast<uint8_t>(ec::store_failure));
  EXPECT_NE(render_error(err).find("batch of 2 change(s)"), std::string::npos)
    << render_error(err);
  EXPECT_EQ(dump(*store_, family::tokens), (std::map<std::string, std::string>{{"t1", "a"}}));
  // A batch beyond the backend's limits is refused whole, or fits.
  std::vector<Store::change> big;
  for (int i = 0; i < 200; ++i)
    big.push_back({family::audit, "a" + std::to_string(i), std::string{"v"}});
  auto big_err = store_->write(big);
  if (is_etcd()) {
    ASSERT_TRUE(big_err);
    EXPECT_NE(render_error(big_err).find("128 operations per transaction"), std::string::npos)
      << render_error(big_err);
    EXPECT_TRUE(dump(*store_, family::audit).empty());
    ASSERT_FALSE(store_->write_chunked(big));
  } else {
    ASSERT_FALSE(big_err) << render_error(big_err);
  }
  EXPECT_EQ(dump(*store_, family::audit).size(), 200u);
}

TEST_P(StoreConformance, ChunkedWritesKeepTheOrderOfAKeyWrittenTwice) {
  // 300 changes: three transactions on etcd, which may go out side by side
  // only when no key is in two of them. Here "k" is, so its last value wins.
  std::vector<Store::change> changes;
  changes.push_back({family::runs, "k", std::string{"first"}});
  for (int i = 0; i < 298; ++i)
    changes.push_back({family::runs, "r" + std::to_string(i), std::string{"v"}});
  changes.push_back({family::runs, "k", std::string{"last"}});
  ASSERT_FALSE(store_->write_chunked(changes));
  EXPECT_EQ(**store_->get_raw(family::runs, "k"), "last");
  EXPECT_EQ(dump(*store_, family::runs).size(), 299u);
}

TEST_P(StoreConformance, CallsFromSeveralThreadsAllLand) {
  // etcd's client keeps a pool of connections: calls run side by side.
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i)
        if (store_->put_raw(family::workers, std::to_string(t) + "-" + std::to_string(i),
                            std::to_string(i)))
          ++failures;
    });
  for (auto& w : writers)
    w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(dump(*store_, family::workers).size(), 200u);
}

TEST_P(StoreConformance, CompareAndSwap) {
  auto f = family::validations;
  auto r = store_->compare_and_swap(f, "k", std::nullopt, std::string{"v1"});
  ASSERT_TRUE(r) << render_error(r.error());
  EXPECT_TRUE(*r);
  EXPECT_FALSE(*store_->compare_and_swap(f, "k", std::nullopt, std::string{"v2"}));
  EXPECT_FALSE(*store_->compare_and_swap(f, "k", std::string{"wrong"}, std::string{"v2"}));
  EXPECT_EQ(**store_->get_raw(f, "k"), "v1");
  EXPECT_TRUE(*store_->compare_and_swap(f, "k", std::string{"v1"}, std::string{"v2"}));
  EXPECT_EQ(**store_->get_raw(f, "k"), "v2");
  EXPECT_FALSE(*store_->compare_and_swap(f, "absent", std::string{""}, std::string{"x"}));
  EXPECT_TRUE(*store_->compare_and_swap(f, "k", std::string{"v2"}, std::nullopt));
  EXPECT_FALSE(*store_->get_raw(f, "k"));
  // Racing writers: exactly one wins each round.
  std::atomic<int> wins{0};
  std::vector<std::thread> racers;
  for (int i = 0; i < 4; ++i)
    racers.emplace_back([&, i] {
      auto won = store_->compare_and_swap(f, "race", std::nullopt, "r" + std::to_string(i));
      if (won && *won)
        ++wins;
    });
  for (auto& t : racers)
    t.join();
  EXPECT_EQ(wins.load(), 1);
}

TEST_P(StoreConformance, LeaseExpiryErasesItsKeys) {
  auto lease = store_->grant_lease(std::chrono::seconds{1});
  ASSERT_TRUE(lease) << render_error(lease.error());
  auto f = family::workers;
  ASSERT_TRUE(*store_->compare_and_swap(f, "held", std::nullopt, std::string{"x"}, *lease));
  ASSERT_FALSE(store_->put_raw(f, "plain", "y"));
  // Renewed, it outlives its TTL.
  auto t0 = steady::now();
  while (steady::now() - t0 < 1500ms) {
    auto left = store_->keep_alive(*lease);
    ASSERT_TRUE(left) << render_error(left.error());
    EXPECT_GE(*left, 1);
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_TRUE(*store_->get_raw(f, "held"));
  // Left alone, it expires (etcd grants at least 2 s) and takes its key.
  EXPECT_TRUE(wait_until([&] { return !*store_->get_raw(f, "held"); }, 6s, 100ms));
  EXPECT_TRUE(*store_->get_raw(f, "plain"));
  auto gone = store_->keep_alive(*lease);
  ASSERT_FALSE(gone);
  EXPECT_NE(render_error(gone.error()).find("not granted or has expired"), std::string::npos)
    << render_error(gone.error());
  auto late = store_->compare_and_swap(f, "late", std::nullopt, std::string{"z"}, *lease);
  ASSERT_FALSE(late);
  EXPECT_NE(render_error(late.error()).find("not granted or has expired"), std::string::npos)
    << render_error(late.error());
  // A revoked lease takes its keys at once.
  auto second = store_->grant_lease(std::chrono::seconds{5});
  ASSERT_TRUE(second);
  ASSERT_TRUE(*store_->compare_and_swap(f, "held", std::nullopt, std::string{"x"}, *second));
  ASSERT_FALSE(store_->revoke_lease(*second));
  EXPECT_FALSE(*store_->get_raw(f, "held"));
}

TEST_P(StoreConformance, WatchResumesFromRevision) {
  auto f = family::faults;
  auto before = store_->revision();
  ASSERT_TRUE(before);
  ASSERT_FALSE(store_->put_raw(f, "a", "1"));
  ASSERT_FALSE(store_->put_raw(family::gpus, "noise", "n"));
  ASSERT_FALSE(store_->put_raw(f, "b", "2"));
  ASSERT_FALSE(store_->erase(f, "a"));
  std::vector<store_event> seen;
  auto collect = [&](size_t want, int64_t from) {
    auto t0 = steady::now();
    return store_->watch(
      f, from,
      [&](const store_event& e) {
        seen.push_back(e);
        return seen.size() < want;
      },
      [&] { return steady::now() - t0 > 5s; }, 100ms);
  };
  ASSERT_FALSE(collect(3, *before + 1));
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].key, "a");
  EXPECT_EQ(seen[0].value, std::optional<std::string>{"1"});
  EXPECT_EQ(seen[1].key, "b");
  EXPECT_EQ(seen[2].key, "a");
  EXPECT_FALSE(seen[2].value);
  EXPECT_LT(seen[0].revision, seen[1].revision);
  EXPECT_LT(seen[1].revision, seen[2].revision);
  // Resumed after the last one seen, it sees only what came later, even
  // while it waits.
  auto resume = seen.back().revision + 1;
  seen.clear();
  std::thread later{[&] {
    std::this_thread::sleep_for(300ms);
    (void) store_->put_raw(f, "c", "3");
  }};
  auto err = collect(1, resume);
  later.join();
  ASSERT_FALSE(err) << render_error(err);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].key, "c");
  // History that is gone is said to be gone.
  compact_history();
  seen.clear();
  auto old = collect(1, *before + 1);
  ASSERT_TRUE(old);
  EXPECT_NE(render_error(old).find("is compacted"), std::string::npos) << render_error(old);
}

TEST_P(StoreConformance, FullStoreIsStoreFull) {
  if (!is_etcd()) {
    // RocksDB on a really full disk: test/crash/store_crash_test.cpp. Here
    // the fault hook gives the same error a full disk does.
    store_->faults().fail_next_writes(1, store_faults::kind::disk_full);
  } else {
    // A small space quota, filled for real.
    start_etcd(2 * 1024 * 1024);
    std::string blob(512 * 1024, 'q');
    caf::error err;
    for (int i = 0; i < 40 && !err; ++i)
      err = store_->put_raw(family::audit, "fill" + std::to_string(i), blob);
    ASSERT_TRUE(err) << "the quota never filled";
    EXPECT_NE(render_error(err).find("store full: "), std::string::npos) << render_error(err);
    EXPECT_NE(store_->write_problem().find("store full: "), std::string::npos);
  }
  v1::MachineRecord rec;
  rec.set_name("gpu-02");
  auto err = store_->put(family::machines, "gpu-02", rec);
  ASSERT_TRUE(err);
  EXPECT_EQ(err.code(), static_cast<uint8_t>(ec::store_failure));
  EXPECT_EQ(render_error(err).find("store full: "), 0u) << render_error(err);
  // Reads keep working.
  EXPECT_TRUE(store_->get(family::machines, "gpu-02", rec));
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformance, ::testing::Values("rocksdb", "etcd"),
                         [](const auto& info) { return info.param; });

} // namespace
} // namespace astraeus::itest
