// The validations of a controller (actors/validation/validations_actor.hpp)
// with a stand-in cluster, machines and scheduler: a pool's policy that
// begins to require acceptance keeps the machines the pool has working and
// holds only those that join later. Deterministic: CAF's test coordinator.

#include "actor_fixture.hpp"

#include <map>
#include <memory>
#include <set>
#include <string>

#include <caf/event_based_actor.hpp>

#include "actors/validation/validation_plan.hpp"
#include "actors/validation/validations_actor.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

/// A stand-in machine: what its machine actor would show.
struct machine_rec {
  std::string pool;
  v1::Machine::State liveness = v1::Machine::Up;
  bool acceptance_requested = false;  // installed with --accept
  bool required = false;              // last told by the validations
  bool accepted = false;
  std::string reason;
  caf::actor handle;
  int gpus = 0;                       // GPUs its last report listed
  int set_aside = 0;                  // of them, set aside by the scheduler
};

struct world {
  std::map<std::string, machine_rec> machines;
  std::map<std::string, v1::RunSpec> submitted;  // check runs, by name
  std::set<std::string> removed;                 // check runs removed, by name
  bool checks_end = false;                       // they end when looked at
  std::string verdict = "pass";                  // with this verdict
};

v1::MachineView view_of(const std::string& name, const machine_rec& m) {
  v1::MachineView out;
  out.set_name(name);
  (*out.mutable_labels())["pool"] = m.pool;
  bool accepting = m.required && !m.accepted;
  out.set_state(m.liveness == v1::Machine::Up && accepting ? v1::Machine::Accepting
                                                           : m.liveness);
  out.set_accepted(m.required && m.accepted);
  if (m.accepted)
    out.set_accepted_reason(m.reason);
  out.set_acceptance_requested(m.acceptance_requested && !m.accepted);
  for (int i = 0; i < m.gpus; ++i)
    out.mutable_facts()->mutable_gpus()->add_gpus()->set_id("GPU-" + std::to_string(i));
  for (int i = 0; i < m.set_aside; ++i)
    out.add_set_aside_gpus();
  return out;
}

