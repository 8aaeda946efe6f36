#include "actors/agent/agent.hpp"
#include "runtime/faults/device_events.hpp"
#include "actors/agent/report_schedule.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/system_messages.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>

#include "actors/agent/probe_actor.hpp"
#include "runtime/host/numa_facts.hpp"
#include "runtime/host/rdma_fabric.hpp"
#include "runtime/process/program_run.hpp"
#include "messages/error.hpp"
#include "messages/gpu_read.hpp"
#include "messages/report_readings.hpp"
#include "runtime/process/wall_clock.hpp"
#include "messages/type_ids.hpp"
#include "messages/worker_state.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/gate_client.hpp"
#include "runtime/process/private_file.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace fs = std::filesystem;
using caf::io::connection_handle;
using caf::io::receive_policy;

namespace {

caf::expected<std::string> read_small_file(const fs::path& path) {
  return read_trimmed_file(path.string());
}

bool is_hex_id(const std::string& s) {
  if (s.size() != 32)
    return false;
  for (auto c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

std::string random_machine_id() {
  std::random_device rd;
  std::string out;
  static constexpr char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i)
    out.push_back(digits[rd() % 16]);
  return out;
}

} // namespace

caf::expected<agent_identity>
load_or_create_identity(const std::string& data_dir,
                        const std::string& requested_name,
                        const std::string& hostname) {
  std::error_code err;
  fs::create_directories(data_dir, err);
  if (err)
    return caf::make_error(ec::store_failure, "cannot create the agent's data "
                                              "folder "
                                                + data_dir + ": "
                                                + err.message());
  ::chmod(data_dir.c_str(), 0700);
  agent_identity out;
  // Checked without exceptions: a folder this user cannot read is an error
  // naming it, not a crash.
  auto exists = [](const fs::path& p) -> caf::expected<bool> {
    std::error_code ec_;
    auto found = fs::exists(p, ec_);
    if (ec_)
      return caf::make_error(ec::store_failure,
                             "cannot read " + p.string() + ": " + ec_.message());
    return found;
  };
  auto id_path = fs::path{data_dir} / "machine-id";
  auto id_exists = exists(id_path);
  if (!id_exists)
    return id_exists.error();
  if (*id_exists) {
    auto id = read_small_file(id_path);
    if (!id)
      return id.error();
    if (!is_hex_id(*id))
      return caf::make_error(ec::invalid_config,
                             id_path.string()
                               + " does not hold a machine id (32 hex digits); "
                                 "restore it from a backup, or remove it to "
                                 "give this machine a new identity");
    out.machine_id = *id;
  } else {
    out.machine_id = random_machine_id();
    if (auto e = write_private_file(id_path.string(), out.machine_id))
      return e;
  }
  auto name_path = fs::path{data_dir} / "name";
  if (!requested_name.empty()) {
    out.name = requested_name;
  } else if (auto name_exists = exists(name_path); !name_exists) {
    return name_exists.error();
  } else if (*name_exists) {
    auto name = read_small_file(name_path);
    if (!name)
      return name.error();
    out.name = *name;
  }
  if (out.name.empty())
    out.name = hostname;
  auto name_exists = exists(name_path);
  if (!name_exists)
    return name_exists.error();
  auto stored = *name_exists ? read_small_file(name_path)
                             : caf::expected<std::string>{std::string{}};
  if (!stored || *stored != out.name)
    if (auto e = write_private_file(name_path.string(), out.name))
      return e;
  return out;
}

bool refusal_is_final(const std::string& code) {
  return code == "enrollment_used" || code == "enrollment_expired"
         || code == "enrollment_required" || code == "identity_mismatch";
}

caf::error agent_config::validate() const {
  if (identity.name.empty() || identity.machine_id.empty() || !key)
    return caf::make_error(ec::invalid_config, "agent: no machine identity");
  if (controller_host.empty() || controller_port == 0)
    return caf::make_error(ec::invalid_config,
                           "controller.address/port: not set");
  if (report_interval.count() <= 0)
    return caf::make_error(ec::invalid_config,
                           "report.interval: must be positive");
  if (reconnect_min.count() <= 0 || reconnect_max < reconnect_min)
    return caf::make_error(ec::invalid_config,
                           "reconnect.min_backoff/max_backoff: need 0 < min "
                           "<= max");
  if (!clock)
    return caf::make_error(ec::invalid_config, "agent: no wall clock");
  if (!boot)
    return caf::make_error(ec::invalid_config, "agent: no boot clock");
  return caf::none;
}

v1::MachineReport make_report(const agent_config& config, uint64_t sequence,
                              const v1::GpuSection* gpus) {
  v1::MachineReport report;
  report.set_machine(config.identity.name);
  report.set_sequence(sequence);
  report.set_sent_unix_ms(config.clock->now_unix_ms());
  report.set_agent_version(ASTRAEUS_VERSION);
  report.set_data_location(config.data_location);
  report.set_request_acceptance(config.request_acceptance);
  *report.mutable_facts() = read_host_facts(config.host);
  if (gpus != nullptr)
    *report.mutable_facts()->mutable_gpus() = *gpus;
  place_gpus_on_the_only_numa_node(*report.mutable_facts());
  return report;
}

void shrink_to_readings(agent_state& st, v1::MachineReport& report) {
  auto statics = without_readings(report.facts()).SerializeAsString();
  if (st.full_sequence != 0 && statics == st.full_static
      && st.readings_since_full < readings_between_full_reports) {
    *report.mutable_readings() = readings_only(report.facts());
    report.clear_facts();
    report.set_readings_of(st.full_sequence);
    ++st.readings_since_full;
    return;
  }
  st.full_sequence = report.sequence();
  st.full_static = std::move(statics);
  st.readings_since_full = 0;
}

bool gpu_section_changed(const v1::GpuSection& before,
                         const v1::GpuSection& after) {
  if (read_as(before) != read_as(after)
      || before.gpus_size() != after.gpus_size()
      || before.bus_size() != after.bus_size()
      || before.conditions_size() != after.conditions_size())
    return true;
  for (int i = 0; i < before.gpus_size(); ++i)
    if (before.gpus(i).id() != after.gpus(i).id()
        || read_status(before.gpus(i)) != read_status(after.gpus(i)))
      return true;
  for (int i = 0; i < before.conditions_size(); ++i)
    if (before.conditions(i).status() != after.conditions(i).status()
        || before.conditions(i).reason() != after.conditions(i).reason())
      return true;
  return false;
}

namespace {

using agent_ptr = agent_actor::stateful_broker_pointer<agent_state>;

void latch_hand_over_failures(agent_ptr self);

/// Reports at most as far apart as the controller asks (its welcome), so
/// its heartbeat lapse is at least three report intervals (issue 18).
void adopt_report_interval(agent_ptr self,
                           const v1::Welcome& welcome) {
  auto& st = self->state;
  auto told = std::chrono::duration_cast<caf::timespan>(
    std::chrono::milliseconds{welcome.report_interval_ms()});
  auto next = effective_report_interval(st.config.report_interval, told);
  if (next != st.report_interval && next < st.config.report_interval)
    spdlog::warn("agent {}: report.interval {} ms is longer than the controller's {} ms "
                 "(its heartbeat lapse is {} ms): reporting every {} ms",
                 st.config.identity.name,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                   st.config.report_interval).count(),
                 welcome.report_interval_ms(), welcome.heartbeat_lapse_ms(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(next).count());
  if (next < st.report_interval) {
    // Sooner from now on: a tick for the new deadline; the pending one
    // then comes before its deadline and is ignored.
    auto now = self->clock().now();
    if (now + next < st.report_due) {
      st.report_due = now + next;
      self->delayed_send(self, next, atom::tick_v);
    }
  }
  st.report_interval = next;
}


void send_bytes(agent_ptr self, const std::string& bytes) {
  auto& st = self->state;
  auto& buf = self->wr_buf(st.connection);
  auto first = reinterpret_cast<const char*>(bytes.data());
  buf.insert(buf.end(), first, first + bytes.size());
  self->flush(st.connection);
}

/// Sends a frame, sealed; nothing before the channel is established.
void send_frame(agent_ptr self, const v1::Frame& frame) {
  auto& st = self->state;
  if (!st.connected || !st.channel || !st.channel->established())
    return;
  send_bytes(self, st.channel->encode(frame));
}

/// The hello, sent sealed as soon as the channel is established: the
/// machine's name and id, and its join token while it holds one (until
/// the first welcome: see agent_config::join_token).
void send_hello(agent_ptr self) {
  auto& st = self->state;
  v1::Frame frame;
  auto* hello = frame.mutable_hello();
  hello->set_protocol_version(protocol_version);
  hello->set_role(v1::AGENT);
  hello->set_machine_name(st.config.identity.name);
  hello->set_machine_id(st.config.identity.machine_id);
  hello->set_software_version(ASTRAEUS_VERSION);
  if (!st.config.join_token.empty())
    hello->set_join_token(st.config.join_token);
  send_frame(self, frame);
}

void probe_fabric(agent_ptr self);

/// Reads the host's facts now, and what follows from them: the CPU use
/// sample, the fabric probe, whether an RDMA port is up (for the next
/// discovery pass), the supervisor's ports and layout.
void read_host(agent_ptr self) {
  auto& st = self->state;
  st.host_facts = read_host_facts(st.config.host);
  st.cpu_use.sample(st.config.host.root, st.host_facts);
  st.facts_known = true;
  probe_fabric(self);
  // Remembered for the next discovery pass's capability summary.
  const auto& ports = st.host_facts.rdma_ports();
  st.rdma_up = std::any_of(ports.begin(), ports.end(),
                           [](const auto& p) { return p.state() == "ACTIVE"; });
  for (const auto& w : st.host_facts.warnings())
    spdlog::debug("agent {}: {}", st.config.identity.name, w);
  if (st.supervisor) {
    st.supervisor->set_rdma_ports({ports.begin(), ports.end()});
    st.supervisor->set_host_layout(st.host_facts);
  }
}

/// Sends a report. `fresh`: read the host's facts now (the heartbeat);
/// otherwise reuse the last ones read, so a report sent at once for a new
/// fault latch or a cleared one costs no host reads.
void send_report(agent_ptr self, bool fresh = false) {
  auto& st = self->state;
  if (!st.welcomed)
    return;
  if (fresh || !st.facts_known)
    read_host(self);
  v1::Frame frame;
  auto* report = frame.mutable_report();
  report->set_machine(st.config.identity.name);
  report->set_sequence(++st.sequence);
  report->set_sent_unix_ms(st.config.clock->now_unix_ms());
  report->set_agent_version(ASTRAEUS_VERSION);
  report->set_data_location(st.config.data_location);
  report->set_request_acceptance(st.config.request_acceptance);
  auto* facts = report->mutable_facts();
  *facts = st.host_facts;
  // Issue 12: where the InfiniBand ports are cabled, as far as known.
  apply_switch_links(*facts, st.switch_links,
                     st.fabric_how.empty() ? std::string{"iblinkinfo has not run yet"}
                                           : st.fabric_how);
  auto* gpus = facts->mutable_gpus();
  *gpus = st.gpus;
  if (!st.gpus_known) {
    // Not "no-gpu": the controller must not take this for a complete read
    // and forget the GPUs it knows (and their 24 h history).
    set_read_as(*gpus, gpu_read_as::pending);
    gpus->set_detail("GPU discovery has not finished yet");
  }
  place_gpus_on_the_only_numa_node(*facts);
  if (st.latches)
    st.latches->annotate(*gpus);
  // Events at devices with no GPU (an NVSwitch, a bridge) in the machine's
  // conditions (issue 17, rule 6).
  add_device_conditions(*gpus, st.config.clock->now_unix_ms());
  // A store that refuses writes (a full disk) is shown, not hidden: the
  // agent keeps reporting, with its latches held in memory (issue 23).
  if (st.config.store)
    facts->set_store_problem(st.config.store->write_problem());
  report->set_address(st.address);
  if (st.workers)
    *report->mutable_workers() = st.workers->statuses(st.config.identity.name);
  if (st.controller_takes_readings)
    shrink_to_readings(st, *report);
  send_frame(self, frame);
}

void schedule_reconnect(agent_ptr self) {
  auto& st = self->state;
  // Exponential back-off with +-20 % jitter, so a fleet that lost the
  // controller does not reconnect in lock step.
  static thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter{0.8, 1.2};
  auto delay = std::chrono::duration_cast<caf::timespan>(
    st.backoff * jitter(rng));
  self->delayed_send(self, delay, atom::reconnect_v);
  auto cap = st.backoff_cap.count() > 0 ? st.backoff_cap : st.config.reconnect_max;
  st.backoff = std::min(st.backoff * 2, std::max(cap, st.config.reconnect_min));
}

/// Connects next when `when` says: now, after a short pause (an HA group
/// between leaders), or after the exponential back-off.
void reconnect_when(agent_ptr self, retry_when when) {
  auto& st = self->state;
  switch (when) {
    case retry_when::at_once:
      self->send(self, atom::reconnect_v);
      return;
    case retry_when::soon: {
      static thread_local std::minstd_rand rng{std::random_device{}()};
      std::uniform_real_distribution<double> jitter{0.8, 1.2};
      auto cap = st.backoff_cap.count() > 0 ? st.backoff_cap : st.config.reconnect_max;
      auto delay = st.targets->soon_delay(
        std::chrono::duration_cast<std::chrono::milliseconds>(cap));
      self->delayed_send(self,
                         std::chrono::duration_cast<caf::timespan>(delay * jitter(rng)),
                         atom::reconnect_v);
      return;
    }
    case retry_when::back_off:
      schedule_reconnect(self);
      return;
  }
}

/// The connection ended without a refusal: after a welcomed session of
/// some length the same gate is tried again at once (the leader may be
/// back, or a standby names the next); otherwise it counts as a failed
/// attempt.
retry_when session_ended(agent_ptr self, bool was_welcomed) {
  auto& st = self->state;
  if (was_welcomed && self->clock().now() - st.welcomed_at >= st.config.reconnect_min)
    return st.targets->lost();
  return st.targets->failed();
}

/// Closes the connection (logged with `why`); the caller says when to
/// connect next. Returns whether the session had been welcomed.
bool close_connection(agent_ptr self, const std::string& why) {
  auto& st = self->state;
  if (!st.connected)
    return false;
  if (!why.empty())
    spdlog::warn("agent {}: disconnected from {}:{}: {}", st.config.identity.name,
                 st.config.controller_host, st.config.controller_port, why);
  self->close(st.connection);
  auto was_welcomed = st.welcomed;
  st.connected = false;
  st.welcomed = false;
  st.pending_body = 0;
  st.channel.reset();
  return was_welcomed;
}

/// Closes the connection after an error on it and connects again as
/// `session_ended` says.
void drop_connection(agent_ptr self, const std::string& why) {
  if (!self->state.connected)
    return;
  auto was_welcomed = close_connection(self, why);
  reconnect_when(self, session_ended(self, was_welcomed));
}

/// A standby's answer (HA mode): follows the leader it names, or, while
/// none leads, asks again shortly.
void on_standby_answer(agent_ptr self, const v1::Refusal& refusal) {
  auto& st = self->state;
  const auto& name = st.config.identity.name;
  auto standby = st.config.controller_host + ":" + std::to_string(st.config.controller_port);
  close_connection(self, "");
  std::optional<gate_address> leader;
  if (refusal.code() == to_string(ec::not_leader)) {
    auto parsed = parse_gate_address(refusal.leader());
    if (parsed)
      leader = *parsed;
    else
      spdlog::warn("agent {}: the standby at {} names a leader '{}' that is no "
                   "address: {}",
                   name, standby, refusal.leader(), render_error(parsed.error()));
  }
  if (!leader) {
    if (!st.named_leader.empty() || st.targets->following())
      spdlog::info("agent {}: the controller at {} is a standby and no controller "
                   "leads yet; asking again shortly",
                   name, standby);
    st.named_leader.clear();
    reconnect_when(self, st.targets->no_leader());
    return;
  }
  if (refusal.leader() != st.named_leader)
    spdlog::info("agent {}: the controller at {} is a standby; following the leader "
                 "at {}",
                 name, standby, refusal.leader());
  st.named_leader = refusal.leader();
  reconnect_when(self, st.targets->not_leader(gate_target{leader->host, leader->port}));
}

/// New latches are written without sync and reported at once; their sync
/// runs meanwhile on the latch syncer's thread (issue 17).
void request_latch_sync(agent_ptr self) {
  auto& st = self->state;
  if (!st.latches || !st.latch_syncer)
    return;
  auto generation = st.latches->unsynced_generation();
  if (generation > st.latch_sync_requested) {
    st.latch_sync_requested = generation;
    st.latch_syncer->request(generation);
  }
}

/// Writes the latches the store refused earlier (a full disk), now that it
/// may take them; they are reported durable with the next report.
void retry_not_durable(agent_ptr self) {
  auto& st = self->state;
  if (!st.latches || st.latches->not_durable_count() == 0)
    return;
  auto written = st.latches->retry_not_durable();
  if (!written)
    spdlog::warn("agent {}: {} fault latch(es) held in memory, not durable yet: {}",
                 st.config.identity.name, st.latches->not_durable_count(),
                 render_error(written.error()));
}

/// A GPU event from the kernel log: latch it (durably) and report a new
/// latch at once. Handled as it comes, discovery or not: an event at an
/// address no GPU is known at yet (the first pass has not finished, NVML
/// hangs) is latched against the address and fences the GPU found there.
void on_kernel_event(agent_ptr self, const v1::KernelEvent& ke) {
  auto& st = self->state;
  if (!st.latches)
    return;
  gpu_event ev;
  for (auto k : {gpu_event_kind::xid, gpu_event_kind::fallen_off_bus,
                 gpu_event_kind::amd_reset_begin, gpu_event_kind::amd_reset_succeeded,
                 gpu_event_kind::amd_reset_failed, gpu_event_kind::amd_ring_timeout,
                 gpu_event_kind::amd_vram_lost, gpu_event_kind::amd_ras_fatal,
                 gpu_event_kind::gpu_identity})
    if (ke.kind() == to_string(k))
      ev.kind = k;
  ev.pci_address = ke.pci_address();
  if (ke.has_xid())
    ev.xid = ke.xid();
  ev.text = ke.text();
  if (ev.kind == gpu_event_kind::gpu_identity)
    ev.uuid = gpu_uuid_in(ev.text);
  ev.sequence = ke.sequence();
  ev.timestamp_us = ke.timestamp_us();
  ev.part = ke.part();
  ev.after_jump = ke.after_jump();
  if (ke.has_wall()) {
    const auto& w = ke.wall();
    log_wall_time t;
    t.year = w.year();
    t.month = w.month();
    t.day = w.day();
    t.hour = w.hour();
    t.minute = w.minute();
    t.second = w.second();
    if (w.has_utc_offset_s())
      t.utc_offset_s = w.utc_offset_s();
    ev.wall = t;
  }
  auto latched = st.latches->on_event(ev, st.gpus, st.config.clock->now_unix_ms());
  if (!latched) {
    spdlog::error("agent {}: cannot store a fault latch: {}",
                  st.config.identity.name, render_error(latched.error()));
    return;
  }
  if (*latched)
    send_report(self);
  request_latch_sync(self);
}

/// Why the fault of GPU `id` may not be cleared now: the GPU is gone (NVML
/// does not list it, or says it is lost). A latch held against a PCI address
/// no GPU was ever named at may always be cleared. Clearing would drop it from the inventory
/// and say work may land on it while it is still gone (a user trial);
/// "" when it may.
std::string clear_refused_why(const agent_state& st, const std::string& id) {
  if (!st.latches || !st.gpus_known)
    return {};
  auto held = st.latches->latches().find(id);
  // Held against an address where no GPU was ever named: an admin may clear it.
  if (held == st.latches->latches().end() || held->second.empty()
      || held->second.front().gpu_id().empty())
    return {};
  for (const auto& g : st.gpus.gpus())
    if (g.id() == id)
      return read_status(g) != gpu_read_status::lost
               ? std::string{}
               : "GPU " + id + " is lost"
                   + (g.status_detail().empty() ? "" : " (" + g.status_detail() + ")")
                   + ": its fault stays latched until it answers again; reseat or "
                     "replace it (a new GPU at its address drops the old latch)";
  return "GPU " + id + " is not listed by the driver (NVML) now: its fault stays latched "
         "until it is back; reseat or replace it (a new GPU at its address drops the old "
         "latch)";
}

void on_clear_fault(agent_ptr self, const v1::ClearFaultCommand& cmd) {
  auto& st = self->state;
  v1::Frame frame;
  auto* reply = frame.mutable_clear_fault_reply();
  reply->set_id(cmd.id());
  reply->set_uuid(cmd.gpu());
  if (!st.latches) {
    reply->set_error("this agent keeps no fault latches");
  } else if (auto why = clear_refused_why(st, cmd.gpu()); !why.empty()) {
    reply->set_error(why);
  } else if (auto cleared = st.latches->clear(cmd.gpu()); !cleared) {
    reply->set_error(render_error(cleared.error()));
  } else {
    reply->set_cleared(*cleared);
  }
  send_frame(self, frame);
  if (reply->cleared())
    send_report(self);
}

/// Applies the controller's worker set and answers with the workers held.
/// A set sent in parts is applied once every part of its generation is in.
void on_worker_orders(agent_ptr self, v1::WorkerOrders& part) {
  auto& st = self->state;
  const auto& name = st.config.identity.name;
  if (st.refused_for_good) {
    spdlog::warn("agent {}: worker orders ignored: the controller refused this agent for good",
                 name);
    return;
  }
  v1::WorkerOrders orders;
  if (part.parts() > 1) {
    if (part.part() >= part.parts() || part.parts() > 4096) {
      spdlog::error("agent {}: worker orders part {} of {} ignored", name, part.part(),
                    part.parts());
      return;
    }
    if (st.orders_parts.generation() != part.generation()
        || st.parts_seen.size() != part.parts()) {
      st.orders_parts.Clear();
      st.orders_parts.set_machine(part.machine());
      st.orders_parts.set_generation(part.generation());
      st.parts_seen.assign(part.parts(), false);
    }
    if (st.parts_seen[part.part()])
      return;
    st.parts_seen[part.part()] = true;
    for (auto& w : *part.mutable_workers())
      *st.orders_parts.add_workers() = std::move(w);
    if (std::find(st.parts_seen.begin(), st.parts_seen.end(), false) != st.parts_seen.end())
      return;
    orders = std::move(st.orders_parts);
    st.orders_parts.Clear();
    st.parts_seen.clear();
  } else {
    orders = std::move(part);
  }
  if (!st.workers) {
    spdlog::error("agent {}: worker orders ignored: this agent has no worker "
                  "store", name);
    return;
  }
  auto held = st.workers->apply(name, orders);
  if (!held) {
    // Not acknowledged: the controller sends the set again.
    spdlog::error("agent {}: cannot take the controller's workers: {}", name,
                  render_error(held.error()));
    return;
  }
  spdlog::info("agent {}: holds {} worker(s) (generation {})", name,
               held->workers_size(), held->generation());
  if (st.supervisor) {
    st.supervisor->reconcile(*st.workers, st.config.clock->now_unix_ms(),
                             st.config.boot->now_boot_ms());
    *held = st.workers->statuses(name);
  }
  latch_hand_over_failures(self);
  v1::Frame frame;
  *frame.mutable_worker_statuses() = std::move(*held);
  send_frame(self, frame);
}

/// Latches every GPU whose hand-over failed (issue 18, rule 3) and reports
/// a new latch at once, so work stops landing on it.
void latch_hand_over_failures(agent_ptr self) {
  auto& st = self->state;
  if (!st.supervisor)
    return;
  bool latched = false;
  for (const auto& f : st.supervisor->take_hand_over_failures()) {
    std::string pci;
    for (const auto& g : st.gpus.gpus())
      if (g.id() == f.gpu_id)
        pci = g.pci_address();
    if (!st.latches) {
      spdlog::error("agent {}: GPU {}: {} (no latch store to fence it)",
                    st.config.identity.name, f.gpu_id, f.reason);
      continue;
    }
    auto added = st.latches->on_hand_over_failure(f.gpu_id, pci, f.reason, f.evidence,
                                                  st.config.clock->now_unix_ms());
    if (!added)
      spdlog::error("agent {}: cannot latch GPU {}: {}", st.config.identity.name, f.gpu_id,
                    render_error(added.error()));
    else
      latched = latched || *added;
  }
  if (latched && st.welcomed)
    send_report(self, false);
  request_latch_sync(self);
}

/// Whether a worker of this machine may still have a process: a record
/// not ended (or still `Starting`), or a start in flight.
bool workers_left(const agent_state& st) {
  if (!st.supervisor || !st.workers)
    return false;
  if (st.supervisor->starts_pending())
    return true;
  for (const auto& [name, p] : st.workers->processes())
    if (auto s = state_of(p); !s || !worker_ended(*s))
      return true;
  return false;
}

/// A refused agent gives up (`on_final_refusal`) once no worker is left.
void finish_retiring(agent_ptr self) {
  auto& st = self->state;
  if (!st.refused_for_good || st.refusal_told || workers_left(st))
    return;
  st.refusal_told = true;
  if (st.config.on_final_refusal)
    st.config.on_final_refusal(*st.refused_for_good);
}

/// Checks the workers and reports a change at once.
void supervise_now(agent_ptr self) {
  auto& st = self->state;
  if (!st.supervisor || !st.workers)
    return;
  if (st.supervisor->reconcile(*st.workers, st.config.clock->now_unix_ms(),
                               st.config.boot->now_boot_ms())
      && st.welcomed) {
    v1::Frame frame;
    *frame.mutable_worker_statuses() = st.workers->statuses(st.config.identity.name);
    send_frame(self, frame);
  }
  latch_hand_over_failures(self);
  finish_retiring(self);
}

/// The controller refused this agent for good (its machine was removed):
/// its workers leave the ledger, so the supervisor stops them (stop
/// signal, then SIGKILL after the grace) on this and the next checks; the
/// agent gives up only once they have ended (finish_retiring).
void retire(agent_ptr self, const std::string& reason) {
  auto& st = self->state;
  const auto& name = st.config.identity.name;
  if (!st.refused_for_good) {
    st.refused_for_good = reason;
    if (st.workers && st.supervisor && !st.workers->workers().empty()) {
      spdlog::warn("agent {}: stopping its {} worker(s) before it gives up: the controller "
                   "no longer holds them",
                   name, st.workers->workers().size());
      v1::WorkerOrders none;
      none.set_machine(name);
      if (auto held = st.workers->apply(name, none); !held)
        spdlog::error("agent {}: cannot let its workers go ({}); they keep running",
                      name, render_error(held.error()));
    }
  }
  supervise_now(self);
  // A ledger that cannot let them go leaves nothing here to stop them: the
  // agent gives up now rather than never.
  if (st.workers && st.supervisor && !st.workers->workers().empty() && !st.refusal_told) {
    st.refusal_told = true;
    if (st.config.on_final_refusal)
      st.config.on_final_refusal(reason);
  }
  finish_retiring(self);
}

/// The supervisor's timer.
void on_supervise(agent_ptr self) {
  if (!self->state.supervisor || !self->state.workers)
    return;
  supervise_now(self);
  self->delayed_send(self, self->state.config.worker_poll, atom::supervise_v);
}

/// Runs one blocking job of the supervisor on a detached actor of its own
/// (its own thread), so reports and logs keep flowing; it answers
/// `(atom::job_done, job)` and `done` then runs here.
/// Starts waiting jobs while fewer than `max_jobs_running` run. A thread
/// that cannot be created (the machine is out of them) runs its job here,
/// blocking, rather than losing it or ending the agent.
void start_jobs(agent_ptr self) {
  auto& st = self->state;
  agent_actor agent{self};
  while (st.jobs_running < agent_state::max_jobs_running && !st.jobs_waiting.empty()) {
    auto [job, work] = std::move(st.jobs_waiting.front());
    st.jobs_waiting.pop_front();
    ++st.jobs_running;
    auto run = [work = std::move(work)] {
      try {
        work();
      } catch (const std::exception& e) {
        spdlog::error("agent: a worker job failed: {}", e.what());
      }
    };
    try {
      self->spawn<caf::detached>([run, agent, job](caf::event_based_actor*) {
        run();
        caf::anon_send(agent, atom::job_done_v, job);
      });
    } catch (const std::exception& e) {
      spdlog::warn("agent: no thread for a worker job ({}); running it in the agent",
                   e.what());
      run();
      self->send(self, atom::job_done_v, job);
    }
  }
}

void offload_job(agent_ptr self, std::function<void()> work, std::function<void()> done) {
  auto& st = self->state;
  auto job = ++st.last_job;
  st.jobs.emplace(job, std::move(done));
  st.jobs_waiting.emplace_back(job, std::move(work));
  start_jobs(self);
}

/// Issue 12: asks `iblinkinfo --switches-only` (infiniband-diags) where the
/// machine's InfiniBand ports are cabled, on a job's thread with a 30 s
/// deadline, at most every fabric_probe_interval; the next reports carry
/// the switches (or why they are not known).
void probe_fabric(agent_ptr self) {
  auto& st = self->state;
  const auto& ports = st.host_facts.rdma_ports();
  bool infiniband = std::any_of(ports.begin(), ports.end(),
                                [](const auto& p) { return p.link_layer() == "InfiniBand"; });
  auto now = self->clock().now();
  if (!infiniband || st.fabric_probing
      || (st.fabric_probed != caf::actor_clock::time_point{}
          && now - st.fabric_probed < fabric_probe_interval))
    return;
  st.fabric_probed = now;
  auto program = resolve_program("iblinkinfo");
  if (program.empty()) {
    st.switch_links.clear();
    st.fabric_how = "infiniband-diags not installed (apt install infiniband-diags)";
    return;
  }
  st.fabric_probing = true;
  auto out = std::make_shared<run_outcome>();
  offload_job(
    self,
    [out, program] {
      *out = run_program(program, {"--switches-only"},
                         std::chrono::steady_clock::now() + std::chrono::seconds{30});
    },
    [self, out] {
      auto& st = self->state;
      st.fabric_probing = false;
      if (out->exited && out->exit_code == 0) {
        st.switch_links = parse_iblinkinfo(out->out);
        st.fabric_how = "iblinkinfo";
        send_report(self);  // the controller learns the cabling now
        return;
      }
      auto first_line = out->err.substr(0, out->err.find('\n')).substr(0, 200);
      st.fabric_how = "iblinkinfo failed: "
                      + (out->timed_out        ? std::string{"no answer within 30 s"}
                         : !out->error.empty() ? out->error
                                               : "exit " + std::to_string(out->exit_code)
                                                   + (first_line.empty() ? "" : ": " + first_line));
      spdlog::warn("agent {}: {}", st.config.identity.name, st.fabric_how);
    });
}

void on_job_done(agent_ptr self, uint64_t job) {
  auto& st = self->state;
  auto i = st.jobs.find(job);
  if (i == st.jobs.end())
    return;
  if (st.jobs_running > 0)
    --st.jobs_running;
  start_jobs(self);
  auto done = std::move(i->second);
  st.jobs.erase(i);
  done();
  supervise_now(self);
}

/// Answers the controller's request for a piece of a worker's log.
void on_logs(agent_ptr self, const v1::LogsCommand& cmd) {
  auto& st = self->state;
  v1::Frame frame;
  auto* reply = frame.mutable_logs_reply();
  reply->set_id(cmd.id());
  if (!st.supervisor || !st.workers) {
    reply->set_error("this agent runs no workers");
  } else {
    auto chunk = st.supervisor->read_log(*st.workers, cmd.worker(), cmd.offset(),
                                         cmd.max_bytes());
    if (chunk)
      *reply->mutable_chunk() = std::move(*chunk);
    else
      reply->set_error(render_error(chunk.error()));
  }
  send_frame(self, frame);
}

/// How long a gate may say nothing before the agent takes it for frozen:
/// three keepalive intervals (zero: the gate sends none; never).
caf::timespan silence_limit(const agent_state& st) {
  return st.keepalive_interval * 3;
}

/// Arms the silence check for the current connection, unless one is
/// pending for it or the gate sends no keepalives.
void arm_silence_check(agent_ptr self, caf::timespan after) {
  auto& st = self->state;
  if (st.keepalive_interval.count() <= 0 || st.lapse_armed_for == st.connection_no)
    return;
  st.lapse_armed_for = st.connection_no;
  self->delayed_send(self, after, atom::lapse_v, st.connection_no);
}

/// The silence check of connection `number` (HA mode): a gate that sent
/// nothing for three keepalive intervals, welcomed or not, is taken for a
/// frozen leader (SIGSTOP, a paused VM: its kernel keeps the socket open,
/// so nothing closes); the agent leaves it, avoids it a while and tries
/// the next gate (actors/agent/gate_targets.hpp).
void on_silence_check(agent_ptr self, uint64_t number) {
  auto& st = self->state;
  if (number != st.lapse_armed_for)
    return;  // an earlier connection's
  st.lapse_armed_for = 0;
  if (!st.connected || number != st.connection_no)
    return;
  auto limit = silence_limit(st);
  if (limit.count() <= 0)
    return;
  auto quiet = self->clock().now() - st.last_heard;
  if (quiet < limit) {
    arm_silence_check(self, limit - quiet);
    return;
  }
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  spdlog::warn("agent {}: the controller at {}:{} has sent nothing for {} ms ({}; "
               "it sends a keepalive every {} ms): taking it for frozen and "
               "trying another gate",
               st.config.identity.name, st.config.controller_host,
               st.config.controller_port, duration_cast<milliseconds>(quiet).count(),
               st.welcomed ? "since its last frame" : "since the connection opened",
               duration_cast<milliseconds>(st.keepalive_interval).count());
  close_connection(self, "");
  st.named_leader.clear();
  reconnect_when(self, st.targets->silent());
}

void on_frame(agent_ptr self, v1::Frame& frame) {
  auto& st = self->state;
  const auto& name = st.config.identity.name;
  switch (frame.body_case()) {
    case v1::Frame::kWorkerOrders:
      on_worker_orders(self, *frame.mutable_worker_orders());
      return;
    case v1::Frame::kClearFault:
      on_clear_fault(self, frame.clear_fault());
      return;
    case v1::Frame::kLogs:
      on_logs(self, frame.logs());
      return;
    case v1::Frame::kKeepalive:
      return;  // heard: last_heard is set for every record
    case v1::Frame::kWelcome:
      // Welcomed: the token is spent (or was not needed: already enrolled).
      st.config.join_token.clear();
      if (!st.config.enrolled) {
        // Enrolled: from now on the identity alone; the token is spent,
        // and the gate's key is kept and insisted on.
        st.config.enrolled = true;
        st.config.pinned = st.channel->server_key();
        if (!st.config.pin_file.empty())
          if (auto err = write_private_file(st.config.pin_file,
                                            to_hex(st.channel->server_key())))
            spdlog::error("agent {}: cannot keep the controller's key: {}",
                          name, render_error(err));
        spdlog::info("agent {}: enrolled; the controller's key {} is pinned "
                     "and the token file may be deleted",
                     name, fingerprint(st.channel->server_key()));
      }
      if (st.latches && frame.welcome().xid_policy().entries_size() > 0)
        if (auto err = st.latches->set_policy(
              xid_policy::from_table(frame.welcome().xid_policy())))
          spdlog::error("agent {}: cannot keep the Xid policy: {}", name,
                        render_error(err));
      st.welcomed = true;
      // A new session starts with a full report (issue 14).
      st.controller_takes_readings = frame.welcome().takes_readings();
      st.full_sequence = 0;
      adopt_report_interval(self, frame.welcome());
      st.keepalive_interval = std::chrono::duration_cast<caf::timespan>(
        std::chrono::milliseconds{frame.welcome().keepalive_interval_ms()});
      arm_silence_check(self, silence_limit(st));
      if (frame.welcome().heartbeat_lapse_ms() > 0) {
        auto quarter = std::chrono::duration_cast<caf::timespan>(
          std::chrono::milliseconds{frame.welcome().heartbeat_lapse_ms() / 4});
        st.backoff_cap = std::min(st.config.reconnect_max, quarter);
      }
      st.address = st.config.advertise_address;
      if (st.address.empty()) {
        auto route = route_source_address(st.config.controller_host,
                                          st.config.controller_port);
        if (route)
          st.address = *route;
        else
          spdlog::warn("agent {}: no address to advertise ({}); set "
                       "machine.advertise_address",
                       name, render_error(route.error()));
      }
      st.backoff = st.config.reconnect_min;
      st.failed_attempts = 0;
      st.targets->welcomed();
      st.welcomed_at = self->clock().now();
      spdlog::info("agent {}: connected to cluster '{}' at {}:{} (controller "
                   "{})",
                   name, frame.welcome().cluster(), st.config.controller_host,
                   st.config.controller_port,
                   frame.welcome().controller_version());
      send_report(self, true);
      return;
    case v1::Frame::kRefusal:
      if (frame.refusal().code() == to_string(ec::not_leader)
          || frame.refusal().code() == to_string(ec::no_leader)) {
        on_standby_answer(self, frame.refusal());
        return;
      }
      spdlog::error("agent {}: the controller refused this agent: {}", name,
                    frame.refusal().reason());
      if (refusal_is_final(frame.refusal().code()))
        retire(self, frame.refusal().reason());
      // Keep trying slowly: an admin may fix the cause on the controller.
      st.backoff = st.config.reconnect_max;
      close_connection(self, "refused");
      schedule_reconnect(self);
      return;
    default:
      spdlog::warn("agent {}: ignoring an unexpected {} frame", name,
                   frame_kind(frame));
  }
}

/// Starts a discovery pass unless one is in flight. The heartbeat never
/// waits for it: reports go out with the last section. The probe answers
/// with a plain message, so a pass that finishes late still lands.
void start_discovery(agent_ptr self) {
  auto& st = self->state;
  if (st.discovering)
    return;
  st.discovering = true;
  ++st.pass;
  // The first pass needs the host's RDMA ports too: without them the first
  // report said "RDMA no" beside 8 active InfiniBand ports (a new-user trial).
  if (!st.facts_known)
    read_host(self);
  self->send(st.probe, atom::discovered_v, st.rdma_up);
  // NVML has its own per-call deadlines; this bound catches anything else
  // that hangs (a wedged sysfs read, nvidia-smi).
  auto bound = st.config.gpu.nvml.call_deadline * 4
               + st.config.gpu.nvidia_smi_deadline + std::chrono::seconds{5};
  self->delayed_send(self, bound, atom::probe_due_v, st.pass);
}

/// The kernel log's backlog was read (or its bound passed): the first
/// discovery pass starts now, so the first GPU report already carries every
/// fault the log held.
void on_kmsg_caught_up(agent_ptr self) {
  auto& st = self->state;
  if (st.first_pass_started)
    return;
  st.first_pass_started = true;
  start_discovery(self);
}

void on_discovered(agent_ptr self, v1::GpuSection& section) {
  auto& st = self->state;
  st.discovering = false;
  auto changed = !st.gpus_known || gpu_section_changed(st.gpus, section);
  if (st.latches) {
    auto latched = st.latches->on_readings(section, st.config.clock->now_unix_ms());
    if (!latched)
      spdlog::error("agent {}: cannot store a fault latch: {}",
                    st.config.identity.name, render_error(latched.error()));
    else if (*latched)
      changed = true;
  }
  st.gpus = std::move(section);
  st.gpus_known = true;
  if (st.supervisor && changed)
    st.supervisor->sync_cdi(st.gpus, st.config.host.root);
  if (changed)
    send_report(self);
  request_latch_sync(self);
}

void on_discovery_deadline(agent_ptr self, uint64_t pass) {
  auto& st = self->state;
  if (!st.discovering || pass != st.pass)
    return;
  spdlog::error("agent {}: GPU discovery has not finished; reporting the last "
                "known GPUs as unresponsive",
                st.config.identity.name);
  set_read_as(st.gpus, gpu_read_as::unresponsive);
  st.gpus.set_detail("GPU discovery did not finish within its bound; the last "
                     "known GPUs are kept");
  for (auto& g : *st.gpus.mutable_gpus())
    set_read_status(g, gpu_read_status::unresponsive);
  st.gpus_known = true;
  send_report(self);
}

} // namespace

agent_actor::behavior_type agent(agent_actor::stateful_broker_pointer<agent_state> self,
                                 agent_config config) {
  self->state.config = std::move(config);
  self->state.backoff = self->state.config.reconnect_min;
  {
    std::vector<gate_target> given;
    for (const auto& [host, port] : self->state.config.controllers)
      given.push_back(gate_target{host, port});
    if (given.empty())
      given.push_back(gate_target{self->state.config.controller_host,
                                  self->state.config.controller_port});
    self->state.targets.emplace(std::move(given));
  }
  // The last known GPUs are kept in the agent's store across restarts.
  if (!self->state.config.gpu.store)
    self->state.config.gpu.store = self->state.config.store;
  self->state.probe = self->spawn<caf::detached + caf::linked>(
    probe, self->state.config.gpu);
  if (self->state.config.store) {
    auto latches = fault_latches::load(self->state.config.store,
                                       read_boot_id(self->state.config.host.root));
    if (!latches)
      spdlog::error("agent: cannot load the fault latches: {}",
                    render_error(latches.error()));
    else
      self->state.latches.emplace(std::move(*latches));
    if (self->state.latches) {
      self->state.latches->set_boot_clock(self->state.config.boot);
      self->state.latches->defer_sync(true);
      // The syncer answers by a weak reference: it never keeps the agent
      // alive, and it is stopped with the agent's state.
      caf::weak_actor_ptr weak{self->ctrl()};
      self->state.latch_syncer = std::make_unique<wal_syncer>(
        self->state.config.store, [weak](uint64_t generation, caf::error err) {
          if (auto strong = weak.lock())
            caf::anon_send(caf::actor_cast<agent_actor>(strong), atom::tick_v, generation,
                           std::move(err));
        });
    }
    auto workers = worker_ledger::load(self->state.config.store);
    if (!workers)
      spdlog::error("agent: cannot load its workers: {}",
                    render_error(workers.error()));
    else
      self->state.workers.emplace(std::move(*workers));
  }
  if (self->state.workers && !self->state.config.workers.data_dir.empty()) {
    auto opts = self->state.config.workers;
    opts.machine = self->state.config.identity.name;
    opts.host_root = self->state.config.host.root;
    self->state.supervisor = std::make_unique<worker_supervisor>(std::move(opts));
    {
      // NUMA nodes before the first report's facts: a worker started at
      // once still gets NUMA-local cores.
      v1::HostFacts layout;
      read_numa_nodes(self->state.config.host.root, layout);
      read_rdma_device_nodes(self->state.config.host.root, layout);
      self->state.supervisor->set_host_layout(layout);
    }
    self->state.supervisor->set_offload(
      [self](std::function<void()> work, std::function<void()> done) {
        offload_job(self, std::move(work), std::move(done));
      });
    // Finds the workers a previous agent started (and starts held ones).
    self->send(self, atom::supervise_v);
  }
  if (!self->state.config.kmsg_path.empty()) {
    agent_actor handle{self};
    auto path = self->state.config.kmsg_path;
    self->state.kmsg = std::make_unique<kmsg_reader>(
      path,
      [handle](gpu_event ev) {
        v1::KernelEvent ke;
        ke.set_kind(to_string(ev.kind));
        ke.set_pci_address(ev.pci_address);
        if (ev.xid)
          ke.set_xid(*ev.xid);
        ke.set_text(ev.text);
        ke.set_sequence(ev.sequence);
        ke.set_timestamp_us(ev.timestamp_us);
        ke.set_part(ev.part);
        ke.set_after_jump(ev.after_jump);
        if (ev.wall) {
          auto* w = ke.mutable_wall();
          w->set_year(ev.wall->year);
          w->set_month(ev.wall->month);
          w->set_day(ev.wall->day);
          w->set_hour(ev.wall->hour);
          w->set_minute(ev.wall->minute);
          w->set_second(ev.wall->second);
          if (ev.wall->utc_offset_s)
            w->set_utc_offset_s(*ev.wall->utc_offset_s);
        }
        caf::anon_send(handle, std::move(ke));
      },
      [path](std::string error) {
        spdlog::warn("agent: kernel log {}: {}", path, error);
      },
      // Sent after the backlog's events, from the same thread: they are in
      // the mailbox before it.
      [handle] { caf::anon_send(handle, atom::complete_v); });
    self->state.kmsg->start();
    self->delayed_send(self, self->state.config.kmsg_catch_up_bound, atom::complete_v);
  } else {
    on_kmsg_caught_up(self);
  }
  self->send(self, atom::reconnect_v);
  self->state.report_interval = self->state.config.report_interval;
  self->state.report_due = self->clock().now() + self->state.report_interval;
  self->delayed_send(self, self->state.report_interval, atom::tick_v);
  return {
    [self](atom::reconnect) {
      auto& st = self->state;
      if (st.connected)
        return;
      const auto& target = st.targets->target();
      st.config.controller_host = target.host;
      st.config.controller_port = target.port;
      auto hdl = self->add_tcp_scribe(st.config.controller_host,
                                      st.config.controller_port);
      if (!hdl) {
        if (st.failed_attempts++ % 10 == 0)
          spdlog::warn("agent {}: cannot reach the controller at {}:{}: {} "
                       "(retrying with back-off up to {} s)",
                       st.config.identity.name, st.config.controller_host,
                       st.config.controller_port, self->system().render(hdl.error()),
                       std::chrono::duration_cast<std::chrono::seconds>(
                         st.config.reconnect_max)
                         .count());
        reconnect_when(self, st.targets->failed());
        return;
      }
      st.connection = *hdl;
      st.connected = true;
      st.pending_body = 0;
      ++st.connection_no;
      st.last_heard = self->clock().now();
      // A gate known to send keepalives (the last welcome said so) must
      // also welcome within three of them: a frozen one accepts the TCP
      // connection (its kernel does) and answers nothing.
      arm_silence_check(self, silence_limit(st));
      st.channel = std::make_unique<channel_client>(st.config.key,
                                                    st.config.pinned);
      self->configure_read(st.connection,
                           receive_policy::exactly(frame_header_size));
      send_bytes(self, st.channel->start());
    },
    [self](v1::GpuSection& section) { on_discovered(self, section); },
    [self](v1::KernelEvent& ev) { on_kernel_event(self, ev); },
    [self](atom::complete) { on_kmsg_caught_up(self); },
    [self](atom::tick, uint64_t generation, caf::error& err) {
      auto& st = self->state;
      if (st.latches && st.latches->synced(generation, err) > 0)
        send_report(self);  // shown "not durable yet"; retried each tick
    },
    [self](atom::probe_due, uint64_t pass) { on_discovery_deadline(self, pass); },
    [self](atom::supervise) { on_supervise(self); },
    [self](atom::job_done, uint64_t job) { on_job_done(self, job); },
    [self](atom::tick) {
      auto& st = self->state;
      auto now = self->clock().now();
      // A tick from before the interval was shortened: not due yet.
      if (now < st.report_due)
        return;
      retry_not_durable(self);
      send_report(self, true);
      if (st.first_pass_started)
        start_discovery(self);
      // By deadline: the next report is due one interval after this one
      // was, however long this one took.
      st.report_due = next_report_due(st.report_due, now, st.report_interval);
      auto after = self->clock().now();
      self->delayed_send(self,
                         st.report_due > after ? st.report_due - after : caf::timespan{0},
                         atom::tick_v);
    },
    [self](atom::lapse, uint64_t number) { on_silence_check(self, number); },
    [self](caf::io::new_data_msg& msg) {
      auto& st = self->state;
      if (!st.connected || msg.handle != st.connection)
        return;
      st.last_heard = self->clock().now();
      const char* data = reinterpret_cast<const char*>(msg.buf.data());
      if (st.pending_body == 0) {
        auto len = decode_frame_length(
          data, st.channel->record_cap(st.config.frame_cap_bytes));
        if (!len) {
          drop_connection(self, render_error(len.error()));
          return;
        }
        st.pending_body = *len;
        self->configure_read(st.connection, receive_policy::exactly(*len));
        return;
      }
      st.pending_body = 0;
      self->configure_read(st.connection,
                           receive_policy::exactly(frame_header_size));
      auto step = st.channel->on_record(data, msg.buf.size());
      if (!step) {
        if (step.error() == ec::handshake_failed) {
          spdlog::error("agent {}: the controller at {}:{} is not the one this "
                        "agent trusts: {}",
                        st.config.identity.name, st.config.controller_host,
                        st.config.controller_port, render_error(step.error()));
          st.backoff = st.config.reconnect_max;
          close_connection(self, render_error(step.error()));
          schedule_reconnect(self);
          return;
        }
        drop_connection(self, render_error(step.error()));
        return;
      }
      if (!step->reply.empty())
        send_bytes(self, step->reply);
      if (step->established) {
        if (!st.config.pinned)
          spdlog::warn("agent {}: no controller key pinned: trusting {} "
                       "(pass the install command's --controller-key to "
                       "check it)",
                       st.config.identity.name,
                       to_hex(st.channel->server_key()));
        send_hello(self);
      }
      if (step->frame)
        on_frame(self, *step->frame);
    },
    [self](const caf::io::connection_closed_msg& msg) {
      auto& st = self->state;
      if (!st.connected || msg.handle != st.connection)
        return;
      auto was_welcomed = st.welcomed;
      st.connected = false;
      st.welcomed = false;
      st.pending_body = 0;
      st.channel.reset();
      spdlog::warn("agent {}: the controller at {}:{} closed the connection; "
                   "reconnecting",
                   st.config.identity.name, st.config.controller_host,
                   st.config.controller_port);
      reconnect_when(self, session_ended(self, was_welcomed));
    },
  };
}

caf::expected<agent_actor> spawn_agent(caf::actor_system& sys,
                                       agent_config config) {
  if (auto err = config.validate())
    return err;
  return sys.middleman().spawn_broker(agent, std::move(config));
}

} // namespace astraeus
