#include "actors/controller/gpu_history_book.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"

namespace astraeus {

caf::error gpu_history_limits::validate() const {
  auto bad = [](const std::string& what) {
    return caf::make_error(ec::invalid_config, "gpu history: " + what);
  };
  if (raw_window_ms <= 0 || minute_bucket_ms <= 0 || minute_window_ms <= 0
      || five_minute_bucket_ms <= 0 || five_minute_window_ms <= 0)
    return bad("every window and bucket must be longer than 0 ms");
  if (five_minute_bucket_ms % minute_bucket_ms != 0)
    return bad("the 5-minute bucket (" + std::to_string(five_minute_bucket_ms)
               + " ms) is not a multiple of the minute bucket ("
               + std::to_string(minute_bucket_ms) + " ms)");
  if (minute_window_ms < raw_window_ms || five_minute_window_ms < minute_window_ms)
    return bad("each tier's window must reach at least as far back as the one above it");
  if (max_raw_points == 0 || max_gpus == 0 || max_pending_changes == 0)
    return bad("max_raw_points, max_gpus and max_pending_changes must be at least 1");
  return caf::none;
}

namespace {

/// How bad a health is, for "the worst of a bucket": Healthy < AtRisk <
/// Foreign < Faulty; 0 = unknown.
int severity(uint8_t health) {
  switch (static_cast<gpu_health>(health)) {
    case gpu_health::healthy: return 1;
    case gpu_health::at_risk: return 2;
    case gpu_health::foreign: return 3;
    case gpu_health::faulty: return 4;
  }
  return 0;
}

int64_t bucket_start(int64_t unix_ms, int64_t bucket_ms) {
  auto q = unix_ms / bucket_ms;
  if (unix_ms % bucket_ms < 0)
    --q;
  return q * bucket_ms;
}

/// Accumulates a weighted mean of one series.
struct mean {
  double sum = 0;
  double weight = 0;
  void add(bool present, double x, uint32_t w) {
    if (present) {
      sum += x * w;
      weight += w;
    }
  }
  bool any() const {
    return weight > 0;
  }
  double value() const {
    return weight > 0 ? sum / weight : 0;
  }
};

} // namespace

v1::GpuSample to_sample(const gpu_point& p) {
  v1::GpuSample s;
  s.set_unix_ms(p.unix_ms);
  if (p.has(gpu_point::utilization))
    s.set_utilization_percent(p.utilization_percent);
  if (p.has(gpu_point::memory_used))
    s.set_memory_used_bytes(p.memory_used_bytes);
  if (p.has(gpu_point::temperature))
    s.set_temperature_c(p.temperature_c);
  if (p.has(gpu_point::power))
    s.set_power_watts(p.power_watts);
  if (p.has(gpu_point::sm_clock))
    s.set_sm_clock_mhz(p.sm_clock_mhz);
  if (p.has(gpu_point::memory_clock))
    s.set_memory_clock_mhz(p.memory_clock_mhz);
  s.set_xid_events(p.xid_events);
  if (p.has(gpu_point::ecc))
    s.set_ecc_uncorrectable(p.ecc_uncorrectable);
  if (p.health != 0)
    s.set_health(to_string(static_cast<gpu_health>(p.health)));
  s.set_folded(p.folded);
  return s;
}

namespace {

/// Sets series `bit` of `p` to `value` when the sample has it.
template <class T, class V>
void take_series(gpu_point& p, gpu_point::series bit, T gpu_point::*field, bool has, V value) {
  if (!has)
    return;
  p.present |= bit;
  p.*field = static_cast<T>(value);
}

/// Takes the six series a GpuSample and a Gpu share (same accessors in
/// both) into `p`.
template <class Series>
void take_shared_series(gpu_point& p, const Series& s) {
  take_series(p, gpu_point::utilization, &gpu_point::utilization_percent,
              s.has_utilization_percent(), s.utilization_percent());
  take_series(p, gpu_point::memory_used, &gpu_point::memory_used_bytes,
              s.has_memory_used_bytes(), s.memory_used_bytes());
  take_series(p, gpu_point::temperature, &gpu_point::temperature_c, s.has_temperature_c(),
              s.temperature_c());
  take_series(p, gpu_point::power, &gpu_point::power_watts, s.has_power_watts(),
              s.power_watts());
  take_series(p, gpu_point::sm_clock, &gpu_point::sm_clock_mhz, s.has_sm_clock_mhz(),
              s.sm_clock_mhz());
  take_series(p, gpu_point::memory_clock, &gpu_point::memory_clock_mhz,
              s.has_memory_clock_mhz(), s.memory_clock_mhz());
}

} // namespace

gpu_point from_sample(const v1::GpuSample& s) {
  gpu_point p;
  p.unix_ms = s.unix_ms();
  take_shared_series(p, s);
  take_series(p, gpu_point::ecc, &gpu_point::ecc_uncorrectable, s.has_ecc_uncorrectable(),
              s.ecc_uncorrectable());
  p.xid_events = s.xid_events();
  if (auto h = parse_gpu_health(s.health()))
    p.health = static_cast<uint8_t>(*h);
  p.folded = std::max<uint32_t>(1, s.folded());
  return p;
}

gpu_point point_of(const v1::Gpu& facts, std::optional<gpu_health> health,
                   int64_t unix_ms) {
  // As from_sample(a GpuSample of these facts) makes it, without the sample.
  gpu_point p;
  p.unix_ms = unix_ms;
  take_shared_series(p, facts);
  uint64_t events = 0;
  for (const auto& i : facts.incidents())
    events += std::max<uint64_t>(1, i.count());
  p.xid_events = events;
  if (facts.ecc().has_volatile_uncorrectable())
    take_series(p, gpu_point::ecc, &gpu_point::ecc_uncorrectable, true,
                facts.ecc().volatile_uncorrectable());
  else if (facts.has_ras_uncorrectable())
    take_series(p, gpu_point::ecc, &gpu_point::ecc_uncorrectable, true,
                facts.ras_uncorrectable());
  if (health)
    p.health = static_cast<uint8_t>(*health);
  p.folded = 1;
  return p;
}

gpu_point fold_points(const gpu_point* first, const gpu_point* last, int64_t unix_ms) {
  mean util, mem, temp, power, sm, mclk;
  gpu_point out;
  out.unix_ms = unix_ms;
  out.folded = 0;
  for (auto* p = first; p != last; ++p) {
    auto w = std::max<uint32_t>(1, p->folded);
    util.add(p->has(gpu_point::utilization), p->utilization_percent, w);
    mem.add(p->has(gpu_point::memory_used), static_cast<double>(p->memory_used_bytes), w);
    temp.add(p->has(gpu_point::temperature), p->temperature_c, w);
    power.add(p->has(gpu_point::power), p->power_watts, w);
    sm.add(p->has(gpu_point::sm_clock), p->sm_clock_mhz, w);
    mclk.add(p->has(gpu_point::memory_clock), p->memory_clock_mhz, w);
    out.xid_events = std::max(out.xid_events, p->xid_events);
    if (p->has(gpu_point::ecc)) {
      out.present |= gpu_point::ecc;
      out.ecc_uncorrectable = std::max(out.ecc_uncorrectable, p->ecc_uncorrectable);
    }
    if (severity(p->health) > severity(out.health))
      out.health = p->health;
    out.folded += w;
  }
  auto take = [&](const mean& m, gpu_point::series s, auto& field) {
    if (!m.any())
      return;
    out.present |= s;
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_floating_point_v<T>)
      field = static_cast<T>(m.value());
    else
      field = static_cast<T>(m.value() + 0.5);
  };
  take(util, gpu_point::utilization, out.utilization_percent);
  take(mem, gpu_point::memory_used, out.memory_used_bytes);
  take(temp, gpu_point::temperature, out.temperature_c);
  take(power, gpu_point::power, out.power_watts);
  take(sm, gpu_point::sm_clock, out.sm_clock_mhz);
  take(mclk, gpu_point::memory_clock, out.memory_clock_mhz);
  return out;
}