class Validations : public test::actor_test {
protected:
  explicit Validations(bool quick_on_up = false) : w(std::make_shared<world>()) {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
    auto sw = w;
    auto sched = caf::actor_cast<scheduler_actor>(
      spawn([sw](caf::event_based_actor*) -> caf::behavior {
        return {
          [sw](atom::submit, v1::RunSpec& spec) -> v1::Run {
            sw->submitted[spec.name()] = spec;
            v1::Run run;
            *run.mutable_spec() = spec;
            run.set_state("Placed");
            return run;
          },
          [sw](atom::get, std::string& name) -> v1::Run {
            v1::Run run;
            *run.mutable_spec() = sw->submitted[name];
            run.set_state("Placed");
            if (sw->checks_end && run.spec().command_size() > 1) {
              run.set_state("Stopped");
              (*run.add_workers()->mutable_outputs())["astraeus.result"] =
                R"({"check":")" + run.spec().command(1) + R"(","verdict":")" + sw->verdict
                + R"("})";
            }
            return run;
          },
          [sw](atom::remove, std::string& name) -> v1::Run {
            sw->removed.insert(name);
            v1::Run run;
            run.mutable_spec()->set_name(name);
            run.set_state("Stopped");
            return run;
          },
        };
      }));
    cluster_ = caf::actor_cast<cluster_actor>(
      spawn([sw](caf::event_based_actor*) -> caf::behavior {
        return {
          [sw](v1::Request& req) -> v1::Response {
            v1::Response out;
            out.set_id(req.id());
            if (req.has_list_machines()) {
              auto* list = out.mutable_machines();
              for (const auto& [name, m] : sw->machines)
                *list->add_machines() = view_of(name, m);
            } else if (req.has_get_machine()) {
              auto it = sw->machines.find(req.get_machine().name());
              if (it != sw->machines.end())
                *out.mutable_machine() = view_of(it->first, it->second);
            } else if (req.has_list_gpus()) {
              out.mutable_gpus();
            }
            return out;
          },
          [sw](atom::get, std::string& name) -> caf::result<machine_actor> {
            auto it = sw->machines.find(name);
            if (it == sw->machines.end())
              return caf::make_error(ec::no_such_machine, "no machine named " + name);
            return caf::actor_cast<machine_actor>(it->second.handle);
          },
        };
      }));
    sched_ = sched;
    quick_on_up_ = quick_on_up;
    start_controller();
  }

  /// Spawns the validations actor on the store, as a controller's start does.
  void start_controller() {
    validations_config c;
    c.store = db;
    c.scheduler = sched_;
    c.quick_on_up = quick_on_up_;
    c.seed = 7;
    c.console_url = "https://console.example:8443";
    c.organization = "acme";
    c.cluster_name = "prod";
    actor_ = spawn(validations, std::move(c));
    caf::anon_send(actor_, atom::attach_v, cluster_);
    run();
  }

  /// The controller restarts: its validations actor stops and a new one
  /// loads what the first stored (the runs, in the stand-in scheduler, go on).
  void restart_controller() {
    caf::anon_send_exit(actor_, caf::exit_reason::kill);
    run();
    start_controller();
  }

  /// Starts `suite` on `machine`; the response.
  v1::Response validate(const std::string& suite, const std::string& machine) {
    v1::Request req;
    req.set_id(5);
    req.mutable_caller()->set_name("alice");
    req.mutable_start_validation()->set_suite(suite);
    req.mutable_start_validation()->set_machine(machine);
    return ask<v1::Response>(actor_, std::move(req));
  }

  ~Validations() override {
    // The validations actor's own validation actors (its children, which
    // the fixture does not stop) end once their checks have: every check
    // passes now.
    w->checks_end = true;
    for (int i = 0; i < 40; ++i)
      advance(std::chrono::seconds{1});
  }

  /// A machine in `pool` joins (reported: `liveness`).
  void join(const std::string& name, const std::string& pool,
            v1::Machine::State liveness = v1::Machine::Up, bool requested = false) {
    auto sw = w;
    auto& m = w->machines[name];
    m.pool = pool;
    m.liveness = liveness;
    m.acceptance_requested = requested;
    m.handle = spawn([sw, name](caf::event_based_actor*) -> caf::behavior {
      return {
        [sw, name](atom::accept, bool required, bool accepted,
                   std::string& reason) -> v1::MachineView {
          auto& m = sw->machines[name];
          m.required = required;
          if (accepted) {
            m.accepted = true;
            m.reason = reason;
          }
          return view_of(name, m);
        },
        [sw, name](atom::get) -> v1::MachineView { return view_of(name, sw->machines[name]); },
        [](atom::validate, v1::ValidationStep&) {},
        [](atom::accept, v1::Validation&) {},
      };
    });
  }

  v1::Response set_policy(const std::string& pool, bool require) {
    v1::Request req;
    req.set_id(1);
    req.mutable_caller()->set_name("alice");
    auto* p = req.mutable_set_validation_policy()->mutable_policy();
    p->set_pool(pool);
    p->set_require_acceptance(require);
    return ask<v1::Response>(actor_, std::move(req));
  }

  /// The acceptance validations started, by machine.
  std::map<std::string, int> acceptances() {
    v1::Request req;
    req.mutable_list_validations();
    auto resp = ask<v1::Response>(actor_, std::move(req));
    std::map<std::string, int> out;
    for (const auto& v : resp.validations().validations())
      if (v.suite() == "acceptance")
        for (const auto& m : v.machines())
          ++out[m];
    return out;
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
  std::shared_ptr<world> w;
  cluster_actor cluster_;
  scheduler_actor sched_;
  bool quick_on_up_ = false;
  validations_actor actor_;
};

/// The same, with a quick check when a machine comes Up (the default).
class ValidationsQuick : public Validations {
protected:
  ValidationsQuick() : Validations(true) {}

  /// The quick checks started on `machine`.
  int quick_checks(const std::string& machine) {
    v1::Request req;
    req.mutable_list_validations();
    auto resp = ask<v1::Response>(actor_, std::move(req));
    int n = 0;
    for (const auto& v : resp.validations().validations())
      if (v.suite() == "quick")
        for (const auto& m : v.machines())
          n += m == machine ? 1 : 0;
    return n;
  }
};

} // namespace

