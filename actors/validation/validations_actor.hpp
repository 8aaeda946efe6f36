#pragma once
/// @file
/// The validations of a controller: one actor that starts validations (on
/// demand, the quick check of a machine that came Up, the acceptance its
/// pool's policy asks for), spawns one validation actor each, grants each
/// machine's one check slot (only while its GPUs are free of real work),
/// keeps the latest result per (machine, check), the pools' policies and
/// answers the CLI's and the API's validation requests. Everything it keeps
/// is in family `validations` ("val/<id>", "latest/<machine>/<check>",
/// "policy/<pool>"), loaded again at start: Running validations resume.
/// Handlers: actors/interfaces.hpp (validations_actor).

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include <caf/actor_clock.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/validation/cluster_report.hpp"
#include "messages/astraeus.pb.h"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;

/// Settings of the validations actor.
struct validations_config {
  /// The controller's store; required.
  std::shared_ptr<Store> store;
  /// Where checks run; required.
  scheduler_actor scheduler;
  /// Times users read; ids' dates.
  std::shared_ptr<const wall_clock> clock = real_wall_clock();
  /// `validation.check_program`: the program a check runs (on the agent).
  std::string check_program = "astraeus-check";
  /// How often a validation looks at its steps (virtual in tests).
  caf::timespan poll_interval = std::chrono::milliseconds{500};
  /// How often machines are looked at for a new Up (the quick check) and
  /// for their pool's policy.
  caf::timespan machine_poll = std::chrono::seconds{2};
  /// `validation.quick_on_up`: run the quick check when a machine comes Up.
  bool quick_on_up = true;
  /// The console's address ("https://host:8443"); a validation's page is
  /// `<console_url>/o/<organization>/w/default/validation?cluster=<cluster_name>&validation=<id>`
  /// (README, "Validation"; the seed bring-up-a-gpu-cluster.md); empty: the
  /// API's address once it runs (`install`), else none shown.
  std::string console_url;
  /// The organisation and cluster in console addresses (api.organization,
  /// cluster.name).
  std::string organization = "default";
  std::string cluster_name = "default";
  /// Where the API runs (it serves the console): the console's address when
  /// console_url is empty. Null: none.
  std::shared_ptr<install_site> install;
  /// Seeds the random part of ids (tests fix it).
  uint64_t seed = 0;
  /// `validation.installer_batch_delay`: machines installed with --accept
  /// get one acceptance this long after the last of their joining batch.
  std::chrono::milliseconds installer_delay = std::chrono::minutes{2};
};

/// After a restart, how long a machine with a stored quick check may take to
/// be seen Up again and still count as reconnecting (no quick check).
inline constexpr auto quick_restore_grace = std::chrono::minutes{2};

/// The state of the validations actor.
struct validations_state {
  /// Actor name for CAF.
  static inline const char* name = "validations";
  validations_config config;
  /// Set by atom::attach.
  cluster_actor cluster;
  /// Every validation, by id (the latest copy its actor sent).
  std::map<std::string, v1::Validation> validations;
  /// The actors of running validations.
  std::map<std::string, validation_actor> running;
  /// Machine -> the validation holding its check slot.
  std::map<std::string, std::string> slots;
  /// The latest step per (machine, check).
  validation::latest_map latest;
  /// Pool -> its policy.
  std::map<std::string, v1::ValidationPolicy> policies;
  /// Machines seen Up (or Accepting) at the last look.
  std::set<std::string> up;
  /// The GPUs each of them reported at the last look: a machine whose count
  /// grows (a driver that loaded after it joined, a GPU back) gets a new
  /// quick check, so its badge does not keep a result from before.
  std::map<std::string, int> gpus_seen;
  /// Of them, the GPUs runs can have (not set aside by the scheduler) at
  /// the last look: a machine whose latest quick check failed gets a new
  /// one when this grows (GPUs set aside given back). Not for a machine
  /// whose quick check passed: set-asides that settle after a restart would
  /// otherwise run a quick check on every machine.
  std::map<std::string, int> usable_seen;
  /// After a restart: machines with a stored quick check -> when it was
  /// restored (actor clock). Such a machine seen Up within
  /// `quick_restore_grace` of it is taking up its session again, not coming
  /// Up: no quick check runs (restore_quick_checks).
  std::map<std::string, caf::actor_clock::time_point> quick_restored;
  /// Machines whose policy acceptance was started: by this run, or stored
  /// (a restart starts none again; restore_acceptances).
  std::set<std::string> acceptance_started;
  /// Machine -> whether it was last told its pool requires acceptance.
  std::map<std::string, bool> told_required;
  /// Issue 20/21: machine installed with --accept -> when the poll first saw
  /// its request (actor clock, ms: a duration's start, issue 23 item 4);
  /// and those an installer acceptance was started
  /// for (by this run; the stored validations say it after a restart).
  std::map<std::string, int64_t> requested_seen;
  std::set<std::string> installer_started;
  /// Issue 12: each machine's degraded RDMA ports as the scheduler was last
  /// told them (tell_degraded_ports), wire bytes by machine; it starts with
  /// none.
  std::map<std::string, std::string> degraded_told;
  std::mt19937_64 rng;
};

/// The validations actor's behaviour.
validations_actor::behavior_type
validations(validations_actor::stateful_pointer<validations_state> self,
            validations_config config);

} // namespace astraeus
