// One validation as an actor (actors/validation/validation_actor.hpp), with
// a stand-in scheduler, cluster and owner: one check at a time per machine,
// a check that gave way queued again, a restart that waits for the step in
// flight (or runs it again when its run is gone). Deterministic: CAF's test coordinator and virtual time.

#include "actor_fixture.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/validation_actor.hpp"
#include "actors/validation/validation_plan.hpp"
#include "runtime/validation/all_reduce_check.hpp"
#include "store/store.hpp"

using namespace astraeus;
namespace val = astraeus::validation;

namespace {

/// What the stand-ins saw and what the test makes them answer.
struct world {
  std::map<std::string, v1::Run> runs;       // by name
  std::vector<std::string> submitted;         // run names, in order
  std::vector<std::string> removed;
  std::map<std::string, std::string> slots;   // machine -> validation
  std::vector<v1::ValidationStep> ended;
  v1::Validation last;
  int overlaps = 0;  // a check submitted while another ran on its machine
  std::string data_location = "/data";     // every machine's (issue 20)
  std::set<std::string> foreign;           // GPU ids in use outside Astraeus
  std::vector<v1::RunSpec> specs;          // what was submitted, in order
  bool rdma = false;                       // machines report 2 Active IB ports
  std::set<std::string> gone;              // machines removed from the cluster
  double allreduce_busbw = 85;             // rank 0's figure, GB/s, at every size
};

/// Rank 0's result of `astraeus-check allreduce`: 8 B to 1 GiB at `busbw`.
std::string all_reduce_result(double busbw) {
  val::check_result r;
  r.check = "allreduce";
  std::vector<val::all_reduce_timing> rows;
  for (auto bytes : val::all_reduce_sizes(8, uint64_t{1} << 30)) {
    val::all_reduce_timing t;
    t.bytes = bytes;
    t.busbw_gbs = t.in_place_busbw_gbs = busbw;
    t.algbw_gbs = t.in_place_algbw_gbs = busbw / 2;
    rows.push_back(t);
  }
  val::add_all_reduce_rows(r, rows, uint64_t{1} << 30);
  r.summary = "fine";
  return val::to_json_line(r);
}

std::string machine_of(const v1::RunSpec& s) {
  auto it = s.labels().find("astraeus.io/machine");
  return it == s.labels().end() ? std::string{} : it->second;
}

bool live(const v1::Run& r) {
  return r.state() != "Stopped" && r.state() != "Failed";
}

class ValidationActor : public test::actor_test {
protected:
  ValidationActor() : w(std::make_shared<world>()) {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
    auto sw = w;
    sched_ = caf::actor_cast<scheduler_actor>(spawn([sw](caf::event_based_actor*) -> caf::behavior {
      return {
        [sw](atom::submit, v1::RunSpec& spec) -> v1::Run {
          for (const auto& [name, r] : sw->runs)
            if (live(r) && machine_of(r.spec()) == machine_of(spec))
              ++sw->overlaps;
          v1::Run run;
          *run.mutable_spec() = spec;
          run.set_state("Placed");
          auto machine = machine_of(spec);
          run.set_master_addr("10.0.0." + machine.substr(machine.size() - 1));
          sw->runs[spec.name()] = run;
          sw->submitted.push_back(spec.name());
          sw->specs.push_back(spec);
          return run;
        },
        [sw](atom::get, std::string& name) -> caf::result<v1::Run> {
          auto it = sw->runs.find(name);
          if (it == sw->runs.end())
            return caf::make_error(ec::invalid_request, "no run named " + name);
          return it->second;
        },
        [sw](atom::remove, std::string& name) -> v1::Run {
          sw->removed.push_back(name);
          auto r = sw->runs[name];
          r.set_state("Stopped");
          sw->runs[name] = r;
          return r;
        },
      };
    }));
    cluster_ = caf::actor_cast<cluster_actor>(spawn([sw](caf::event_based_actor*) -> caf::behavior {
      return {
        [sw](v1::Request& req) -> v1::Response {
          v1::Response out;
          out.set_id(req.id());
          if (req.has_get_machine() && sw->gone.count(req.get_machine().name())) {
            out.mutable_error()->set_code(to_string(ec::no_such_machine));
            out.mutable_error()->set_message("no machine named " + req.get_machine().name());
          } else if (req.has_get_machine()) {
            auto* m = out.mutable_machine();
            m->set_name(req.get_machine().name());
            m->set_data_location(sw->data_location);
            for (int i = 0; i < 8; ++i)
              m->mutable_facts()->mutable_gpus()->add_gpus()->set_id("GPU-" + std::to_string(i));
            for (const char* device : {"mlx5_0", "mlx5_5"})
              if (sw->rdma) {
                auto* p = m->mutable_facts()->add_rdma_ports();
                p->set_device(device);
                p->set_port(1);
                p->set_state("ACTIVE");
                p->set_rate_gbps(400);
              }
          } else if (req.has_list_gpus()) {
            auto* gpus = out.mutable_gpus();
            for (const auto& id : sw->foreign) {
              auto* g = gpus->add_gpus();
              g->mutable_gpu()->set_id(id);
              g->set_health("Foreign");
              g->add_health_reasons("in use outside Astraeus");
            }
          }
          return out;
        },
        [sw](atom::get, std::string& name) -> caf::result<machine_actor> {
          if (sw->gone.count(name))
            return caf::make_error(ec::no_such_machine, "no machine named " + name);
          return machine_actor{};
        },
      };
    }));
    owner_ = caf::actor_cast<validations_actor>(spawn([sw](caf::event_based_actor*) -> caf::behavior {
      return {
        [sw](atom::slot, std::string& machine, std::string& id, bool want) -> std::string {
          auto it = sw->slots.find(machine);
          if (!want) {
            if (it != sw->slots.end() && it->second == id)
              sw->slots.erase(it);
            return {};
          }
          if (it != sw->slots.end() && it->second != id)
            return machine + ": another check runs there";
          sw->slots[machine] = id;
          return {};
        },
        [sw](atom::validate, v1::ValidationStep& s) { sw->ended.push_back(s); },
        [sw](atom::validate, v1::Validation& v) { sw->last = v; },
      };
    }));
  }