// Fourth new-user trial: a machine joined before its driver loaded; its quick
// check failed ("none of its 1 GPUs can be had"), then 8 GPUs appeared and
// the badge kept the fail. GPUs that appear bring a new quick check.
TEST_F(ValidationsQuick, GpusThatAppearAfterAMachineCameUpGetANewQuickCheck) {
  w->checks_end = true;  // each check ends at its next look
  join("gpu-01", "h100");
  w->machines["gpu-01"].gpus = 1;
  advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 1);
  for (int i = 0; i < 10; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 1) << "the same GPUs: no new check";
  w->machines["gpu-01"].gpus = 8;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 2);
  w->machines["gpu-01"].gpus = 7;  // one fewer: its fault shows by itself
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 2);
  // Two GPUs set aside (another machine reports their UUIDs), then given
  // back. Where the last quick check passed, nothing runs (set-asides that
  // settle after a controller restart would run one on every machine)...
  w->machines["gpu-01"].set_aside = 2;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 2) << "set aside: fewer, no check";
  w->machines["gpu-01"].set_aside = 0;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 2) << "its quick check passed: none again";
  // ... where it failed, a new one once they are given back.
  w->verdict = "fail";
  w->machines["gpu-01"].gpus = 8;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  ASSERT_EQ(quick_checks("gpu-01"), 3);
  w->verdict = "pass";
  w->machines["gpu-01"].set_aside = 2;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 3);
  w->machines["gpu-01"].set_aside = 0;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 4) << "given back after a failed check: a quick check again";
}

// A new-user trial: a GPU's latched fault failed the quick check; the GPU
// was replaced and its fault cleared, and the QUICK badge and the report's
// "has a latched fault" finding stayed until someone thought to run a quick
// check again. Clearing a fault on a machine whose quick check failed runs
// one; on a machine whose quick check passed it does not.
TEST_F(ValidationsQuick, ClearingAFaultWhereTheQuickCheckFailedRunsItAgain) {
  w->checks_end = true;
  w->verdict = "fail";
  join("gpu-01", "h100");
  join("gpu-02", "h100");
  w->machines["gpu-01"].gpus = 8;
  w->machines["gpu-02"].gpus = 8;
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  ASSERT_EQ(quick_checks("gpu-01"), 1);
  w->verdict = "pass";
  caf::anon_send(actor_, atom::clear_v, std::string{"gpu-01"});
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 2) << "the failed quick check runs again";
  EXPECT_EQ(quick_checks("gpu-02"), 1) << "only the machine whose fault was cleared";
  caf::anon_send(actor_, atom::clear_v, std::string{"gpu-01"});
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{10});
  EXPECT_EQ(quick_checks("gpu-01"), 2) << "it passed now: no third";
}

// bring-up-a-gpu-cluster.md, step 6: "A machine that joins the pool from now
// on waits as Accepting". The machines the pool has keep working.
TEST_F(Validations, RequiringAcceptanceKeepsThePoolsMachinesWorkingAndHoldsOnlyNewOnes) {
  join("gpu-01", "h100");
  join("gpu-02", "h100", v1::Machine::Down);
  join("gpu-03", "h100", v1::Machine::Up, true);  // asked for acceptance at install
  join("gpu-09", "a100");
  auto resp = set_policy("h100", true);
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  EXPECT_TRUE(resp.validation_policy().require_acceptance());
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{2});
  for (const char* name : {"gpu-01", "gpu-02"}) {
    const auto& m = w->machines[name];
    EXPECT_TRUE(m.required) << name;
    EXPECT_TRUE(m.accepted) << name << " was in the pool before the policy";
    EXPECT_EQ(m.reason, "in pool h100 before the pool required acceptance") << name;
  }
  EXPECT_EQ(view_of("gpu-01", w->machines["gpu-01"]).state(), v1::Machine::Up);
  EXPECT_FALSE(w->machines["gpu-03"].accepted) << "its own acceptance still runs";
  EXPECT_FALSE(w->machines["gpu-09"].required) << "another pool";
  EXPECT_EQ(acceptances().count("gpu-01"), 0u) << "no acceptance for a machine kept working";

  // Setting the policy again (it required acceptance already) accepts no one.
  join("gpu-04", "h100");
  resp = set_policy("h100", true);
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{2});
  EXPECT_TRUE(w->machines["gpu-04"].required);
  EXPECT_FALSE(w->machines["gpu-04"].accepted) << "it joined after the policy";
  EXPECT_EQ(view_of("gpu-04", w->machines["gpu-04"]).state(), v1::Machine::Accepting);
  EXPECT_EQ(acceptances()["gpu-04"], 1) << "its acceptance starts";
}

