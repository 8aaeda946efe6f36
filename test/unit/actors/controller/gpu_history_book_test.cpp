// A GPU's history in tiers (issue 19): raw samples for an hour, 1-minute
// means to 6 h, 5-minute means to 24 h, bounded memory, look-ups by id, PCI
// address and index, and the store changes a restart reloads. Plain calls
// with explicit times: no actor, no clock, no sleep.

#include <gtest/gtest.h>

#include <memory>

#include "actor_fixture.hpp"
#include "actors/controller/gpu_history_book.hpp"
#include "messages/error.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

/// 2026-12-01 00:00:00 UTC: a whole 5-minute bucket.
constexpr int64_t t0 = 1'796'083'200'000;
constexpr int64_t second = 1000;
constexpr int64_t minute = 60 * second;
constexpr int64_t hour = 60 * minute;

gpu_point sample(int64_t unix_ms, double util, gpu_health health = gpu_health::healthy,
                 uint64_t xids = 0) {
  v1::Gpu g;
  g.set_id("GPU-a");
  g.set_utilization_percent(util);
  g.set_temperature_c(60);
  g.set_memory_used_bytes(1000);
  for (uint64_t i = 0; i < xids; ++i)
    g.add_incidents()->set_count(1);
  return point_of(g, health, unix_ms);
}

v1::GetGpuHistory ask(const std::string& gpu, int64_t since = 0, uint32_t max_points = 0) {
  v1::GetGpuHistory q;
  q.set_machine("gpu-01");
  q.set_gpu(gpu);
  q.set_since_unix_ms(since);
  q.set_max_points(max_points);
  return q;
}

} // namespace

TEST(GpuHistoryBook, KeepsRawSamplesForAnHourThenOneMinuteMeans) {
  gpu_history_book book;
  // Two samples a minute (at :00 and :30) for 90 minutes: 0 % then 50 %.
  for (int64_t m = 0; m < 90; ++m) {
    ASSERT_TRUE(book.add("gpu-01", "GPU-a", "0000:3b:00.0", 3, sample(t0 + m * minute, 0)));
    ASSERT_TRUE(book.add("gpu-01", "GPU-a", "", std::nullopt,
                         sample(t0 + m * minute + 30 * second, 50,
                                m == 10 ? gpu_health::at_risk : gpu_health::healthy, m)));
  }
  auto now = t0 + 90 * minute;
  book.compact(now);
  const auto* s = book.find("gpu-01", "GPU-a");
  ASSERT_NE(s, nullptr);
  // Minutes 0..29 ended more than an hour ago: folded; 30..89 stay raw.
  EXPECT_EQ(s->minutes.size(), 30u);
  EXPECT_EQ(s->raw.size(), 120u);
  EXPECT_TRUE(s->five_minutes.empty());
  const auto& first = s->minutes.front();
  EXPECT_EQ(first.unix_ms, t0);
  EXPECT_EQ(first.folded, 2u);
  EXPECT_FLOAT_EQ(first.utilization_percent, 25.0f);
  EXPECT_FLOAT_EQ(first.temperature_c, 60.0f);
  EXPECT_EQ(first.memory_used_bytes, 1000u);
  // The worst health of the bucket and the highest counter.
  EXPECT_EQ(s->minutes[10].health, static_cast<uint8_t>(gpu_health::at_risk));
  EXPECT_EQ(s->minutes[11].health, static_cast<uint8_t>(gpu_health::healthy));
  EXPECT_EQ(s->minutes[10].xid_events, 10u);
  // The answer is every point oldest first, tiers not overlapping.
  auto h = book.query(ask("GPU-a"));
  ASSERT_TRUE(h);
  ASSERT_EQ(h->samples_size(), 150);
  for (int i = 1; i < h->samples_size(); ++i)
    EXPECT_LT(h->samples(i - 1).unix_ms(), h->samples(i).unix_ms());
  EXPECT_EQ(h->samples(0).folded(), 2u);
  EXPECT_EQ(h->samples(149).folded(), 1u);
  EXPECT_EQ(h->samples(10).health(), "AtRisk");
  EXPECT_EQ(h->retention_seconds(), 24u * 3600u);
}