  validation_actor start(v1::Validation v, bool resumed = false) {
    validation_config c;
    c.store = db;
    c.scheduler = sched_;
    c.cluster = cluster_;
    c.owner = owner_;
    c.validation = std::move(v);
    c.resumed = resumed;
    auto a = spawn(validation_behavior, std::move(c));
    run();
    return a;
  }

  /// Ends the live run of every machine: its check's verdict, or given way.
  void end_live_runs(const std::string& verdict = "pass", bool preempted = false) {
    for (auto& [name, r] : w->runs) {
      if (!live(r))
        continue;
      r.set_state("Stopped");
      r.set_preempted(preempted);
      auto check = r.spec().command(1);
      (*r.add_workers()->mutable_outputs())["astraeus.result"] =
        check == "allreduce" && r.spec().command(4) == "0" && verdict == "pass"
          ? all_reduce_result(w->allreduce_busbw)
          : R"({"check":")" + check + R"(","verdict":")" + verdict + R"(","summary":"fine"})";
    }
  }

  static v1::Validation acceptance(std::vector<std::string> machines) {
    v1::StartValidation s;
    s.set_suite("acceptance");
    s.set_pool("h100");
    return val::make_validation("val-20261006-7f3a2c", s, machines, "on-demand", 0);
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
  std::shared_ptr<world> w;
  scheduler_actor sched_;
  cluster_actor cluster_;
  validations_actor owner_;
};

} // namespace

TEST_F(ValidationActor, RunsOneCheckAtATimePerMachineUntilEveryMachinePasses) {
  start(acceptance({"gpu-01", "gpu-02"}));
  ASSERT_EQ(w->submitted.size(), 2u) << "each machine starts its first check at once";
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 2u) << "nothing more starts while the checks run";
  for (int round = 0; round < 5; ++round) {
    end_live_runs();
    advance(std::chrono::seconds{1});
    advance(std::chrono::seconds{1});
  }
  // Then the pair (issue 12): skipped here, the machines have no RDMA port.
  advance(std::chrono::seconds{1});
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 10u);
  EXPECT_EQ(w->overlaps, 0) << "two checks ran at once on one machine";
  EXPECT_EQ(w->last.state(), "Passed");
  EXPECT_EQ(w->last.machines_passed(), 2u);
  EXPECT_EQ(w->ended.size(), 12u) << "the pair and the all-reduce too (skipped: no RDMA port)";
  EXPECT_EQ(w->last.steps(10).verdict(), "skipped");
  EXPECT_EQ(w->last.steps(11).check(), "allreduce");
  EXPECT_EQ(w->last.steps(11).verdict(), "skipped");
  EXPECT_NE(w->last.steps(11).reason().find("no RDMA port is Active on the same rail"),
            std::string::npos)
    << w->last.steps(11).reason();
  v1::Validation stored;
  auto found = db->get(family::validations, "val/val-20261006-7f3a2c", stored);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ(stored.state(), "Passed");
  EXPECT_TRUE(w->slots.empty()) << "every slot is given back";
}