// A machine removed while its acceptance runs: the machine poll tells the
// validation, which ends the machine's steps naming the removal and finishes.
TEST_F(Validations, AValidationOfARemovedMachineFinishes) {
  auto resp = set_policy("h100", true);
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  join("dgx-01", "h100");
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{2});
  ASSERT_EQ(acceptances()["dgx-01"], 1);
  caf::anon_send_exit(w->machines["dgx-01"].handle, caf::exit_reason::user_shutdown);
  w->machines.erase("dgx-01");
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{2});
  v1::Request req;
  req.mutable_list_validations();
  auto list = ask<v1::Response>(actor_, std::move(req));
  ASSERT_EQ(list.validations().validations_size(), 1);
  const auto& v = list.validations().validations(0);
  EXPECT_EQ(v.state(), "Failed");
  bool named = false;
  for (const auto& s : v.steps())
    named = named || s.reason() == "machine dgx-01 was removed before the check finished";
  EXPECT_TRUE(named) << v.DebugString();
}

// README "Validation" and bring-up-a-gpu-cluster.md: a validation's page is
// /o/<org>/w/<workspace>/validation?cluster=<cluster>&validation=<id>; the
// link printed used to leave out the organisation, workspace and cluster,
// and the console answered it 404 (found by a helper trying the dev cluster).
TEST_F(Validations, AValidationsConsoleLinkIsThePageTheConsoleServes) {
  auto resp = set_policy("h100", true);
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  join("dgx-01", "h100");
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{2});
  v1::Request req;
  req.mutable_list_validations();
  auto list = ask<v1::Response>(actor_, std::move(req));
  ASSERT_EQ(list.validations().validations_size(), 1);
  const auto& v = list.validations().validations(0);
  EXPECT_EQ(v.console_url(), "https://console.example:8443/o/acme/w/default/validation?cluster=prod"
                             "&validation=" + v.id());
}

// A validation asked for one machine that is not Up says what it is (it
// read "no machine of machine gpu-02 is Up"; found by a helper).
TEST_F(Validations, AMachineThatIsNotUpIsNamedWithItsState) {
  join("gpu-02", "h100", v1::Machine::Down);
  v1::Request req;
  req.set_id(3);
  req.mutable_caller()->set_name("alice");
  req.mutable_start_validation()->set_suite("quick");
  req.mutable_start_validation()->set_machine("gpu-02");
  auto resp = ask<v1::Response>(actor_, std::move(req));
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(),
            "machine gpu-02 is Down: a validation runs on a machine that is Up");
}

// A new-user trial: `astra validate --machine typo` answered 400 where every
// other route that names an unknown machine answers 404 NO_SUCH_MACHINE.
TEST_F(Validations, AMachineNobodyKnowsIsNoSuchMachine) {
  join("gpu-01", "h100");
  v1::Request req;
  req.set_id(4);
  req.mutable_caller()->set_name("alice");
  req.mutable_start_validation()->set_suite("quick");
  req.mutable_start_validation()->set_machine("gpu-99");
  auto resp = ask<v1::Response>(actor_, std::move(req));
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().code(), "no_such_machine");
  EXPECT_EQ(resp.error().message(), "no machine named gpu-99");
}

// A new-user trial: a restarted controller deleted a burn-in its agent still
// ran. The check that went on keeps its machine's slot through the restart:
// it is not run again, and no other check starts beside it until it ends.
TEST_F(Validations, ACheckThatWentOnThroughARestartKeepsItsMachinesSlot) {
  join("gpu-01", "h100");
  v1::StartValidation start;
  start.set_suite("burn");
  start.set_machine("gpu-01");
  auto v = validation::make_validation("val-20261006-000b01", start, {"gpu-01"}, "on-demand", 0);
  auto& burn = *v.mutable_steps(0);
  burn.set_state(validation::running);
  burn.set_attempts(1);
  burn.set_run("val-20261006-000b01-gpu-01-burn-1");
  w->submitted[burn.run()] = validation::run_spec(v, 0, 8, "astraeus-check");
  ASSERT_FALSE(db->put(family::validations, "val/" + v.id(), v, true));
  restart_controller();
  auto resp = validate("quick", "gpu-01");
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), 1u) << "neither the burn-in again nor a check beside it";
  v1::Request get;
  get.mutable_get_validation()->set_id(resp.validation().id());
  auto quick = ask<v1::Response>(actor_, std::move(get));
  ASSERT_EQ(quick.validation().steps_size(), 1);
  EXPECT_EQ(quick.validation().steps(0).reason(), "gpu-01: another check runs there");
  w->checks_end = true;
  for (int i = 0; i < 4; ++i)
    advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.count(resp.validation().id() + "-gpu-01-quick-1"), 1u)
    << "the quick check runs once the burn-in ended";
  EXPECT_EQ(w->submitted.size(), 2u);
}