// -- the book ------------------------------------------------------------------

gpu_history_book::gpu_history_book(gpu_history_limits limits) : limits_(limits) {
  // nop
}

std::string gpu_history_book::key_of(const std::string& machine, const std::string& gpu,
                                     char tier, int64_t unix_ms) {
  char ms[24];
  std::snprintf(ms, sizeof(ms), "%020lld", static_cast<long long>(unix_ms));
  return machine + '/' + gpu + '/' + tier + '/' + ms;
}

void gpu_history_book::put(const gpu_series& s, char tier, const gpu_point& p) {
  pending_[key_of(s.machine, s.gpu, tier, p.unix_ms)] = p;
}

void gpu_history_book::erase(const gpu_series& s, char tier, int64_t unix_ms) {
  pending_[key_of(s.machine, s.gpu, tier, unix_ms)] = std::nullopt;
}

void gpu_history_book::drop_pending_if_over() {
  if (pending_.size() <= limits_.max_pending_changes)
    return;
  spdlog::error("gpu history: {} changes wait for the store (it refuses writes); "
                "dropping them: the stored history misses them, the controller's "
                "memory keeps them",
                pending_.size());
  pending_.clear();
}

bool gpu_history_book::add(const std::string& machine, const std::string& gpu,
                           const std::string& pci_address, std::optional<uint32_t> index,
                           const gpu_point& p) {
  if (machine.empty() || gpu.empty() || machine.find('/') != std::string::npos
      || gpu.find('/') != std::string::npos)
    return false;
  auto name = machine + '/' + gpu;
  auto i = series_.find(name);
  if (i == series_.end()) {
    if (series_.size() >= limits_.max_gpus)
      return false;
    i = series_.emplace(name, gpu_series{}).first;
    i->second.machine = machine;
    i->second.gpu = gpu;
  }
  auto& s = i->second;
  if (!s.raw.empty() && p.unix_ms <= s.raw.back().unix_ms)
    return false;
  if (!pci_address.empty())
    s.pci_address = pci_address;
  if (index)
    s.index = index;
  auto raw = p;
  raw.folded = 1;
  s.raw.push_back(raw);
  put(s, 'r', raw);
  if (s.raw.size() > limits_.max_raw_points)
    fold_down(s, s.raw, 'r', s.minutes, 'm', limits_.minute_bucket_ms, INT64_MIN,
              limits_.max_raw_points);
  drop_pending_if_over();
  return true;
}

