// The all-reduce steps of a validation actor (validation_actor_internal.hpp,
// poll_all_reduce): the group's slots, rank 0's run, the other ranks' runs
// naming its address, the judgement of rank 0's result.

#include <cctype>
#include <memory>

#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/validation_actor_internal.hpp"
#include "actors/validation/validation_plan.hpp"
#include "messages/error.hpp"
#include "runtime/validation/all_reduce_check.hpp"
#include "runtime/validation/fix_commands.hpp"

namespace astraeus::validation_detail {

namespace {

namespace val = astraeus::validation;

/// A group machine as the cluster shows it: its view, and its GPUs with
/// their health (which of them no run can have).
struct group_machine {
  v1::MachineView view;
  v1::GpuList gpus;
};
using views_ptr = std::shared_ptr<std::vector<group_machine>>;
using runs_ptr = std::shared_ptr<std::vector<v1::Run>>;

const v1::ValidationStep& step_of(validation_self self, int index) {
  return self->state.v.steps(index);
}

std::vector<std::string> group_of(const v1::ValidationStep& step) {
  return {step.group_machines().begin(), step.group_machines().end()};
}

/// "gpu-01, gpu-02": the group.
std::string names_of(const v1::ValidationStep& step) {
  std::string names;
  for (const auto& m : step.group_machines())
    names += (names.empty() ? "" : ", ") + m;
  return names;
}

/// "over 2 machines (gpu-01, gpu-02)": the step in the log.
std::string label_of(const v1::ValidationStep& step) {
  return "over " + std::to_string(step.group_machines_size()) + " machines (" + names_of(step)
         + ")";
}

bool ended(const v1::Run& run) {
  return run.state() == "Stopped" || run.state() == "Failed";
}

void forget(validation_self self, int index) {
  self->state.all_reduce_expected.erase(index);
  self->state.all_reduce_gpus.erase(index);
}

void all_reduce_ended(validation_self self, int index) {
  forget(self, index);
  group_step_ended(self, index, label_of(step_of(self, index)));
}

void fail_all_reduce(validation_self self, int index, const std::string& why) {
  val::end_failed(*self->state.v.mutable_steps(index), why,
                  self->state.config.clock->now_unix_ms());
  all_reduce_ended(self, index);
}

void skip_all_reduce(validation_self self, int index, const std::string& why) {
  val::end_skipped(*self->state.v.mutable_steps(index), why,
                   self->state.config.clock->now_unix_ms());
  all_reduce_ended(self, index);
}

/// Removes every rank's run of step `index` but `keep`.
void remove_ranks(validation_self self, int index, const std::string& keep = {}) {
  for (const auto& run : val::step_runs(self->state.v, index))
    if (run != keep)
      remove_run(self, run);
}

/// "ADDR:PORT" (an IPv6 address in brackets).
std::string root_of(const std::string& address) {
  auto host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  return host + ":" + std::to_string(val::all_reduce_root_port);
}

/// Submits ranks `rank`..N-1, pinned to their machines, naming rank 0's
/// address; once all are, the step names the last (it looks at every one).
void submit_ranks(validation_self self, int index, const std::string& address, int rank) {
  auto& st = self->state;
  const auto& step = step_of(self, index);
  if (rank == step.group_machines_size()) {
    st.v.mutable_steps(index)->set_run(
      val::all_reduce_run_name(st.v, index, step.attempts(), rank - 1));
    mark_busy(self, index, false);
    save(self);
    return;
  }
  auto gpus = st.all_reduce_gpus.find(index);
  if (gpus == st.all_reduce_gpus.end()) {
    group_step_went_away(self, index, "the controller lost its group's GPU counts");
    return;
  }
  auto spec = val::all_reduce_spec(st.v, index, rank, gpus->second[rank], root_of(address),
                                   st.config.check_program);
  submit_run(self, std::move(spec),
    [self, index, address, rank](v1::Run&) { submit_ranks(self, index, address, rank + 1); },
          [self, index, rank](caf::error& err) {
            remove_ranks(self, index);
            fail_all_reduce(self, index,
                            "rank " + std::to_string(rank) + " of the all-reduce could not be "
                              "submitted: " + render_error(err));
          });
}

/// `fix` with its "--machine NAME" naming the machine of the first rank
/// `what` names ("rank 1 cannot run"), so the command runs as printed.
std::string with_named_machine(const v1::ValidationStep& step, const std::string& what,
                               std::string fix) {
  const std::string placeholder = "--machine NAME";
  auto at = fix.find(placeholder);
  auto r = what.find("rank ");
  if (at == std::string::npos || r == std::string::npos)
    return fix;
  size_t d = r + 5, e = d;
  while (e < what.size() && std::isdigit(static_cast<unsigned char>(what[e])))
    ++e;
  if (e == d || e - d > 6)  // a check's words, read defensively: no stoul overflow
    return fix;
  auto n = std::stoul(what.substr(d, e - d));
  if (n < static_cast<size_t>(step.group_machines_size()))
    fix.replace(at, placeholder.size(), "--machine " + step.group_machines(static_cast<int>(n)));
  return fix;
}

/// `text` with each "rank N " that names a rank of the group followed by
/// its machine ("rank 1 on gpu-02 cannot run: ..."), once.
std::string with_rank_machines(const v1::ValidationStep& step, const std::string& text) {
  std::string out;
  size_t at = 0;
  while (true) {
    auto r = text.find("rank ", at);
    if (r == std::string::npos) {
      out += text.substr(at);
      return out;
    }
    size_t d = r + 5, e = d;
    while (e < text.size() && std::isdigit(static_cast<unsigned char>(text[e])))
      ++e;
    out += text.substr(at, e - at);
    at = e;
    if (e == d || e - d > 6 || text.compare(e, 4, " on ") == 0)
      continue;
    auto n = std::stoul(text.substr(d, e - d));
    if (n < static_cast<size_t>(step.group_machines_size()))
      out += " on " + step.group_machines(static_cast<int>(n));
  }
}

/// Every rank's run ended or rank 0's did: the step's end. Rank 0's result
/// carries the figures (judged against the group's expected bus bandwidth);
/// another rank that failed fails the step, naming it.
void conclude_all_reduce(validation_self self, int index, const std::vector<v1::Run>& runs) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  const auto now = st.config.clock->now_unix_ms();
  remove_ranks(self, index);
  auto rank0 = step;
  val::apply_run(rank0, runs[0], now);
  std::string other_failure;
  for (size_t r = 1; r < runs.size() && other_failure.empty(); ++r) {
    if (!ended(runs[r]))
      continue;
    auto probe = step;
    val::apply_run(probe, runs[r], now);
    if (probe.state() == val::failed || probe.verdict() == "fail")
      other_failure = "rank " + std::to_string(r) + " on " + step.group_machines(r) + ": "
                      + (probe.state() == val::failed ? probe.reason() : probe.result().summary());
  }
  step.set_finished_unix_ms(now);
  if (rank0.state() == val::failed) {
    fail_all_reduce(self, index, "rank 0 on " + step.group_machines(0) + ": " + rank0.reason());
    return;
  }
  if (rank0.verdict() == "skipped") {
    skip_all_reduce(self, index, rank0.result().summary());
    return;
  }
  auto measured = val::all_reduce_output_of(rank0.result());
  if (!measured && rank0.verdict() == "fail") {
    // It never measured (the ranks did not meet, NCCL failed): its words.
    step.set_state(val::done);
    step.set_verdict("fail");
    *step.mutable_result() = rank0.result();
    // "rank 1 cannot run: ..." says on which machine (a ninth trial's What
    // to fix named no machine), and its fix names that machine.
    for (auto& f : *step.mutable_result()->mutable_findings()) {
      f.set_what(with_rank_machines(step, f.what()));
      f.set_fix(with_named_machine(step, f.what(), f.fix()));
    }
    step.mutable_result()->set_summary(with_rank_machines(step, step.result().summary()));
    // Rank 0's own words, which name the rank at fault; another rank's
    // failure only repeats what rank 0 told it (a re-check read "rank 1 on
    // m2: rank 0 cannot run", blaming m2 for m1's missing driver).
    step.set_reason(step.result().summary().empty() ? other_failure : step.result().summary());
    all_reduce_ended(self, index);
    return;
  }
  if (!other_failure.empty()) {
    fail_all_reduce(self, index, other_failure);
    return;
  }
  auto expected = st.all_reduce_expected.count(index) ? st.all_reduce_expected[index] : 0.0;
  auto judged = val::judge_all_reduce(measured, group_of(step), expected,
                                      val::check_policy{}.values(),
                                      val::all_reduce_joined(st.v, index));
  judged.set_duration_s(rank0.result().duration_s());
  // The pairs' command with this validation's pool, so it runs as written
  // (a ninth trial's copy of "validate --suite network" exited 2).
  const std::string bare = "`astra astraeus validate --suite network`";
  const std::string pooled = "`" + fix_command::validate_pool("network", st.v.pool()) + "`";
  for (auto& f : *judged.mutable_findings()) {
    f.set_machine(step.machine());
    f.set_check(val::all_reduce_check);
    std::string fix = f.fix();
    for (auto at = fix.find(bare); at != std::string::npos; at = fix.find(bare, at + pooled.size()))
      fix.replace(at, bare.size(), pooled);
    f.set_fix(fix);
  }
  step.set_state(val::done);
  step.set_verdict(judged.verdict());
  step.set_reason("");
  *step.mutable_result() = std::move(judged);
  all_reduce_ended(self, index);
}

/// With every rank's run in `runs`: yields, fails or concludes the step,
/// or waits.
void look_at_ranks(validation_self self, int index, const std::vector<v1::Run>& runs) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  for (const auto& run : runs)
    if (ended(run) && run.preempted()) {
      // Gave way to real work: the whole gang is queued again.
      val::apply_run(step, run, st.config.clock->now_unix_ms());
      remove_ranks(self, index, run.spec().name());
      all_reduce_ended(self, index);
      return;
    }
  bool rank_failed = false;
  for (size_t r = 1; r < runs.size(); ++r)
    if (ended(runs[r]) && runs[r].state() == "Failed")
      rank_failed = true;
  if (ended(runs[0]) || rank_failed) {
    conclude_all_reduce(self, index, runs);
    return;
  }
  mark_busy(self, index, false);
}