// Issue 12: the network suite's pairs, a round at a time, each as a server
// run on its machine and a client run on its peer that names the server's
// address; the server's run is removed once the client's result is in.
TEST_F(ValidationActor, NetworkRunsEachRoundsPairsAsServerAndClient) {
  w->rdma = true;
  v1::StartValidation s;
  s.set_suite("network");
  s.set_pool("h100");
  start(val::make_validation("val-20261006-000009", s, {"gpu-01", "gpu-02", "gpu-03", "gpu-04"},
                             "on-demand", 0));
  ASSERT_EQ(w->submitted.size(), 2u) << "round 0: two pairs, their servers first";
  advance(std::chrono::seconds{1});
  ASSERT_EQ(w->submitted.size(), 4u) << "each client once its server is placed";
  std::map<std::string, v1::RunSpec> on;  // machine -> its run
  for (const auto& spec : w->specs)
    on[machine_of(spec)] = spec;
  ASSERT_EQ(on.size(), 4u);
  EXPECT_EQ(on["gpu-01"].command(4), "server");
  EXPECT_EQ(on["gpu-01"].command(6), "mlx5_0:1:400,mlx5_5:1:400");
  EXPECT_EQ(on["gpu-04"].command(4), "client");
  EXPECT_EQ(on["gpu-04"].command(8), "10.0.0.1") << "gpu-04 is gpu-01's client in round 0";
  EXPECT_EQ(w->slots.size(), 4u) << "each pair holds both machines' slots";
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 4u) << "round 1 waits for round 0";
  for (int round = 0; round < 3; ++round) {
    end_live_runs();
    for (int i = 0; i < 4; ++i)
      advance(std::chrono::seconds{1});
  }
  EXPECT_EQ(w->overlaps, 0) << "two checks ran at once on one machine";
  EXPECT_EQ(w->removed[0].substr(w->removed[0].size() - 2), "-s");
  EXPECT_EQ(std::count_if(w->removed.begin(), w->removed.end(),
                          [](const auto& n) { return n.substr(n.size() - 2) == "-s"; }),
            6)
    << "every server's run";

  // Then the all-reduce (issue 12): over gpu-01 and gpu-02, then over all
  // four, each a gang of one rank per machine holding its 8 GPUs; rank 0
  // first, the others once it is placed, naming its address.
  for (int group : {2, 4}) {
    for (int i = 0; i < 4; ++i)
      advance(std::chrono::seconds{1});
    std::vector<v1::RunSpec> ranks;
    for (const auto& spec : w->specs)
      if (spec.command(1) == "allreduce" && spec.command(6) == std::to_string(group))
        ranks.push_back(spec);
    ASSERT_EQ(ranks.size(), static_cast<size_t>(group)) << "every rank of the group of " << group;
    EXPECT_EQ(machine_of(ranks[0]), "gpu-01");
    EXPECT_EQ(ranks[0].command(4), "0");
    EXPECT_EQ(ranks[0].command(8), ":18600") << "rank 0 listens";
    EXPECT_EQ(ranks[0].gpus_per_worker(), 8u);
    for (int r = 1; r < group; ++r) {
      EXPECT_EQ(machine_of(ranks[r]), "gpu-0" + std::to_string(r + 1));
      EXPECT_EQ(ranks[r].command(8), "10.0.0.1:18600") << "rank 0's machine's address";
    }
    EXPECT_EQ(w->slots.size(), static_cast<size_t>(group)) << "every machine of the group";
    end_live_runs();
  }
  for (int i = 0; i < 4; ++i)
    advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 18u) << "12 pair runs, then 2 + 4 ranks";
  EXPECT_EQ(w->ended.size(), 8u);
  ASSERT_EQ(w->last.steps_size(), 8);
  const auto& two = w->last.steps(6);
  EXPECT_EQ(two.check(), "allreduce");
  EXPECT_EQ(two.verdict(), "pass") << two.reason() << two.result().summary();
  EXPECT_EQ(two.result().summary(),
            "all-reduce over 2 machines at 94% of expected (85 of 90 GB/s)")
    << "2 Active 400 Gb/s ports / 8 x 0.9";
  EXPECT_EQ(val::all_reduce_point(two).curve_size(), 28);
  EXPECT_EQ(w->last.state(), "Passed");
  EXPECT_EQ(w->last.machines_passed(), 4u);
  EXPECT_TRUE(w->slots.empty()) << "every slot is given back";
}