TEST(GpuHistoryBook, FoldsToFiveMinuteMeansAfterSixHoursAndDropsAfterADay) {
  gpu_history_book book;
  // One sample a minute for 8 hours, utilisation = the minute within its
  // 5-minute bucket (0..4): each 5-minute mean is 2.
  for (int64_t m = 0; m < 8 * 60; ++m)
    ASSERT_TRUE(book.add("gpu-01", "GPU-a", "", std::nullopt,
                         sample(t0 + m * minute, static_cast<double>(m % 5))));
  auto now = t0 + 8 * hour;
  book.compact(now);
  const auto* s = book.find("gpu-01", "GPU-a");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->five_minutes.size(), 24u);  // hours 0-2
  EXPECT_EQ(s->minutes.size(), 5u * 60u);  // hours 2-7
  EXPECT_EQ(s->raw.size(), 60u);           // the last hour
  EXPECT_EQ(s->five_minutes.front().unix_ms, t0);
  EXPECT_EQ(s->five_minutes.front().folded, 5u);
  EXPECT_FLOAT_EQ(s->five_minutes.front().utilization_percent, 2.0f);
  EXPECT_EQ(s->five_minutes[1].unix_ms, t0 + 5 * minute);
  // 23 hours later every 5-minute point older than 24 h is gone.
  book.compact(now + 23 * hour);
  s = book.find("gpu-01", "GPU-a");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->raw.empty());
  EXPECT_TRUE(s->minutes.empty());
  for (const auto& p : s->five_minutes)
    EXPECT_GT(p.unix_ms + 5 * minute, now + 23 * hour - 24 * hour);
  EXPECT_EQ(s->five_minutes.size(), 12u);  // the hour from 7 h on
  // A day after the last sample the GPU is forgotten altogether.
  book.compact(now + 25 * hour);
  EXPECT_EQ(book.find("gpu-01", "GPU-a"), nullptr);
  EXPECT_EQ(book.gpu_count(), 0u);
}

TEST(GpuHistoryBook, MemoryIsBoundedPerGpuAndInGpus) {
  gpu_history_limits limits;
  limits.max_gpus = 3;
  gpu_history_book book{limits};
  // A report every second for a whole day, compacted every 10 s as the
  // actor does: never more than the caps allow.
  size_t most = 0;
  for (int64_t t = 0; t < 24 * hour; t += second) {
    ASSERT_TRUE(book.add("gpu-01", "GPU-a", "", std::nullopt, sample(t0 + t, 10)));
    if (t % (10 * second) == 0) {
      book.compact(t0 + t);
      book.clear_pending();
    }
    most = std::max(most, book.point_count());
  }
  EXPECT_LE(most, limits.max_raw_points + 361 + 289);
  const auto* s = book.find("gpu-01", "GPU-a");
  ASSERT_NE(s, nullptr);
  EXPECT_LE(s->raw.size(), limits.max_raw_points);
  // Raw samples past the cap were folded, not lost: the minutes hold them.
  EXPECT_EQ(s->minutes.back().folded, 60u);
  // GPUs past max_gpus are refused; the kept ones go on.
  EXPECT_TRUE(book.add("gpu-01", "GPU-b", "", std::nullopt, sample(t0, 1)));
  EXPECT_TRUE(book.add("gpu-02", "GPU-c", "", std::nullopt, sample(t0, 1)));
  EXPECT_FALSE(book.add("gpu-02", "GPU-d", "", std::nullopt, sample(t0, 1)));
  EXPECT_EQ(book.gpu_count(), 3u);
  EXPECT_TRUE(book.add("gpu-01", "GPU-a", "", std::nullopt, sample(t0 + 25 * hour, 1)));
}

TEST(GpuHistoryBook, RefusesOldSamplesAndBadNames) {
  gpu_history_book book;
  EXPECT_TRUE(book.add("gpu-01", "GPU-a", "", std::nullopt, sample(t0, 1)));
  EXPECT_FALSE(book.add("gpu-01", "GPU-a", "", std::nullopt, sample(t0, 2)));
  EXPECT_FALSE(book.add("gpu-01", "GPU-a", "", std::nullopt, sample(t0 - 1, 2)));
  EXPECT_FALSE(book.add("", "GPU-a", "", std::nullopt, sample(t0 + 1, 2)));
  EXPECT_FALSE(book.add("gpu-01", "a/b", "", std::nullopt, sample(t0 + 1, 2)));
  EXPECT_EQ(book.point_count(), 1u);
}