// A new-user trial: `astra astraeus accept gpu-01 --reason "already fine"` on
// an Up machine printed "machine gpu-01 accepted; it is Up", exit 0, and
// changed nothing. Only a machine that waits for acceptance is accepted.
TEST_F(Validations, AcceptingAMachineThatIsNotAcceptingIsRefusedAndChangesNothing) {
  join("gpu-01", "h100");
  auto accept = [&](const std::string& machine) {
    v1::Request req;
    req.set_id(6);
    req.mutable_caller()->set_name("alice");
    req.mutable_accept_machine()->set_machine(machine);
    req.mutable_accept_machine()->set_reason("already fine");
    return ask<v1::Response>(actor_, std::move(req));
  };
  auto resp = accept("gpu-01");
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().code(), "failed_precondition");
  EXPECT_EQ(resp.error().message(), "machine gpu-01 is not Accepting (it is Up) and no "
                                    "acceptance of it failed: nothing to accept");
  EXPECT_FALSE(w->machines["gpu-01"].accepted);

  ASSERT_FALSE(set_policy("h100", true).has_error());
  join("gpu-02", "h100");
  for (int i = 0; i < 3; ++i)
    advance(std::chrono::seconds{2});
  ASSERT_EQ(view_of("gpu-02", w->machines["gpu-02"]).state(), v1::Machine::Accepting);
  resp = accept("gpu-02");
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  EXPECT_TRUE(w->machines["gpu-02"].accepted);
  EXPECT_EQ(w->machines["gpu-02"].reason, "already fine");
  resp = accept("gpu-02");
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(),
            "machine gpu-02 is not Accepting (it is Up, accepted already): nothing to accept");
}

// A new-user trial: the network suite on one named machine said "1 machine
// is Up" while 5 were, and a request naming no machines answered in astra's
// flags (--pool POOL) to the API. Each says what was wrong in the request's
// own terms.
TEST_F(Validations, ARequestThatCannotRunSaysWhatWasWrongInItsOwnTerms) {
  join("gpu-01", "h100");
  join("gpu-02", "h100");
  join("gpu-03", "a100");
  auto resp = validate("network", "gpu-01");
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(),
            "the network suite measures pairs of machines: one machine (gpu-01) was named; name "
            "a pool of two or more machines that are Up");
  v1::Request req;
  req.set_id(7);
  req.mutable_caller()->set_name("alice");
  req.mutable_start_validation()->set_suite("quick");
  resp = ask<v1::Response>(actor_, req);
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(), R"(name the machines to check: give "pool" or "machine")");
  req.mutable_start_validation()->set_suite("network");
  req.mutable_start_validation()->set_pool("a100");
  resp = ask<v1::Response>(actor_, req);
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(), "the network suite measures pairs of machines: only gpu-03 "
                                    "of pool a100 is Up; it needs two or more");
}