// A group below its expected bus bandwidth fails, naming the figure; a
// rank whose run fails fails the group naming the rank and its machine, the
// other ranks' runs are removed and every slot is given back.
TEST_F(ValidationActor, AllReduceBelowItsFigureOrWithAFailedRankFails) {
  w->rdma = true;
  w->allreduce_busbw = 40;
  v1::StartValidation s;
  s.set_suite("network");
  s.set_pool("h100");
  start(val::make_validation("val-20261006-00000a", s, {"gpu-01", "gpu-02"}, "on-demand", 0));
  for (int i = 0; i < 2; ++i) {  // the pair, then the all-reduce
    advance(std::chrono::seconds{1});
    end_live_runs();
    for (int k = 0; k < 4; ++k)
      advance(std::chrono::seconds{1});
  }
  ASSERT_EQ(w->last.steps_size(), 2);
  EXPECT_EQ(w->last.steps(1).verdict(), "fail");
  EXPECT_EQ(w->last.steps(1).result().summary(),
            "all-reduce over 2 machines at 44% of expected (40 of 90 GB/s)");
  ASSERT_EQ(w->last.steps(1).result().findings_size(), 1);
  EXPECT_EQ(w->last.steps(1).result().findings(0).machine(), "gpu-01");
  EXPECT_EQ(w->last.state(), "Failed");
  EXPECT_TRUE(w->slots.empty());

  // Again, with gpu-02's rank failing to start.
  w->allreduce_busbw = 85;
  start(val::make_validation("val-20261006-00000b", s, {"gpu-01", "gpu-02"}, "on-demand", 0));
  advance(std::chrono::seconds{1});
  end_live_runs();
  for (int k = 0; k < 6; ++k)
    advance(std::chrono::seconds{1});
  std::string rank0, rank1;
  for (const auto& spec : w->specs)
    if (spec.command(1) == "allreduce" && spec.name().find("00000b") != std::string::npos)
      (spec.command(4) == "0" ? rank0 : rank1) = spec.name();
  ASSERT_FALSE(rank1.empty()) << "both ranks submitted";
  w->runs[rank1].set_state("Failed");
  w->runs[rank1].set_waiting_reason("cannot start astraeus-check: no such file");
  for (int k = 0; k < 2; ++k)
    advance(std::chrono::seconds{1});
  const auto& step = w->last.steps(1);
  EXPECT_EQ(step.state(), "Failed");
  EXPECT_EQ(step.reason(), "rank 1 on gpu-02: the check ended without a result: cannot start "
                           "astraeus-check: no such file");
  EXPECT_NE(std::find(w->removed.begin(), w->removed.end(), rank0), w->removed.end())
    << "rank 0 is waiting for a rank that will never come";
  EXPECT_TRUE(w->slots.empty());
  EXPECT_EQ(w->last.state(), "Failed");
}

// A sixth new-user trial: an all-reduce rank asked all 8 GPUs of a machine
// with one fenced, waited for good, and the group failed as if the network
// had lost it. Each rank runs on the GPUs its machine can give.
TEST_F(ValidationActor, AnAllReduceRankRunsOnTheGpusItsMachineCanGive) {
  w->rdma = true;
  w->allreduce_busbw = 85;
  w->foreign = {"GPU-3"};
  v1::StartValidation s;
  s.set_suite("network");
  s.set_pool("h100");
  start(val::make_validation("val-20261006-00000c", s, {"gpu-01", "gpu-02"}, "on-demand", 0));
  advance(std::chrono::seconds{1});
  end_live_runs();
  for (int k = 0; k < 6; ++k)
    advance(std::chrono::seconds{1});
  int ranks = 0;
  for (const auto& spec : w->specs)
    if (spec.command(1) == "allreduce") {
      ++ranks;
      EXPECT_EQ(spec.gpus_per_worker(), 7u) << spec.name() << ": GPU-3 is Foreign";
    }
  EXPECT_EQ(ranks, 2);
}