void gpu_history_book::fold_down(gpu_series& s, std::deque<gpu_point>& from, char from_tier,
                                 std::deque<gpu_point>& to, char to_tier, int64_t bucket_ms,
                                 int64_t cutoff, size_t keep_at_most) {
  std::vector<gpu_point> bucket;
  while (!from.empty()) {
    auto start = bucket_start(from.front().unix_ms, bucket_ms);
    auto end = start + bucket_ms;
    if (end > cutoff && from.size() <= keep_at_most)
      return;
    bucket.clear();
    // A bucket folded early (over the cap) may get later points: they join
    // its point in the tier below.
    if (!to.empty() && to.back().unix_ms == start) {
      bucket.push_back(to.back());
      to.pop_back();
    }
    while (!from.empty() && from.front().unix_ms < end) {
      erase(s, from_tier, from.front().unix_ms);
      bucket.push_back(from.front());
      from.pop_front();
    }
    auto folded = fold_points(bucket.data(), bucket.data() + bucket.size(), start);
    to.push_back(folded);
    put(s, to_tier, folded);
  }
}

void gpu_history_book::compact(int64_t now_unix_ms) {
  const auto& l = limits_;
  auto minute_cap = static_cast<size_t>(l.minute_window_ms / l.minute_bucket_ms) + 1;
  auto five_cap = static_cast<size_t>(l.five_minute_window_ms / l.five_minute_bucket_ms) + 1;
  for (auto i = series_.begin(); i != series_.end();) {
    auto& s = i->second;
    fold_down(s, s.raw, 'r', s.minutes, 'm', l.minute_bucket_ms,
              now_unix_ms - l.raw_window_ms, l.max_raw_points);
    fold_down(s, s.minutes, 'm', s.five_minutes, 'f', l.five_minute_bucket_ms,
              now_unix_ms - l.minute_window_ms, minute_cap);
    auto oldest = now_unix_ms - l.five_minute_window_ms;
    while (!s.five_minutes.empty()
           && (s.five_minutes.front().unix_ms + l.five_minute_bucket_ms <= oldest
               || s.five_minutes.size() > five_cap)) {
      erase(s, 'f', s.five_minutes.front().unix_ms);
      s.five_minutes.pop_front();
    }
    if (s.size() == 0)
      i = series_.erase(i);
    else
      ++i;
  }
  drop_pending_if_over();
}

void gpu_history_book::forget_machine(const std::string& machine) {
  auto prefix = machine + '/';
  auto i = series_.lower_bound(prefix);
  while (i != series_.end() && i->first.compare(0, prefix.size(), prefix) == 0) {
    auto& s = i->second;
    for (auto [tier, points] : {std::pair{'f', &s.five_minutes}, std::pair{'m', &s.minutes},
                                std::pair{'r', &s.raw}})
      for (const auto& p : *points)
        erase(s, tier, p.unix_ms);
    i = series_.erase(i);
  }
}