/// Reads every rank's run (from `runs->size()`), then look_at_ranks.
void read_ranks(validation_self self, int index, runs_ptr runs) {
  auto& st = self->state;
  const auto& step = step_of(self, index);
  if (static_cast<int>(runs->size()) == step.group_machines_size()) {
    look_at_ranks(self, index, *runs);
    return;
  }
  auto name = val::all_reduce_run_name(st.v, index, step.attempts(),
                                       static_cast<int>(runs->size()));
  get_step_run(self, index, name, [self, index, runs](v1::Run& run) {
    runs->push_back(std::move(run));
    read_ranks(self, index, runs);
  });
}

/// Looks at a Running all-reduce step: while only rank 0's run is
/// submitted, whether it is placed (then the others are submitted); then
/// every rank's run.
void look_at_all_reduce(validation_self self, int index) {
  auto& st = self->state;
  mark_busy(self, index, true);
  const auto& step = step_of(self, index);
  auto rank0 = val::all_reduce_run_name(st.v, index, step.attempts(), 0);
  if (step.run() != rank0) {
    read_ranks(self, index, std::make_shared<std::vector<v1::Run>>());
    return;
  }
  watch_first_run(
    self, index, rank0, "rank 0's run", "the other ranks started",
    [self, index](const v1::Run& run) { submit_ranks(self, index, run.master_addr(), 1); },
    [self, index](const std::string& why) { fail_all_reduce(self, index, why); },
    [self, index] { all_reduce_ended(self, index); });
}