// A seventh new-user trial: a pair's server printed a proper result
// (ib_write_bw is not installed, fix apt install perftest) and failed; the
// step said only that the server ended before its client started, and the
// reason was in the logs of a check run the user did not know of.
TEST_F(ValidationActor, APairWhoseServerEndedEarlySaysWhatTheServerSaid) {
  w->rdma = true;
  v1::StartValidation s;
  s.set_suite("network");
  s.set_pool("h100");
  start(val::make_validation("val-20261207-00000a", s, {"gpu-01", "gpu-02"}, "on-demand", 0));
  ASSERT_EQ(w->submitted.size(), 1u) << "the server first";
  auto& server = w->runs[w->submitted[0]];
  server.set_state("Failed");
  server.set_master_addr("");
  (*server.add_workers()->mutable_outputs())["astraeus.result"] =
    R"({"check":"pair","verdict":"fail","summary":"ib_write_bw is not installed",)"
    R"("findings":[{"severity":"fail","what":"ib_write_bw is not installed",)"
    R"("fix":"apt install perftest"}]})";
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{1});
  ASSERT_FALSE(w->ended.empty());
  const auto& step = w->ended.back();
  EXPECT_EQ(step.state(), "Failed");
  EXPECT_NE(step.reason().find("the pair's server ended (Failed) before its client started"),
            std::string::npos)
    << step.reason();
  EXPECT_NE(step.reason().find("; it said: ib_write_bw is not installed (fix: apt install "
                               "perftest)"),
            std::string::npos)
    << step.reason();
}

// A seventh new-user trial: a check whose machine was Down showed Running
// with an empty WHY. While its run waits, the step says why; once placed,
// the words go.
TEST_F(ValidationActor, ACheckWhoseRunWaitsSaysWhy) {
  v1::StartValidation s;
  s.set_suite("burn");
  s.set_machine("gpu-01");
  start(val::make_validation("val-20261207-00000b", s, {"gpu-01"}, "on-demand", 0));
  ASSERT_EQ(w->submitted.size(), 1u);
  auto& run = w->runs[w->submitted[0]];
  run.set_state("Waiting");
  run.set_waiting_reason("waiting: no machine carrying pool=h100 takes new work");
  advance(std::chrono::seconds{1});
  ASSERT_EQ(w->last.steps_size(), 1);
  EXPECT_EQ(w->last.steps(0).state(), "Running");
  EXPECT_EQ(w->last.steps(0).reason(),
            "its run waits: waiting: no machine carrying pool=h100 takes new work");
  run.set_state("Running");
  run.clear_waiting_reason();
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.steps(0).reason(), "");
}

// A pair needs both machines' slots: with one held elsewhere it waits,
// saying why, and holds neither meanwhile.
TEST_F(ValidationActor, APairWaitsForBothMachinesSlots) {
  w->rdma = true;
  w->slots["gpu-02"] = "val-other";
  v1::StartValidation s;
  s.set_suite("network");
  s.set_pool("h100");
  start(val::make_validation("val-20261006-00000a", s, {"gpu-01", "gpu-02"}, "on-demand", 0));
  EXPECT_TRUE(w->submitted.empty());
  EXPECT_EQ(w->last.steps(0).reason(), "gpu-02: another check runs there");
  EXPECT_EQ(w->slots.count("gpu-01"), 0u) << "gpu-01's slot is given back while it waits";
  w->slots.clear();
  advance(std::chrono::seconds{1});
  ASSERT_EQ(w->submitted.size(), 1u);
  EXPECT_EQ(w->submitted[0], "val-20261006-00000a-gpu-01-gpu-02-1-s");
}

TEST_F(ValidationActor, ACheckThatGaveWayIsQueuedAgainAndRunsAgain) {
  v1::StartValidation s;
  s.set_suite("burn");
  s.set_machine("gpu-01");
  start(val::make_validation("val-20261006-000001", s, {"gpu-01"}, "on-demand", 0));
  ASSERT_EQ(w->submitted.size(), 1u);
  end_live_runs("pass", true);
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.steps(0).yields(), 1u);
  EXPECT_TRUE(w->ended.empty()) << "a step that gave way has not ended";
  // Queued again, and tried at once (here its slot is free at once; on a
  // real machine it waits while the real run holds the GPUs).
  ASSERT_EQ(w->submitted.size(), 2u) << "the yielded burn-in is queued again";
  EXPECT_EQ(w->submitted[0], "val-20261006-000001-gpu-01-burn-1");
  EXPECT_EQ(w->submitted[1], "val-20261006-000001-gpu-01-burn-2");
  EXPECT_EQ(w->last.steps(0).state(), val::running);
  end_live_runs("pass");
  advance(std::chrono::seconds{1});
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.state(), "Passed") << "giving way never fails a step";
}