const gpu_series* gpu_history_book::find(const std::string& machine,
                                         const std::string& gpu) const {
  auto i = series_.find(machine + '/' + gpu);
  if (i != series_.end())
    return &i->second;
  // Not an id: a PCI address or the driver's index on that machine.
  auto prefix = machine + '/';
  bool is_index = !gpu.empty() && gpu.size() <= 4
                  && std::all_of(gpu.begin(), gpu.end(), [](char c) { return c >= '0' && c <= '9'; });
  for (i = series_.lower_bound(prefix);
       i != series_.end() && i->first.compare(0, prefix.size(), prefix) == 0; ++i) {
    const auto& s = i->second;
    if ((!s.pci_address.empty() && s.pci_address == gpu)
        || (is_index && s.index && std::to_string(*s.index) == gpu))
      return &s;
  }
  return nullptr;
}

caf::expected<v1::GpuHistory> gpu_history_book::query(const v1::GetGpuHistory& q) const {
  const auto* s = find(q.machine(), q.gpu());
  if (s == nullptr)
    return caf::make_error(ec::invalid_request,
                           "machine " + q.machine() + " has no GPU " + q.gpu()
                             + " in its history (no report of it since the last 24 h)");
  std::vector<gpu_point> points;
  points.reserve(s->size());
  for (const auto* tier : {&s->five_minutes, &s->minutes, &s->raw})
    for (const auto& p : *tier)
      if (p.unix_ms >= q.since_unix_ms())
        points.push_back(p);
  v1::GpuHistory out;
  out.set_machine(s->machine);
  out.set_gpu(s->gpu);
  out.set_retention_seconds(retention_seconds());
  auto n = points.size();
  size_t group = 1;
  if (q.max_points() > 0 && n > q.max_points())
    group = (n + q.max_points() - 1) / q.max_points();
  for (size_t at = 0; at < n; at += group) {
    auto end = std::min(n, at + group);
    if (group == 1)
      *out.add_samples() = to_sample(points[at]);
    else
      *out.add_samples() = to_sample(
        fold_points(points.data() + at, points.data() + end, points[at].unix_ms));
  }
  return out;
}

size_t gpu_history_book::gpu_count() const {
  return series_.size();
}

size_t gpu_history_book::point_count() const {
  size_t n = 0;
  for (const auto& [name, s] : series_)
    n += s.size();
  return n;
}

std::vector<Store::change> gpu_history_book::pending_changes() const {
  std::vector<Store::change> out;
  out.reserve(pending_.size());
  for (const auto& [key, p] : pending_) {
    Store::change c{family::gpu_history, key, std::nullopt};
    if (p)
      c.value = to_sample(*p).SerializeAsString();
    out.push_back(std::move(c));
  }
  return out;
}

size_t gpu_history_book::pending_count() const {
  return pending_.size();
}

void gpu_history_book::clear_pending() {
  pending_.clear();
}

uint64_t gpu_history_book::retention_seconds() const {
  return static_cast<uint64_t>(limits_.five_minute_window_ms / 1000);
}

caf::expected<size_t> gpu_history_book::load(Store& store, int64_t now_unix_ms) {
  size_t loaded = 0;
  size_t skipped = 0;
  auto err = store.for_each(family::gpu_history, [&](std::string_view key,
                                                     std::string_view bytes) {
    // "<machine>/<gpu>/<tier>/<ms>"
    auto ms_at = key.rfind('/');
    auto first = key.find('/');
    if (ms_at == std::string_view::npos || ms_at < 2 || key[ms_at - 2] != '/'
        || first == std::string_view::npos || first + 1 >= ms_at - 2) {
      ++skipped;
      return true;
    }
    char tier = key[ms_at - 1];
    std::string machine{key.substr(0, first)};
    std::string gpu{key.substr(first + 1, ms_at - 2 - first - 1)};
    v1::GpuSample sample;
    if ((tier != 'f' && tier != 'm' && tier != 'r')
        || !sample.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      ++skipped;
      return true;
    }
    auto name = machine + '/' + gpu;
    auto i = series_.find(name);
    if (i == series_.end()) {
      if (series_.size() >= limits_.max_gpus) {
        ++skipped;
        return true;
      }
      i = series_.emplace(name, gpu_series{}).first;
      i->second.machine = std::move(machine);
      i->second.gpu = std::move(gpu);
    }
    auto& s = i->second;
    auto& points = tier == 'f' ? s.five_minutes : tier == 'm' ? s.minutes : s.raw;
    points.push_back(from_sample(sample));
    ++loaded;
    return true;
  });
  if (err)
    return err;
  if (skipped > 0)
    spdlog::warn("gpu history: {} stored point(s) did not parse or did not fit; "
                 "left out", skipped);
  compact(now_unix_ms);
  return loaded;
}

} // namespace astraeus