// A new-user trial: a mistaken `--burn-in 7d` could not be stopped, and
// deleting its check's run made the validation run it again. `astra
// astraeus cancel ID` ends it: the check running is removed, nothing more
// starts, the machine's slot is free for the next check, and what had
// ended keeps its result. A restart does not bring it back.
TEST_F(Validations, ACancelledValidationStopsItsCheckFreesItsMachineAndKeepsWhatEnded) {
  join("gpu-01", "h100");
  auto started = validate("acceptance", "gpu-01");
  ASSERT_FALSE(started.has_error()) << started.error().message();
  const auto id = started.validation().id();
  advance(std::chrono::milliseconds{500});
  ASSERT_EQ(w->submitted.count(id + "-gpu-01-quick-1"), 1u);
  // The quick check ends; the DCGM diagnostics start.
  w->checks_end = true;
  advance(std::chrono::milliseconds{500});
  w->checks_end = false;
  const auto dcgm = id + "-gpu-01-dcgm-1";
  ASSERT_EQ(w->submitted.count(dcgm), 1u);
  const auto before = w->submitted.size();

  auto cancel = [&](const std::string& which) {
    v1::Request req;
    req.set_id(9);
    req.mutable_caller()->set_name("alice");
    req.mutable_cancel_validation()->set_id(which);
    req.mutable_cancel_validation()->set_reason("wrong pool");
    return ask<v1::Response>(actor_, std::move(req));
  };
  auto resp = cancel(id);
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  const auto& v = resp.validation();
  EXPECT_EQ(v.state(), "Cancelled");
  EXPECT_EQ(v.cancelled_by(), "alice");
  EXPECT_EQ(v.cancel_reason(), "wrong pool");
  EXPECT_GT(v.finished_unix_ms(), 0);
  ASSERT_EQ(v.steps_size(), 5);
  EXPECT_EQ(v.steps(0).state(), "Done") << "the quick check had ended: its result is kept";
  EXPECT_EQ(v.steps(0).verdict(), "pass");
  for (int i = 1; i < v.steps_size(); ++i) {
    EXPECT_EQ(v.steps(i).state(), "Cancelled") << v.steps(i).check();
    EXPECT_EQ(v.steps(i).verdict(), "") << v.steps(i).check();
    EXPECT_EQ(v.steps(i).reason(), "cancelled by alice (wrong pool)");
  }
  EXPECT_EQ(w->removed.count(dcgm), 1u) << "the running check's run is removed";
  for (int i = 0; i < 30; ++i)
    advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), before) << "nothing more is started";

  // As stored and listed; the quick check's result is the machine's latest.
  v1::Request get;
  get.mutable_get_validation()->set_id(id);
  EXPECT_EQ(ask<v1::Response>(actor_, get).validation().state(), "Cancelled");

  // Its machine's slot is free: the next check runs at once.
  auto next = validate("quick", "gpu-01");
  ASSERT_FALSE(next.has_error()) << next.error().message();
  advance(std::chrono::milliseconds{500});
  EXPECT_EQ(w->submitted.count(next.validation().id() + "-gpu-01-quick-1"), 1u);

  // Ended: nothing to cancel (409 through the API); not known: named.
  resp = cancel(id);
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().code(), "failed_precondition");
  EXPECT_EQ(resp.error().message(),
            "validation " + id + " has ended (Cancelled): nothing to cancel");
  resp = cancel("val-20991231-ffffff");
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(), "no validation named val-20991231-ffffff (astra astraeus "
                                    "validations lists them)");

  // A restart loads it Cancelled and runs none of its checks again.
  w->checks_end = true;
  for (int i = 0; i < 4; ++i)
    advance(std::chrono::seconds{1});
  const auto after = w->submitted.size();
  restart_controller();
  for (int i = 0; i < 6; ++i)
    advance(std::chrono::seconds{1});
  EXPECT_EQ(w->submitted.size(), after);
  EXPECT_EQ(ask<v1::Response>(actor_, get).validation().state(), "Cancelled");
}

