#pragma once
/// @file
/// The pairs of a validation, without actors (issue 12;
/// shared/seeds/bring-up-a-gpu-cluster.md, step 3: "the fabric between every
/// pair"): the round schedule, the pair steps, the rails two machines
/// share, the two runs of a pair (ib_write_bw server and client, through
/// `astraeus-check pair`), and the judgement against the best pair that
/// only the controller can make (it sees every pair). Thresholds:
/// runtime/validation/check_policy.hpp (pairs.*).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/validation/check_policy.hpp"
#include "runtime/validation/pair_check.hpp"

namespace astraeus::validation {

/// The check name of a pair step (and of `astraeus-check pair`'s result).
inline constexpr const char* pair_check = "pair";

/// A round: pairs of machine indexes (lower index first), disjoint.
using pair_round = std::vector<std::pair<int, int>>;

/// Every pair of `n` machines in rounds of disjoint pairs, by the circle
/// method: machine 0 stays, the others turn one place a round. n even: n-1
/// rounds of n/2 pairs; n odd: n rounds of (n-1)/2 pairs (a bye: each
/// machine sits out one round). Empty for n < 2.
std::vector<pair_round> pair_rounds(int n);

/// Whether `suite` runs the pairs: "acceptance" and "network".
bool suite_has_pairs(const std::string& suite);

/// Appends one Queued pair step per pair of `v`'s machines (machine = the
/// server, peer = the client, round = its round), after its other steps.
void add_pair_steps(v1::Validation& v);

/// Whether `step` is a pair step.
bool is_pair(const v1::ValidationStep& step);

/// Whether every step of `v` that is not a pair or all-reduce step is Done or
/// Failed (the pairs run after the machines' own checks).
bool machine_steps_finished(const v1::Validation& v);

/// The pair steps that may start now: the Queued or Yielded ones of the
/// lowest round that still has a step not Done or Failed, once
/// machine_steps_finished(); empty otherwise.
std::vector<int> startable_pairs(const v1::Validation& v);

/// The rails `a` and `b` share: the same device and port Active on both
/// (state ACTIVE), of the same link layer and subnet prefix (where both
/// report one: the same fabric), sorted by device then port, each with the
/// slower end's trained rate.
std::vector<pair_rail> shared_rails(const v1::MachineView& a, const v1::MachineView& b);

/// The run of one end of pair step `index`: `program pair --json --role
/// server|client --rails LIST [--peer ADDR]` (command(6) is LIST) as a
/// CPU-only host process on its machine (server: the step's machine;
/// client: its peer, naming the server's address, the MASTER_ADDR of the
/// server's placed run), at the lowest priority; named
/// "<id>-<a>-<b>-<attempt>-s|c".
v1::RunSpec pair_spec(const v1::Validation& v, int index, bool server,
                      const std::vector<pair_rail>& rails, const std::string& server_address,
                      const std::string& program);

/// The run name of one end of pair step `index` at attempt `attempt`.
std::string pair_run_name(const v1::Validation& v, int index, uint32_t attempt, bool server);

/// "gpu-03–gpu-06": a pair step's machines.
std::string pair_label(const v1::ValidationStep& step);

/// The pair results of `steps` (Done pair steps; others ignored): one per
/// rail measured, `of_best` its figure over the best pair's on that device;
/// its verdict the worse of the check's and the peer rule's: a rail whose
/// figure over its trained rate is below pairs.peer_fraction x the best
/// pair's on that rail warns (so a pair at the pace of a port trained at 200
/// Gb/s is not held against pairs at 400: the topology finding names that
/// port). Sorted by a, b, device.
std::vector<v1::PairResult> pair_results(const std::vector<const v1::ValidationStep*>& steps,
                                         const thresholds& t);

/// Once every pair step of `v` is finished: adds to each Done pair step a
/// warn finding per rail the peer rule of pair_results() warns ("gpu-03–gpu-06
/// mlx5_3 at 77% of the best pair on that rail (300.0 of 391.2 Gb/s)") and
/// makes its verdict at least warn. Returns the indexes of the steps it
/// changed (to tell the owner again); applies only once (a step with such a
/// finding is not judged again).
std::vector<int> judge_pairs(v1::Validation& v, const thresholds& t);

/// A machine's verdict from its pairs' (pass | warn | fail | skipped; a pair
/// that could not run counts as fail). A bad pair names both its machines,
/// so a machine takes the worst of its bad pairs only when more than half of
/// its pairs are bad (then it is what they have in common; with one pair,
/// both machines take it); else pass ("skipped" when every pair was).
/// "" for none.
std::string machine_pairs_verdict(const std::vector<std::string>& verdicts);

/// The weakest pair, over every rail together: "pair gpu-03–gpu-06 at 92% of
/// the best pair"; "" with fewer than two pairs measured.
std::string weakest_pair_phrase(const std::vector<v1::PairResult>& pairs);

}  // namespace astraeus::validation
