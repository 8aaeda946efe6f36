#pragma once
/// @file
/// Which controller's gate an agent connects to next (issue 15, HA mode):
/// the gates it was given (`--controller A,B,C`, or one), and the leader a
/// standby names ("not the leader; the leader's gate is X": a v1::Refusal
/// with code `not_leader`, actors/controller/standby_gate.hpp). Plain logic,
/// no messaging: the agent asks `target()` before each attempt and reports
/// how the attempt went; each report says when to try next.
///
/// The rules:
/// - A standby that names a leader is followed at once, unless that leader
///   failed since the last pause (a standby names a dead leader until its
///   lease runs out, ~2 s) or three redirects were followed since: then a
///   short pause (`soon`), and the next given gate is asked.
/// - A gate that fails moves on to the next given one at once; after all of
///   them failed in a row: `soon` when a standby answered in that round (an
///   HA group between leaders), else exponential back-off (`back_off`: no
///   controller is up).
/// - A followed leader that fails sends the agent back to the given gate
///   that named it, at once.
/// - A session that ends after a welcome tries the same gate again at once.
/// - A gate that goes silent (HA mode: a welcomed session heard nothing for
///   three keepalive intervals, or a connection got no welcome within that
///   bound: a frozen leader, SIGSTOP or a paused VM, whose kernel still
///   holds its sockets) is left for the next given gate at once, and
///   avoided: skipped among the given gates, and not followed when a
///   standby names it (a pause instead, as for a failed leader), until the
///   agent is welcomed anywhere, a standby names another leader, or
///   standbys named it `silent_answers` times (about 2 s of pauses: a
///   leader that was frozen for less than its lease still leads, and is
///   followed again).
/// - `soon` waits `soon_delay()`: 250 ms for the first 12 in a row (an
///   election is over within a lease TTL and etcd's sweep, ~2.5 s), then
///   doubling up to the agent's back-off cap, so a group that stays
///   leaderless is not asked four times a second forever.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace astraeus {

/// One controller's gate.
struct gate_target {
  std::string host;
  uint16_t port = 0;

  bool operator==(const gate_target& other) const {
    return host == other.host && port == other.port;
  }
  bool operator!=(const gate_target& other) const {
    return !(*this == other);
  }
  /// "HOST:PORT".
  std::string text() const {
    return host + ":" + std::to_string(port);
  }
};

/// When to make the next attempt.
enum class retry_when {
  at_once,   ///< now
  soon,      ///< after `gate_targets::soon_delay()`
  back_off,  ///< after the agent's exponential back-off
};

/// The agent's choice of gate; see the file comment for the rules.
class gate_targets {
public:
  /// The short pause between rounds while an HA group has no reachable leader.
  static constexpr std::chrono::milliseconds soon_base{250};
  /// How many pauses in a row stay `soon_base` before they double.
  static constexpr uint32_t soon_flat = 12;
  /// How many redirects are followed in a row before a pause.
  static constexpr uint32_t max_hops = 3;
  /// How many standby answers naming a silent gate as the leader it stays
  /// avoided for.
  static constexpr uint32_t silent_answers = 8;

  /// `given`: the gates the agent was configured with (at least one).
  explicit gate_targets(std::vector<gate_target> given);

  /// The gate to connect to now.
  const gate_target& target() const;

  /// Whether `target()` is a leader a standby named (not a given gate).
  bool following() const {
    return following_.has_value();
  }

  /// The connection to `target()` failed, or ended before a welcome.
  retry_when failed();

  /// The target welcomed the agent: every count starts again.
  void welcomed();

  /// A welcomed session ended (the leader went away).
  retry_when lost();

  /// The target went silent (see the file comment): it is avoided, and the
  /// next given gate that is not avoided is tried at once.
  retry_when silent();

  /// Whether `gate` is the silent gate being avoided.
  bool avoided(const gate_target& gate) const {
    return silent_ && *silent_ == gate;
  }

  /// The target is a standby; `leader` leads.
  retry_when not_leader(const gate_target& leader);

  /// The target is a standby and no controller leads yet.
  retry_when no_leader();

  /// How long the last `soon` waits (before jitter): `soon_base`, doubling
  /// after `soon_flat` in a row, at most `cap`.
  std::chrono::milliseconds soon_delay(std::chrono::milliseconds cap) const;

private:
  /// A pause: the next given gate is asked after it.
  retry_when pause();
  /// The given gate failed: on to the next, or the round is over.
  retry_when next_given();
  /// Forgets the round (after a welcome, a pause or a back-off).
  void new_round();
  /// Moves `index_` to the next given gate, past an avoided one unless it
  /// is the only one. Returns how many gates it moved by (1 or 2).
  size_t advance();

  std::vector<gate_target> given_;
  size_t index_ = 0;                      ///< the given gate tried now
  std::optional<gate_target> following_;  ///< the named leader tried now
  size_t failed_in_round_ = 0;            ///< given gates that failed in a row
  bool standby_answered_ = false;         ///< a standby answered this round
  std::vector<gate_target> failed_;       ///< gates that failed since the last pause
  uint32_t hops_ = 0;                     ///< redirects followed since the last pause
  uint32_t soons_ = 0;                    ///< pauses since the last welcome
  std::optional<gate_target> silent_;     ///< the silent gate avoided now
  uint32_t silent_named_ = 0;             ///< standby answers naming it since
};

} // namespace astraeus