// A seventh new-user trial: the waiting reason says to re-run a pool's
// acceptance with `validate --suite acceptance --machine`; it ran with the
// default 10m burn-in where the pool's policy said 20m. An acceptance run
// by hand takes its pool's policy unless the request gives its own.
// The bring-up seed's troubleshooting: "Acceptance fails on one machine only
// ... accept it anyway with a reason if you choose to ship it as-is (astra
// astraeus accept gpu-03 --reason ...)". Run by hand in a pool with no
// policy, the failed machine is Up, not Accepting: it is accepted all the
// same, once.
TEST_F(Validations, AnUpMachineWhoseAcceptanceFailedIsAcceptedAnywayOnce) {
  join("gpu-03", "h100");
  w->verdict = "fail";
  w->checks_end = true;
  auto started = validate("acceptance", "gpu-03");
  ASSERT_FALSE(started.has_error()) << started.error().message();
  const auto id = started.validation().id();
  for (int i = 0; i < 40; ++i)
    advance(std::chrono::seconds{1});
  v1::Request get;
  get.mutable_get_validation()->set_id(id);
  ASSERT_EQ(ask<v1::Response>(actor_, get).validation().state(), "Failed");
  ASSERT_EQ(view_of("gpu-03", w->machines["gpu-03"]).state(), v1::Machine::Up);
  auto accept = [&] {
    v1::Request req;
    req.set_id(6);
    req.mutable_caller()->set_name("alice");
    req.mutable_accept_machine()->set_machine("gpu-03");
    req.mutable_accept_machine()->set_reason("ship as-is; GPU 3 RMA'd");
    return ask<v1::Response>(actor_, std::move(req));
  };
  auto resp = accept();
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  EXPECT_TRUE(w->machines["gpu-03"].accepted);
  EXPECT_EQ(w->machines["gpu-03"].reason, "ship as-is; GPU 3 RMA'd");
  EXPECT_EQ(resp.machine().accepted_reason(), "ship as-is; GPU 3 RMA'd");
  resp = accept();
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(),
            "machine gpu-03 is not Accepting (it is Up, accepted already): nothing to accept");

  // A cancelled acceptance judged nothing: after one that passed, a second
  // one cancelled leaves nothing to accept (a ninth trial's).
  join("gpu-04", "h100");
  w->verdict = "pass";
  auto passed = validate("acceptance", "gpu-04");
  ASSERT_FALSE(passed.has_error()) << passed.error().message();
  for (int i = 0; i < 40; ++i)
    advance(std::chrono::seconds{1});
  get.mutable_get_validation()->set_id(passed.validation().id());
  ASSERT_EQ(ask<v1::Response>(actor_, get).validation().state(), "Passed");
  w->checks_end = false;
  auto second = validate("acceptance", "gpu-04");
  ASSERT_FALSE(second.has_error()) << second.error().message();
  advance(std::chrono::milliseconds{500});
  v1::Request cancel;
  cancel.set_id(9);
  cancel.mutable_caller()->set_name("alice");
  cancel.mutable_cancel_validation()->set_id(second.validation().id());
  ASSERT_FALSE(ask<v1::Response>(actor_, cancel).has_error());
  v1::Request again;
  again.set_id(7);
  again.mutable_caller()->set_name("alice");
  again.mutable_accept_machine()->set_machine("gpu-04");
  again.mutable_accept_machine()->set_reason("after cancel");
  resp = ask<v1::Response>(actor_, std::move(again));
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().message(), "machine gpu-04 is not Accepting (it is Up) and no "
                                    "acceptance of it failed: nothing to accept");
}

TEST_F(Validations, AnAcceptanceRunByHandTakesItsPoolsBurnInAndDcgmLevel) {
  v1::Request policy;
  policy.set_id(1);
  policy.mutable_caller()->set_name("alice");
  auto* p = policy.mutable_set_validation_policy()->mutable_policy();
  p->set_pool("h100");
  p->set_burn_in_seconds(1200);
  p->set_dcgm_level(3);
  ASSERT_FALSE(ask<v1::Response>(actor_, policy).has_error());
  join("gpu-01", "h100");
  auto resp = validate("acceptance", "gpu-01");
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  EXPECT_EQ(resp.validation().burn_in_seconds(), 1200u);
  EXPECT_EQ(resp.validation().dcgm_level(), 3u);
  // Given in the request: the request's.
  v1::Request own;
  own.set_id(2);
  own.mutable_caller()->set_name("alice");
  own.mutable_start_validation()->set_suite("acceptance");
  own.mutable_start_validation()->set_machine("gpu-01");
  own.mutable_start_validation()->set_burn_in_seconds(60);
  auto mine = ask<v1::Response>(actor_, own);
  ASSERT_FALSE(mine.has_error()) << mine.error().message();
  EXPECT_EQ(mine.validation().burn_in_seconds(), 60u);
  EXPECT_EQ(mine.validation().dcgm_level(), 3u);
  // A DCGM level dcgmi has not is refused, as a policy's is.
  own.mutable_start_validation()->set_dcgm_level(9);
  auto bad = ask<v1::Response>(actor_, own);
  ASSERT_TRUE(bad.has_error());
  EXPECT_EQ(bad.error().message(), "dcgm_level 9 is not 1, 2, 3 or 4 (0: the default, 2)");
}