TEST_F(ValidationActor, AnotherValidationsCheckOnTheMachineMakesTheStepWait) {
  w->slots["gpu-01"] = "val-other";
  v1::StartValidation s;
  s.set_suite("copies");
  s.set_machine("gpu-01");
  start(val::make_validation("val-20261006-000002", s, {"gpu-01"}, "on-demand", 0));
  EXPECT_TRUE(w->submitted.empty());
  EXPECT_EQ(w->last.steps(0).reason(), "gpu-01: another check runs there");
  w->slots.clear();
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 1u);
}

// A new-user trial: after `kill -9` of the controller during a burn-in, the
// log showed its run re-adopted, then deleted and burn-2 placed (attempts
// 2 -> 3 -> 4 over restarts). A check whose run went on is waited for.
TEST_F(ValidationActor, AfterARestartACheckWhoseRunWentOnIsWaitedForNotRunAgain) {
  auto v = acceptance({"gpu-01"});
  v.mutable_steps(0)->set_state(val::done);
  v.mutable_steps(0)->set_verdict("pass");
  v.mutable_steps(1)->set_state(val::done);
  v.mutable_steps(1)->set_verdict("pass");
  auto& burn = *v.mutable_steps(2);
  burn.set_state(val::running);
  burn.set_attempts(1);
  burn.set_run("val-20261006-7f3a2c-gpu-01-burn-1");
  // The scheduler kept the run through the restart (re-adopted).
  v1::Run kept;
  *kept.mutable_spec() = val::run_spec(v, 2, 8, "astraeus-check");
  kept.set_state("Running");
  w->runs[burn.run()] = kept;
  start(v, true);
  for (int i = 0; i < 5; ++i)
    advance(std::chrono::seconds{1});
  EXPECT_TRUE(w->removed.empty()) << "the burn-in that went on is not deleted";
  EXPECT_TRUE(w->submitted.empty()) << "nor run again";
  EXPECT_EQ(w->last.steps(2).state(), val::running);
  EXPECT_EQ(w->last.steps(2).restarted(),
            "the controller restarted while it ran; its run val-20261006-7f3a2c-gpu-01-burn-1 "
            "went on and was waited for");
  end_live_runs("pass");
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.steps(2).state(), val::done);
  EXPECT_EQ(w->last.steps(2).verdict(), "pass");
  EXPECT_EQ(w->last.steps(2).attempts(), 1u) << "one attempt: it was never started again";
  ASSERT_EQ(w->submitted.size(), 1u) << "then the next check starts";
  EXPECT_EQ(w->submitted[0], "val-20261006-7f3a2c-gpu-01-copies-1");
  v1::Validation stored;
  ASSERT_TRUE(*db->get(family::validations, "val/val-20261006-7f3a2c", stored));
  EXPECT_EQ(stored.steps(2).state(), val::done);
  EXPECT_FALSE(stored.steps(2).restarted().empty()) << "what the restart did stays readable";
}

// Only a check whose run is gone after a restart runs again, and the step
// keeps saying why through its next attempt (its reason was blanked once
// the step was placed again).
TEST_F(ValidationActor, AfterARestartACheckWhoseRunIsGoneRunsAgainSayingWhy) {
  auto v = acceptance({"gpu-01"});
  v.mutable_steps(0)->set_state(val::done);
  v.mutable_steps(0)->set_verdict("pass");
  v.mutable_steps(1)->set_state(val::running);
  v.mutable_steps(1)->set_attempts(1);
  v.mutable_steps(1)->set_run("val-20261006-7f3a2c-gpu-01-dcgm-1");
  start(v, true);
  advance(std::chrono::seconds{1});
  ASSERT_EQ(w->submitted.size(), 1u);
  EXPECT_EQ(w->submitted[0], "val-20261006-7f3a2c-gpu-01-dcgm-2");
  EXPECT_EQ(w->last.steps(1).state(), val::running);
  const std::string why = "the controller restarted while it ran and its run "
                          "val-20261006-7f3a2c-gpu-01-dcgm-1 was gone (no run named "
                          "val-20261006-7f3a2c-gpu-01-dcgm-1): it ran again";
  EXPECT_EQ(w->last.steps(1).restarted(), why);
  end_live_runs("pass");
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.steps(1).state(), val::done);
  EXPECT_EQ(w->last.steps(1).restarted(), why) << "kept once it ran again";
  v1::Validation stored;
  ASSERT_TRUE(*db->get(family::validations, "val/val-20261006-7f3a2c", stored));
  EXPECT_EQ(stored.steps(0).state(), val::done) << "a finished step is not run again";
  EXPECT_EQ(stored.steps(1).restarted(), why);
}