/// With every machine's view: the expected bus bandwidth and each rank's
/// GPUs, then rank 0's run; skipped when the group shares no rail or a
/// machine has no GPU to give.
void submit_rank0(validation_self self, int index, const std::vector<group_machine>& views) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  std::vector<const v1::MachineView*> group;
  for (const auto& v : views)
    group.push_back(&v.view);
  double expected = val::expected_all_reduce_gbs(group, val::check_policy{}.values());
  if (expected <= 0) {
    skip_all_reduce(self, index,
                    "no RDMA port is Active on the same rail (device and port) of every machine "
                    "of the group (" + names_of(step) + ")");
    return;
  }
  std::vector<uint32_t> gpus;
  // Each rank on the GPUs of its machine that a run can have (a sixth
  // new-user trial: a rank asked all 8 of a machine with one fenced, waited
  // for good, and the group failed as if the network were at fault).
  for (const auto& v : views) {
    auto usable = val::usable_gpus(v.view, v.gpus);
    if (usable.count == 0) {
      skip_all_reduce(self, index,
                      v.view.name() + " has no GPU for the all-reduce"
                        + (usable.note.empty() ? "" : ": " + usable.note));
      return;
    }
    if (!usable.note.empty())
      spdlog::info("validation {}: all-reduce rank on {} {}", st.v.id(), v.view.name(),
                   usable.note);
    gpus.push_back(usable.count);
  }
  st.all_reduce_expected[index] = expected;
  st.all_reduce_gpus[index] = gpus;
  step.set_attempts(step.attempts() + 1);
  auto spec = val::all_reduce_spec(st.v, index, 0, gpus[0],
                                   ":" + std::to_string(val::all_reduce_root_port),
                                   st.config.check_program);
  submit_run(self, std::move(spec),
      [self, index](v1::Run& run) { mark_submitted(self, index, run); },
      [self, index](caf::error& err) {
        fail_all_reduce(self, index,
                        "rank 0 of the all-reduce could not be submitted: " + render_error(err));
      });
}