TEST(GpuHistoryBook, FindsAGpuByIdPciAddressOrIndexAndFoldsToMaxPoints) {
  gpu_history_book book;
  for (int64_t i = 0; i < 100; ++i)
    book.add("gpu-01", "GPU-a", "0000:3b:00.0", 2, sample(t0 + i * second, static_cast<double>(i)));
  EXPECT_TRUE(book.query(ask("GPU-a")));
  EXPECT_TRUE(book.query(ask("0000:3b:00.0")));
  EXPECT_TRUE(book.query(ask("2")));
  auto missing = book.query(ask("GPU-z"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error(), ec::invalid_request);
  EXPECT_NE(render_error(missing.error()).find("machine gpu-01 has no GPU GPU-z"),
            std::string::npos);
  auto other = ask("GPU-a");
  other.set_machine("gpu-02");
  EXPECT_FALSE(book.query(other));
  // Since: the last 10 samples.
  auto recent = book.query(ask("GPU-a", t0 + 90 * second));
  ASSERT_TRUE(recent);
  EXPECT_EQ(recent->samples_size(), 10);
  // 100 points asked as at most 30: groups of 4 folded into 25 points.
  auto few = book.query(ask("GPU-a", 0, 30));
  ASSERT_TRUE(few);
  ASSERT_EQ(few->samples_size(), 25);
  EXPECT_EQ(few->samples(0).folded(), 4u);
  EXPECT_DOUBLE_EQ(few->samples(0).utilization_percent(), 1.5);
  EXPECT_EQ(few->samples(0).unix_ms(), t0);
}

TEST(GpuHistoryBook, RecordsStoreChangesAndReloadsThemAfterARestart) {
  test::temp_dir dir;
  auto store = Store::open(dir.path() + "/store");
  ASSERT_TRUE(store) << render_error(store.error());
  gpu_history_book before;
  for (int64_t m = 0; m < 90; ++m)
    before.add("gpu-01", "GPU-a", "0000:3b:00.0", 0,
               sample(t0 + m * minute, static_cast<double>(m % 7)));
  before.add("gpu-02", "GPU-b", "", std::nullopt, sample(t0, 3));
  // Raw points are put as they come; folding erases them and puts the
  // minute they became.
  ASSERT_EQ(before.pending_count(), 91u);
  ASSERT_FALSE((*store)->write(before.pending_changes(), false));
  before.clear_pending();
  before.compact(t0 + 90 * minute);
  EXPECT_EQ(before.pending_count(), 31u + 31u);  // 31 raw erased, 30 + 1 minutes put
  ASSERT_FALSE((*store)->write(before.pending_changes(), false));
  before.clear_pending();
  gpu_history_book after;
  auto loaded = after.load(**store, t0 + 90 * minute);
  ASSERT_TRUE(loaded) << render_error(loaded.error());
  EXPECT_EQ(*loaded, before.point_count());
  EXPECT_EQ(after.pending_count(), 0u);
  auto a = before.query(ask("GPU-a"));
  auto b = after.query(ask("GPU-a"));
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
  // Time passed while it was down: the reload compacts at once.
  gpu_history_book later;
  ASSERT_TRUE(later.load(**store, t0 + 3 * hour));
  EXPECT_TRUE(later.find("gpu-01", "GPU-a")->raw.empty());
  EXPECT_GT(later.pending_count(), 0u);
  // A removed machine's points leave the store too.
  after.forget_machine("gpu-01");
  EXPECT_EQ(after.find("gpu-01", "GPU-a"), nullptr);
  ASSERT_FALSE((*store)->write(after.pending_changes(), false));
  gpu_history_book last;
  ASSERT_TRUE(last.load(**store, t0 + 90 * minute));
  EXPECT_EQ(last.gpu_count(), 1u);
  EXPECT_NE(last.find("gpu-02", "GPU-b"), nullptr);
}

TEST(GpuHistoryBook, LimitsAreValidated) {
  gpu_history_limits l;
  EXPECT_FALSE(l.validate());
  l.five_minute_bucket_ms = 90'000;
  EXPECT_EQ(l.validate(), ec::invalid_config);
  l = {};
  l.minute_window_ms = 60'000;
  EXPECT_EQ(l.validate(), ec::invalid_config);
  l = {};
  l.max_raw_points = 0;
  EXPECT_EQ(l.validate(), ec::invalid_config);
}