TEST_F(ValidationActor, GarbageFromTheCheckFailsTheStepWithTheReason) {
  v1::StartValidation s;
  s.set_suite("disk");
  s.set_machine("gpu-01");
  start(val::make_validation("val-20261006-000003", s, {"gpu-01"}, "on-demand", 0));
  auto& r = w->runs.begin()->second;
  r.set_state("Failed");
  (*r.add_workers()->mutable_outputs())["astraeus.result"] = "fio: command not found";
  advance(std::chrono::seconds{1});
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.state(), "Failed");
  EXPECT_EQ(w->last.steps(0).state(), val::failed);
  EXPECT_NE(w->last.steps(0).reason().find("fio: command not found"), std::string::npos);
}

// Issue 20: the disk check tests the machine's data location; with none
// chosen the step is skipped, saying how to choose one.
TEST_F(ValidationActor, TheDiskCheckTestsTheDataLocationOrIsSkippedSayingHowToChooseOne) {
  v1::StartValidation s;
  s.set_suite("disk");
  s.set_machine("gpu-01");
  start(val::make_validation("val-20261006-000001", s, {"gpu-01"}, "on-demand", 0));
  ASSERT_EQ(w->specs.size(), 1u);
  const auto& cmd = w->specs[0].command();
  auto at = std::find(cmd.begin(), cmd.end(), "--data-dir");
  ASSERT_NE(at, cmd.end());
  EXPECT_EQ(*(at + 1), "/data");
  w->data_location.clear();
  start(val::make_validation("val-20261006-000002", s, {"gpu-02"}, "on-demand", 0));
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->specs.size(), 1u) << "no run without a data location";
  ASSERT_EQ(w->last.id(), "val-20261006-000002");
  ASSERT_EQ(w->last.steps_size(), 1);
  EXPECT_EQ(w->last.steps(0).verdict(), "skipped");
  EXPECT_EQ(w->last.steps(0).reason(),
            "no data location chosen: astra machine data-location gpu-02 PATH");
  EXPECT_EQ(w->last.state(), "Skipped") << "nothing was measured: no pass";
}

// A check that needs all of a machine's GPUs does not wait forever for one
// in use outside Astraeus: it runs on the others and says so.
TEST_F(ValidationActor, ACheckRunsOnTheGpusItCanHaveAndSaysWhichItLeftOut) {
  w->foreign = {"GPU-3"};
  v1::StartValidation s;
  s.set_suite("burn");
  s.set_machine("gpu-01");
  start(val::make_validation("val-20261006-000003", s, {"gpu-01"}, "on-demand", 0));
  ASSERT_EQ(w->specs.size(), 1u);
  EXPECT_EQ(w->specs[0].gpus_per_worker(), 7u);
  ASSERT_EQ(w->last.steps_size(), 1);
  EXPECT_EQ(w->last.steps(0).reason(),
            "runs on 7 of 8 GPUs: GPU-3 is Foreign (in use outside Astraeus)");
}

