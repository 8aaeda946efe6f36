// The queue of runs waiting for GPUs, with reservation and backfill like
// Slurm's (scheduler_queue in placement.hpp).

#include "actors/scheduler/placement.hpp"

#include <algorithm>

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using placement_detail::invalid;
using placement_detail::never;

namespace {

// Everything of `r` that placement_index::place looks at, as bytes (not the
// name, priority or time limit).
std::string shape_of(const placement_request& r) {
  std::string out;
  auto raw = [&out](const auto& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  auto text = [&](const std::string& t) {
    raw(t.size());
    out += t;
  };
  raw(r.groups.size());
  for (const auto& g : r.groups) {
    text(g.name);
    raw(g.workers);
    raw(g.gpus_per_worker);
  }
  raw(r.leader_group);
  raw(r.required_labels.size());
  for (const auto& [k, v] : r.required_labels) {
    text(k);
    text(v);
  }
  raw(r.healthy_only);
  raw(r.cpus_per_worker);
  raw(r.memory_bytes_per_worker);
  raw(r.one_worker_per_machine);
  return out;
}

} // namespace

scheduler_queue::scheduler_queue(placement_index& index, queue_options options)
  : index_(index), options_(options) {
}

caf::error scheduler_queue::submit(placement_request request, int64_t now) {
  if (request.run.empty())
    return invalid("a run needs a name");
  if (pending_.count(request.run) || running_.count(request.run))
    return invalid("run " + request.run + " is already queued or running");
  order_key key{-static_cast<int64_t>(request.priority), now, seq_++};
  pending_.emplace(request.run, key);
  fresh_.push_back(key);
  queued q;
  q.request = std::move(request);
  order_.emplace(key, std::move(q));
  return {};
}

caf::error scheduler_queue::cancel(std::string_view run) {
  auto it = pending_.find(std::string{run});
  if (it == pending_.end())
    return invalid("run " + std::string{run} + " is not waiting");
  order_.erase(it->second);
  retry_.erase(it->second);
  capacity_refused_.erase(it->second);
  waiting_.erase(it->first);
  pending_.erase(it);
  return {};
}

caf::error scheduler_queue::complete(std::string_view run) {
  auto done = complete_if_running(run);
  if (!done)
    return done.error();
  if (!*done)
    return invalid("run " + std::string{run} + " is not running");
  return {};
}

caf::expected<bool> scheduler_queue::complete_if_running(std::string_view run) {
  auto it = running_.find(std::string{run});
  if (it == running_.end())
    return false;
  if (auto err = index_.release(it->second.allocation))
    return err;
  ends_.erase({it->second.end, it->second.allocation});
  running_.erase(it);
  return true;
}

caf::error scheduler_queue::adopt(std::string run, allocation_id allocation, int64_t start,
                                  int64_t time_limit_seconds) {
  if (run.empty() || pending_.count(run) || running_.count(run))
    return invalid("run " + run + " is already queued or running");
  if (index_.allocation_gpus(allocation).empty())
    return invalid("no allocation " + std::to_string(allocation) + " for run " + run);
  int64_t end = time_limit_seconds > 0 ? start + time_limit_seconds : never;
  running_.emplace(std::move(run), running_run{allocation, start, end});
  if (end != never)
    ends_.emplace(end, allocation);
  return {};
}

const waiting_reason* scheduler_queue::waiting(std::string_view run) const {
  auto it = waiting_.find(std::string{run});
  return it == waiting_.end() ? nullptr : &it->second;
}

std::optional<allocation_id> scheduler_queue::allocation_of(std::string_view run) const {
  auto it = running_.find(std::string{run});
  if (it == running_.end())
    return std::nullopt;
  return it->second.allocation;
}

std::optional<scheduler_queue::plan>
scheduler_queue::earliest_start(const placement_request& request, int64_t now) {
  // Release running runs in the order they must end, until the run fits;
  // then hold everything again exactly as it was.
  std::vector<allocation_id> suspended;
  std::optional<plan> out;
  for (auto it = ends_.begin(); it != ends_.end();) {
    int64_t end = it->first;
    for (; it != ends_.end() && it->first == end; ++it)
      if (!index_.suspend(it->second))
        suspended.push_back(it->second);
    if (!index_.may_fit(request))
      continue;
    auto r = index_.place(request);
    if (auto* p = std::get_if<placement>(&r)) {
      plan pl;
      pl.start = std::max(end, now);
      for (const auto& w : p->workers) {
        pl.gpus.push_back({w.machine, w.gpus});
        if (p->cpu_millis_per_worker || p->memory_bytes_per_worker)
          pl.use.push_back({w.machine, p->cpu_millis_per_worker, p->memory_bytes_per_worker});
      }
      out = std::move(pl);
      break;
    }
  }
  for (auto a = suspended.rbegin(); a != suspended.rend(); ++a)
    index_.resume(*a);
  return out;
}

allocation_id scheduler_queue::hold_free_part(const queue_reservation& r) {
  std::vector<gpu_set> free_part;
  for (const auto& set : r.gpus) {
    gpu_mask f = set.gpus & index_.free_gpus(set.machine, true);
    if (f)
      free_part.push_back({set.machine, f});
  }
  // The cores and memory its workers would take, as far as they are free
  // now (issue 22).
  std::vector<machine_use> use = r.use;
  std::sort(use.begin(), use.end(),
            [](const machine_use& a, const machine_use& b) { return a.machine < b.machine; });
  size_t out = 0;
  for (size_t i = 0; i < use.size(); ++i) {
    if (out > 0 && use[out - 1].machine == use[i].machine) {
      use[out - 1].cpu_millis += use[i].cpu_millis;
      use[out - 1].memory_bytes += use[i].memory_bytes;
    } else {
      use[out++] = use[i];
    }
  }
  use.resize(out);
  for (auto& u : use) {
    u.cpu_millis = std::min(u.cpu_millis, index_.free_cpu_millis(u.machine));
    u.memory_bytes = std::min(u.memory_bytes, index_.free_memory_bytes(u.machine));
  }
  if (free_part.empty() && use.empty())
    return 0;
  auto a = index_.hold("reservation for " + r.run, free_part, use);
  return a ? *a : 0;
}

std::optional<queue_decision> scheduler_queue::start(const placement_request& request,
                                                    placement where, int64_t now,
                                                    bool backfilled) {
  // place() answered on this very state, so commit succeeds; if it ever did
  // not, the run simply waits for the next pass.
  auto a = index_.commit(where);
  if (!a)
    return std::nullopt;
  queue_decision d;
  d.run = request.run;
  d.start = now;
  d.end = request.time_limit_seconds > 0 ? now + request.time_limit_seconds : never;
  d.backfilled = backfilled;
  d.allocation = *a;
  d.where = std::move(where);
  running_.emplace(request.run, running_run{d.allocation, d.start, d.end});
  if (d.end != never)
    ends_.emplace(d.end, d.allocation);
  return d;
}

namespace {

bool capacity_code(waiting_code c) {
  return c == waiting_code::not_enough_gpus || c == waiting_code::not_enough_cores_or_memory;
}

} // namespace

std::vector<queue_decision> scheduler_queue::schedule(int64_t now) {
  std::vector<queue_decision> out;
  reasons_changed_.clear();
  reservation_.reset();
  const uint64_t epoch = index_.capacity_epoch();
  allocation_id held = 0; // the free part of the reservation, held during the pass
  unsigned attempts = 0;
  using entry = std::map<order_key, queued>::iterator;
  // Shapes refused in this pass with none of its holds in place (by hash):
  // the shape, the code, and the words the run was given, which hold while
  // nothing started since and the reservation's hold is as it was (`state`
  // counts both).
  struct refusal {
    const std::string* shape;
    waiting_code code;
    waiting_reason shown;
    uint64_t state;
  };
  std::unordered_map<size_t, refusal> refused_shapes;
  uint64_t pass_state = 0; // + 1 per start, and when the reservation is made
  // Its shape, made the first time a pass needs it (most runs start at once).
  auto shape_known = [](queued& q) {
    if (q.shape.empty()) {
      q.shape = shape_of(q.request);
      q.shape_hash = std::hash<std::string>{}(q.shape);
    }
  };
  auto refuse_shape = [&](queued& q, waiting_code code, const waiting_reason& shown) {
    shape_known(q);
    refused_shapes.insert_or_assign(q.shape_hash, refusal{&q.shape, code, shown, pass_state});
  };
  // Keeps why the run of `it` waits; lists it when that is new or changed,
  // and files it for the next pass.
  auto note = [&](entry it, const waiting_reason& why) {
    queued& q = it->second;
    const bool added = !q.shown;
    if (added)
      q.shown = &waiting_[q.request.run];
    if (added || q.shown->code != why.code || q.shown->message != why.message) {
      *q.shown = why;
      reasons_changed_.push_back(q.request.run);
    }
    const filed to = q.refused_at != epoch        ? filed::retry
                     : capacity_code(q.refused_code) ? filed::capacity_refused
                                                     : filed::nowhere;
    if (to != q.in) {
      if (q.in == filed::retry)
        retry_.erase(it->first);
      else if (q.in == filed::capacity_refused)
        capacity_refused_.erase(it->first);
      if (to == filed::retry)
        retry_.insert(it->first);
      else if (to == filed::capacity_refused)
        capacity_refused_.insert(it->first);
      q.in = to;
    }
  };
  auto started = [&](entry it, queue_decision d) {
    ++pass_state;
    out.push_back(std::move(d));
    waiting_.erase(it->second.request.run);
    pending_.erase(it->second.request.run);
    if (it->second.in == filed::retry)
      retry_.erase(it->first);
    else if (it->second.in == filed::capacity_refused)
      capacity_refused_.erase(it->first);
    return order_.erase(it);
  };
  // Tries the run of `it`; the entry after it.
  auto visit = [&](entry it) -> entry {
    queued& q = it->second;
    const placement_request& req = q.request;
    // Refused with nothing freed since: refused again, whatever the pass
    // holds now. Tried all the same when the pass would look for its
    // reservation (the first blocked runs, while none is found).
    if (options_.skip_refused && q.refused_at == epoch
        && !(capacity_code(q.refused_code) && !reservation_
             && attempts < options_.reservation_attempts))
      return std::next(it);
    // Asks what a run refused earlier in this pass asked: refused too, unless
    // the pass would look for its reservation.
    if (options_.skip_refused && !refused_shapes.empty()) {
      shape_known(q);
      auto like = refused_shapes.find(q.shape_hash);
      if (like != refused_shapes.end() && like->second.state == pass_state
          && *like->second.shape == q.shape
          && !(capacity_code(like->second.code) && !reservation_
               && attempts < options_.reservation_attempts)) {
        q.refused_at = epoch;
        q.refused_code = like->second.code;
        note(it, like->second.shown);
        return std::next(it);
      }
    }
    auto r = index_.place(req);
    if (auto* p = std::get_if<placement>(&r)) {
      // Reserved GPUs are held, so this leaves them alone.
      if (auto d = start(req, std::move(*p), now, reservation_.has_value()))
        return started(it, std::move(*d));
      note(it, waiting_reason{waiting_code::not_enough_gpus,
                              "waiting: its GPUs changed while it was placed"});
      return std::next(it);
    }
    waiting_reason why = std::get<waiting_reason>(std::move(r));
    // What the pass holds changes no answer but "not enough free".
    if (held == 0 || !capacity_code(why.code)) {
      q.refused_at = epoch;
      q.refused_code = why.code;
      refuse_shape(q, why.code, why);
    }
    if (capacity_code(why.code)) {
      if (!reservation_) {
        if (attempts < options_.reservation_attempts) {
          ++attempts;
          if (auto pl = earliest_start(req, now)) {
            reservation_ = queue_reservation{req.run, pl->start, std::move(pl->gpus),
                                             std::move(pl->use)};
            held = hold_free_part(*reservation_);
            ++pass_state;
            why.message += "; GPUs are reserved for it, due to start in " +
                           format_duration(reservation_->start - now);
            // Its reason names its reservation, which a later pass may give
            // to another run: tried in every pass while it holds one.
            q.refused_at = never_tried;
          }
        }
      } else {
        // Would it fit on the reserved GPUs? Only if it ends before the
        // reservation starts.
        int64_t end = req.time_limit_seconds > 0 ? now + req.time_limit_seconds : never;
        if (held)
          index_.give_back_hold(held);
        held = 0;
        auto r2 = index_.place(req);
        if (auto* p = std::get_if<placement>(&r2)) {
          if (end <= reservation_->start) {
            auto d = start(req, std::move(*p), now, true);
            held = hold_free_part(*reservation_);
            if (d)
              return started(it, std::move(*d));
          }
          why = waiting_reason{waiting_code::reserved,
                               "waiting: the GPUs it fits on are reserved for " +
                                 reservation_->run + ", due to start in " +
                                 format_duration(reservation_->start - now) +
                                 ", before this run's time limit would end it"};
        } else {
          // Refused with nothing of the pass held.
          q.refused_at = epoch;
          q.refused_code = std::get<waiting_reason>(r2).code;
          refuse_shape(q, q.refused_code, why);
        }
        held = hold_free_part(*reservation_);
      }
    }
    note(it, why);
    return std::next(it);
  };
  if (options_.skip_refused && epoch == last_epoch_) {
    // Nothing freed since the last pass: only the runs not refused at this
    // epoch, and the first refused for want of room while the pass may look
    // for a reservation (each such try takes one of its attempts), in order.
    std::vector<order_key> keys = std::move(fresh_);
    keys.insert(keys.end(), retry_.begin(), retry_.end());
    auto c = capacity_refused_.begin();
    for (unsigned n = 0; n < options_.reservation_attempts && c != capacity_refused_.end();
         ++n, ++c)
      keys.push_back(*c);
    std::sort(keys.begin(), keys.end());
    for (const auto& key : keys)
      if (auto it = order_.find(key); it != order_.end())
        visit(it);
  } else {
    for (auto it = order_.begin(); it != order_.end();)
      it = visit(it);
  }
  fresh_.clear();
  last_epoch_ = epoch;
  if (held)
    index_.give_back_hold(held);
  return out;
}

} // namespace astraeus