/// Asks the cluster for each group machine's view in turn (from
/// `views->size()`), then submit_rank0.
void read_views(validation_self self, int index, views_ptr views) {
  const auto& step = step_of(self, index);
  if (static_cast<int>(views->size()) == step.group_machines_size()) {
    submit_rank0(self, index, *views);
    return;
  }
  auto req = validation_cluster_request();
  req.mutable_get_machine()->set_name(step.group_machines(static_cast<int>(views->size())));
  self->request(self->state.config.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self, index, views](v1::Response& resp) {
        if (resp.has_error()) {
          fail_all_reduce(self, index, resp.error().message());
          return;
        }
        auto greq = validation_cluster_request();
        greq.mutable_list_gpus()->set_machine(resp.machine().name());
        auto view = std::make_shared<v1::MachineView>(std::move(*resp.mutable_machine()));
        self->request(self->state.config.cluster, std::chrono::seconds{10}, std::move(greq))
          .then(
            [self, index, views, view](v1::Response& gresp) {
              views->push_back({std::move(*view),
                                gresp.has_error() ? v1::GpuList{} : gresp.gpus()});
              read_views(self, index, views);
            },
            [self, index, views, view](caf::error&) {
              views->push_back({std::move(*view), v1::GpuList{}});
              read_views(self, index, views);
            });
      },
      [self, index](caf::error& err) { fail_all_reduce(self, index, render_error(err)); });
}

} // namespace

void poll_all_reduce(validation_self self) {
  auto& st = self->state;
  auto free = [&](int i) {
    for (const auto& m : val::step_machines(st.v.steps(i)))
      if (st.busy.count(m))
        return false;
    return true;
  };
  for (int i = 0; i < st.v.steps_size(); ++i)
    if (val::is_all_reduce(st.v.steps(i)) && st.v.steps(i).state() == val::running && free(i))
      look_at_all_reduce(self, i);
  auto next = val::startable_all_reduce(st.v);
  if (!next || !free(*next))
    return;
  int index = *next;
  mark_busy(self, index, true);
  with_slots(self, index, group_of(step_of(self, index)), [self, index] {
    read_views(self, index, std::make_shared<std::vector<group_machine>>());
  });
}

} // namespace astraeus::validation_detail