// A machine removed while its check waits to place: the validation hears it
// from its owner's poll, makes sure the machine is gone, fails its steps
// naming the removal, removes the run pinned there and finishes.
TEST_F(ValidationActor, AMachineRemovedMidCheckEndsItsStepsAndTheValidationFinishes) {
  v1::StartValidation s;
  s.set_suite("quick");
  s.set_pool("h100");
  auto a = start(val::make_validation("val-20261006-00000b", s, {"dgx-01", "dgx-02"},
                                      "automatic", 0));
  ASSERT_EQ(w->submitted.size(), 2u);
  const auto dgx01_run =
    w->submitted[0].find("-dgx-01-") != std::string::npos ? w->submitted[0] : w->submitted[1];
  const int dgx01 = w->last.steps(0).machine() == "dgx-01" ? 0 : 1;
  // Still in the cluster: nothing ends.
  caf::anon_send(a, atom::remove_v, std::string{"dgx-01"});
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.steps(dgx01).state(), val::running);
  w->gone.insert("dgx-01");
  caf::anon_send(a, atom::remove_v, std::string{"dgx-01"});
  run();  // the cluster says it is gone; the next poll ends its steps
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.steps(dgx01).state(), val::failed);
  EXPECT_EQ(w->last.steps(dgx01).reason(),
            "machine dgx-01 was removed before the check finished");
  EXPECT_EQ(w->removed, (std::vector<std::string>{dgx01_run})) << "its waiting run is removed";
  EXPECT_EQ(w->last.state(), "Running") << "dgx-02's check still runs";
  end_live_runs("pass");
  advance(std::chrono::seconds{1});
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->last.state(), "Failed") << "it finishes; the removed machine did not pass";
  EXPECT_EQ(w->last.machines_passed(), 1u);
  EXPECT_TRUE(w->slots.empty()) << "every slot is given back";
}

// A machine found gone when its next step starts: that step and the rest
// end at once, without a run submitted for a machine that is not there.
TEST_F(ValidationActor, AMachineFoundGoneBeforeItsNextStepEndsTheRest) {
  auto a = start(acceptance({"dgx-01"}));
  ASSERT_EQ(w->submitted.size(), 1u);
  w->gone.insert("dgx-01");
  end_live_runs("pass");
  advance(std::chrono::seconds{1});
  advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 1u) << "nothing is submitted for a machine that is gone";
  EXPECT_EQ(w->last.state(), "Failed");
  ASSERT_GE(w->last.steps_size(), 2);
  EXPECT_EQ(w->last.steps(0).verdict(), "pass");
  for (int i = 1; i < w->last.steps_size(); ++i)
    EXPECT_EQ(w->last.steps(i).reason(), "machine dgx-01 was removed before the check finished")
      << w->last.steps(i).check();
  EXPECT_TRUE(w->slots.empty());
  (void)a;
}

// Issue 21: a latched fault fails the quick check; the reason shown is the
// fault, not what a check that had nothing to read said (found by a helper
// trying a fixture machine: "fail ... no NVIDIA GPU on the PCI bus and no
// driver: nothing to check").
TEST(CombineQuick, ALatchedFaultFailsTheStepAndIsItsReason) {
  auto faulty_gpus = [](int n) {
    v1::GpuList gpus;
    for (int i = 0; i < n; ++i) {
      auto* g = gpus.add_gpus();
      g->mutable_gpu()->set_id("GPU-" + std::to_string(i));
      g->set_health("Faulty");
      g->add_health_reasons("Xid 79 fault");
    }
    gpus.add_gpus()->set_health("Healthy");
    return gpus;
  };
  v1::ValidationStep skipped;
  skipped.set_machine("dgx-01");
  skipped.set_check("quick");
  skipped.mutable_result()->set_verdict("skipped");
  skipped.mutable_result()->set_summary(
    "no NVIDIA GPU on the PCI bus and no driver: nothing to check");
  combine_quick(skipped, faulty_gpus(1));
  EXPECT_EQ(skipped.verdict(), "fail");
  EXPECT_EQ(skipped.result().summary(), "dgx-01 GPU GPU-0 has a latched fault: Xid 79 fault");

  v1::ValidationStep passed;
  passed.set_machine("dgx-02");
  passed.set_check("quick");
  passed.mutable_result()->set_verdict("pass");
  passed.mutable_result()->set_summary("8 GPUs read");
  combine_quick(passed, faulty_gpus(2));
  EXPECT_EQ(passed.result().verdict(), "fail");
  EXPECT_EQ(passed.result().summary(),
            "2 GPUs have latched faults; the first: dgx-02 GPU GPU-0 has a latched fault: "
            "Xid 79 fault; the check: 8 GPUs read");
  EXPECT_EQ(passed.result().findings_size(), 2);

  v1::ValidationStep clean;
  clean.mutable_result()->set_verdict("pass");
  clean.mutable_result()->set_summary("8 GPUs read");
  v1::GpuList healthy;
  healthy.add_gpus()->set_health("Healthy");
  combine_quick(clean, healthy);
  EXPECT_EQ(clean.result().summary(), "8 GPUs read") << "nothing latched: as the check said";
}
