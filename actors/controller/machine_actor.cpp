#include "actors/controller/machine_actor.hpp"

#include <algorithm>
#include <map>
#include <cctype>
#include <set>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/gather.hpp"
#include "actors/controller/gpu_actor.hpp"
#include "actors/controller/gpu_history_book.hpp"
#include "actors/controller/machine_inventory.hpp"
#include "actors/scheduler/placement.hpp"
#include "actors/validation/validation_plan.hpp"
#include "messages/error.hpp"
#include "messages/gpu_health_state.hpp"
#include "messages/gpu_read.hpp"
#include "messages/labels.hpp"
#include "messages/report_readings.hpp"
#include "messages/run_key.hpp"
#include "messages/worker_state.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {

/// The worker of `orders` placed on GPU `gpu_id`, else the worker still
/// stopping there (`stopping`: machine_state::stopping_gpus) as
/// "train-0 (Stopping)"; empty when none is.
std::string gpu_holder(const v1::WorkerOrders& orders,
                       const std::map<std::string, std::string>& stopping,
                       const std::string& gpu_id) {
  for (const auto& w : orders.workers())
    for (const auto& id : w.gpu_ids())
      if (id == gpu_id)
        return w.spec().validation().empty() ? w.worker()
                                             : "validation " + w.spec().validation();
  if (auto s = stopping.find(gpu_id); s != stopping.end())
    return s->second + " (Stopping)";
  return {};
}

/// Issue 23: the GPUs of the workers of `before` that `after` no longer has
/// are held by them until their agent reports them ended (`stopping`).
void note_stopping_gpus(const v1::WorkerOrders& before, const v1::WorkerOrders& after,
                        std::map<std::string, std::string>& stopping) {
  std::set<std::string> kept;
  for (const auto& w : after.workers()) {
    kept.insert(w.worker());
    for (const auto& id : w.gpu_ids())
      stopping.erase(id);
  }
  for (const auto& w : before.workers())
    if (!kept.count(w.worker()))
      for (const auto& id : w.gpu_ids())
        stopping[id] = w.worker();
}

/// Forgets the stopping workers of `stopping` that `statuses` no longer has
/// going on (ended, or not held). True when one was forgotten.
bool settle_stopping_gpus(const v1::WorkerStatuses& statuses,
                          std::map<std::string, std::string>& stopping) {
  std::set<std::string> going;
  for (const auto& w : statuses.workers())
    if (!worker_ended(state_of(w)))
      going.insert(w.worker());
  bool changed = false;
  for (auto it = stopping.begin(); it != stopping.end();)
    if (going.count(it->second)) {
      ++it;
    } else {
      it = stopping.erase(it);
      changed = true;
    }
  return changed;
}

/// How often an Up machine's facts are written to the store at most (they
/// are also written on every transition to Up), so that `astra machine`
/// shows recent facts after a controller restart without a write per report.
constexpr int64_t facts_store_interval_ms = 10 * 60 * 1000;

/// What of a GPU section must survive a controller restart: how it was
/// read, the GPU ids and statuses, and their latches.
std::string gpu_fingerprint(const v1::GpuSection& section) {
  // Built by appending (no temporaries): it runs on every report.
  std::string out = section.read_as();
  out.reserve(out.size() + static_cast<size_t>(section.gpus_size()) * 64);
  for (const auto& g : section.gpus()) {
    out.append("|").append(g.id()).append(":").append(g.status());
    for (const auto& f : g.latches())
      out.append(",").append(f.reason()).append("#").append(std::to_string(f.count()));
  }
  return out;
}

/// The InfiniBand fabric the machine's ports report (shared/seeds/
/// machines.md, "Topology": "Found from the subnet the ports report; the
/// label wins"): the subnet prefix ("fe80:0000:0000:0000") most of its
/// ACTIVE InfiniBand ports carry, the lowest on a tie; "ethernet" for a
/// machine whose only ACTIVE ports are RoCE (as Topology names that
/// fabric), so a copy across it and an InfiniBand machine is placed over
/// Ethernet; "" when no ACTIVE port reports one (down ports say nothing).
std::string fabric_from_ports(const google::protobuf::RepeatedPtrField<v1::RdmaPort>& ports) {
  std::map<std::string, int> count;
  bool roce = false;
  for (const auto& p : ports) {
    if (p.state() != "ACTIVE")
      continue;
    if (p.link_layer() == "Ethernet")
      roce = true;
    else if (!p.subnet_prefix().empty())
      ++count[p.subnet_prefix()];
  }
  if (count.empty() && roce)
    return "ethernet";
  std::string best;
  int most = 0;
  for (const auto& [prefix, n] : count)
    if (n > most) {
      best = prefix;
      most = n;
    }
  return best;
}

} // namespace

std::optional<std::string> data_location_problem(const std::string& path) {
  if (path.empty())
    return std::string{"is empty: name a folder (/mnt/nvme0/astraeus)"};
  if (path.size() > 4096)
    return std::string{"is longer than 4096 bytes"};
  if (path[0] != '/')
    return std::string{"is not an absolute path (it must start with /)"};
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x20)
      return std::string{"holds a control character"};
  if (path.find("/../") != std::string::npos
      || (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0))
    return std::string{"holds '..'"};
  if (path == "/")
    return std::string{"is the root folder: name a folder for Astraeus's data"};
  return std::nullopt;
}

caf::error check_labels(const v1::SetLabels& req) {
  for (const auto& [k, v] : req.set())
    if (auto err = check_label(k, v))
      return err;
  for (const auto& k : req.remove())
    if (req.set().count(k))
      return caf::make_error(ec::invalid_request,
                             "label " + k + " is both set and removed");
  return caf::none;
}

std::vector<v1::WorkerOrders> split_orders(const v1::WorkerOrders& orders,
                                          size_t part_bytes) {
  if (orders.ByteSizeLong() <= part_bytes)
    return {orders};
  std::vector<v1::WorkerOrders> parts;
  size_t bytes = 0;
  for (const auto& w : orders.workers()) {
    auto size = w.ByteSizeLong() + 8;
    if (parts.empty() || (bytes + size > part_bytes && parts.back().workers_size() > 0)) {
      parts.emplace_back();
      parts.back().set_machine(orders.machine());
      parts.back().set_generation(orders.generation());
      bytes = 0;
    }
    *parts.back().add_workers() = w;
    bytes += size;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].set_part(static_cast<uint32_t>(i));
    parts[i].set_parts(static_cast<uint32_t>(parts.size()));
  }
  return parts;
}

const std::string& to_string(v1::Machine::State state) {
  return v1::Machine::State_Name(state);
}

caf::error machine_config::validate() const {
  if (record.name().empty())
    return caf::make_error(ec::invalid_config, "machine: empty name");
  if (heartbeat_lapse.count() <= 0)
    return caf::make_error(ec::invalid_config,
                           "machine: heartbeat lapse must be positive");
  if (!clock)
    return caf::make_error(ec::invalid_config, "machine: no wall clock");
  return caf::none;
}

v1::Machine::State machine_state::shown_state() const {
  if (config.record.maintenance())
    return v1::Machine::Maintenance;
  if (liveness == v1::Machine::Up && accepting())
    return v1::Machine::Accepting;
  return liveness;
}

bool machine_state::accepting() const {
  return acceptance_required && !config.record.accepted();
}

bool machine_state::only_cordoned() const {
  const auto& rec = config.record;
  return liveness == v1::Machine::Up && !agent_gone && !rec.maintenance() && rec.cordoned()
         && rec.drain_deadline_unix_ms() == 0 && !rec.drained() && !pressure.memory
         && !pressure.disk;
}

bool machine_state::schedulable() const {
  return liveness == v1::Machine::Up && !agent_gone && !config.record.maintenance()
         && !config.record.cordoned() && !pressure.memory && !pressure.disk;
}

std::string machine_state::not_schedulable_why() const {
  const auto shown = shown_state();
  if (shown == v1::Machine::Maintenance)
    return "is in Maintenance";
  if (shown == v1::Machine::Down)
    return "is Down";
  if (shown == v1::Machine::Idle)
    return "has not reported yet";
  if (agent_gone)
    return "has lost its agent's connection (it takes no new work until the agent is back)";
  if (config.record.drained())
    return "is drained";
  if (config.record.drain_deadline_unix_ms() != 0)
    return "is draining";
  if (config.record.cordoned())
    return "is cordoned";
  if (pressure.memory)
    return "is under memory pressure";
  if (pressure.disk)
    return "is under disk pressure";
  if (shown == v1::Machine::Accepting) {
    if (acceptance_id.empty())
      return "is Accepting (until it passes acceptance)";
    if (acceptance_ended.empty())
      return "is Accepting (acceptance " + acceptance_id + " runs there)";
    // Cancelled: nothing to read in it; another is what it waits for.
    if (acceptance_ended.rfind("was cancelled", 0) == 0)
      return "is Accepting (acceptance " + acceptance_id + " " + acceptance_ended
             + ": astra astraeus validate --suite acceptance --machine " + config.record.name()
             + " runs another; astra astraeus accept " + config.record.name()
             + " --reason R accepts it anyway)";
    return "is Accepting (acceptance " + acceptance_id + " " + acceptance_ended
           + ": see astra astraeus validation " + acceptance_id
           + "; astra astraeus accept " + config.record.name()
           + " --reason R accepts it anyway)";
  }
  return {};
}

v1::SchedulerMachine machine_state::scheduler_view() const {
  v1::SchedulerMachine out;
  out.set_name(config.record.name());
  // A machine only its cordon keeps from work is placed onto as an Accepting
  // one: only a validation's checks go there (the scheduler's `accepting`),
  // and user runs' waiting reasons say "is cordoned".
  out.set_schedulable(schedulable() || only_cordoned());
  out.set_down(liveness == v1::Machine::Down);
  out.set_accepting(accepting() || only_cordoned());
  out.set_not_schedulable(not_schedulable_why());
  out.set_address(config.record.address());
  out.set_logical_cpus(facts.cpu().logical_cpus());
  out.set_memory_bytes(facts.memory().total_bytes());
  *out.mutable_numa_nodes() = facts.cpu().nodes();
  // Free memory moves with every report and places nothing: kept out, so
  // the snapshot changes only when what places runs changes (issue 14).
  for (auto& n : *out.mutable_numa_nodes())
    n.clear_memory_free_bytes();
  out.set_rdma_up(std::any_of(facts.rdma_ports().begin(), facts.rdma_ports().end(),
                              [](const v1::RdmaPort& p) { return p.state() == "ACTIVE"; }));
  *out.mutable_labels() = config.record.labels();
  // The NVLink domain is found from the GPUs (shared/seeds/machines.md,
  // "Topology"); a label an admin set wins.
  if (const auto& domain = facts.gpus().capabilities().nvlink_domain(); !domain.empty())
    out.mutable_labels()->insert({topology_label::nvlink_domain, domain});
  if (auto fabric = fabric_from_ports(facts.rdma_ports()); !fabric.empty())
    out.mutable_labels()->insert({topology_label::fabric, std::move(fabric)});
  const auto& gpus = facts.gpus().gpus();
  std::map<std::string, uint32_t> index_of;
  for (int i = 0; i < gpus.size(); ++i)
    index_of[gpus[i].pci_address()] = static_cast<uint32_t>(i);
  for (const auto& g : gpus) {
    if (g.id().empty())
      continue;
    auto* sg = out.add_gpus();
    sg->set_id(g.id());
    sg->set_numa_node(g.has_numa_node() ? g.numa_node() : -1);
    auto h = gpu_verdicts.find(g.id());
    // A GPU that does not answer is not placed onto.
    set_health(*sg, !answers(read_status(g))     ? gpu_health::faulty
                    : h == gpu_verdicts.end() ? gpu_health::healthy
                                              : h->second.first);
    // Why it is Faulty: a run holding it is told (issue 17, rule 8).
    if (!answers(read_status(g)))
      sg->set_fault_reason(std::string{to_string(read_status(g))} + ": "
                           + (g.status_detail().empty() ? "it does not answer its driver"
                                                        : g.status_detail()));
    else if (h != gpu_verdicts.end() && h->second.first == gpu_health::faulty)
      sg->set_fault_reason(h->second.second);
    std::set<uint32_t> peers;
    for (const auto& l : g.nvlinks())
      if (l.active())
        if (auto p = index_of.find(l.remote_pci_address()); p != index_of.end())
          peers.insert(p->second);
    for (auto p : peers)
      sg->add_nvlink_peers(p);
  }
  return out;
}

v1::MachineView machine_state::view() const {
  v1::MachineView out;
  const auto& rec = config.record;
  out.set_name(rec.name());
  out.set_state(shown_state());
  out.set_quick(quick.verdict());
  out.set_quick_summary(quick.result().summary().empty() ? quick.reason()
                                                         : quick.result().summary());
  out.set_accepted(acceptance_required && config.record.accepted());
  if (rec.accepted())
    out.set_accepted_reason(rec.accepted_reason());
  // An Accepting machine's acceptance, or the one a machine installed with
  // --accept asked for (it may run while the machine is Up).
  if (shown_state() == v1::Machine::Accepting
      || (rec.acceptance_requested() && !rec.accepted())) {
    out.set_acceptance_validation(acceptance_id);
    out.set_acceptance_ended(acceptance_ended);
  }
  out.set_cordoned(rec.cordoned());
  out.set_memory_pressure(pressure.memory);
  out.set_disk_pressure(pressure.disk);
  for (const auto& reason : pressure.reasons)
    out.add_pressure_reasons(reason);
  // An Accepting machine takes its checks only: no new work, as `astra
  // machine` says ("New work: no (Accepting: …)").
  out.set_schedulable(schedulable() && !accepting());
  out.set_registered_unix_ms(rec.registered_unix_ms());
  out.set_last_report_unix_ms(last_report_unix_ms);
  out.set_state_since_unix_ms(state_since_unix_ms);
  *out.mutable_facts() = facts;
  out.set_machine_id(rec.machine_id());
  *out.mutable_labels() = rec.labels();
  out.set_agent_version(rec.agent_version());
  out.set_connected(session != 0);
  for (const auto& a : set_aside)
    *out.add_set_aside_gpus() = a;
  for (const auto& w : inventory_warnings)
    out.add_inventory_warnings(w);
  out.set_flaps(flaps);
  out.set_drain_deadline_unix_ms(rec.drain_deadline_unix_ms());
  out.set_drained(rec.drained());
  // Issue 20: an admin's choice wins over the installer's.
  if (!rec.data_location_admin().empty()) {
    out.set_data_location(rec.data_location_admin());
    out.set_data_location_source("admin");
  } else if (!rec.data_location().empty()) {
    out.set_data_location(rec.data_location());
    out.set_data_location_source("installer");
  }
  out.set_acceptance_requested(rec.acceptance_requested() && !rec.accepted());
  // "GPUs healthy" is the controller's judgement, not the agent's.
  auto* section = out.mutable_facts()->mutable_gpus();
  auto* conds = section->mutable_conditions();
  for (auto i = conds->begin(); i != conds->end();) {
    if (i->type() == "GPUs healthy")
      i = conds->erase(i);
    else
      ++i;
  }
  std::string faults;
  for (const auto& [id, hr] : gpu_verdicts)
    if (hr.first == gpu_health::faulty)
      faults += (faults.empty() ? "" : "; ") + id + ": " + hr.second;
  auto* c = section->add_conditions();
  c->set_type("GPUs healthy");
  c->set_status(faults.empty());
  c->set_reason(faults.empty() ? "AllGPUsHealthy" : "GPUFault");
  c->set_message(faults.empty() ? "no GPU is fenced" : faults);
  return out;
}

bool machine_state::workers_live() const {
  std::map<std::string, worker_state> reported;
  for (const auto& w : reported_workers.workers())
    reported[w.worker()] = state_of(w);
  for (const auto& [name, state] : reported)
    if (!worker_ended(state))
      return true;
  for (const auto& w : orders.workers()) {
    auto i = reported.find(w.worker());
    if (i == reported.end() || !worker_ended(i->second))
      return true;
  }
  return false;
}

namespace {

using machine_ptr = machine_actor::stateful_pointer<machine_state>;

/// Whether `a` and `b` agree on every fact `scheduler_view` reads (keep
/// the two in step): the cores, memory and NUMA nodes (not their free
/// memory), RDMA port states, subnet prefixes and link layers (the
/// fabric), the NVLink domain, and each GPU's id, PCI
/// address, NUMA node, read status and active NVLinks.
static bool same_scheduler_facts(const v1::HostFacts& a, const v1::HostFacts& b) {
  if (a.cpu().logical_cpus() != b.cpu().logical_cpus()
      || a.memory().total_bytes() != b.memory().total_bytes()
      || a.cpu().nodes_size() != b.cpu().nodes_size()
      || a.rdma_ports_size() != b.rdma_ports_size()
      || a.gpus().capabilities().nvlink_domain() != b.gpus().capabilities().nvlink_domain()
      || a.gpus().gpus_size() != b.gpus().gpus_size())
    return false;
  for (int i = 0; i < a.cpu().nodes_size(); ++i) {
    const auto& x = a.cpu().nodes(i);
    const auto& y = b.cpu().nodes(i);
    if (x.id() != y.id() || x.cpulist() != y.cpulist() || x.cpus() != y.cpus()
        || x.memory_total_bytes() != y.memory_total_bytes())
      return false;
  }
  for (int i = 0; i < a.rdma_ports_size(); ++i)
    if (a.rdma_ports(i).state() != b.rdma_ports(i).state()
        || a.rdma_ports(i).subnet_prefix() != b.rdma_ports(i).subnet_prefix()
        || a.rdma_ports(i).link_layer() != b.rdma_ports(i).link_layer())
      return false;
  for (int i = 0; i < a.gpus().gpus_size(); ++i) {
    const auto& x = a.gpus().gpus(i);
    const auto& y = b.gpus().gpus(i);
    if (x.id() != y.id() || x.pci_address() != y.pci_address()
        || x.has_numa_node() != y.has_numa_node() || x.numa_node() != y.numa_node()
        || read_status(x) != read_status(y) || x.status_detail() != y.status_detail()
        || x.nvlinks_size() != y.nvlinks_size())
      return false;
    for (int l = 0; l < x.nvlinks_size(); ++l)
      if (x.nvlinks(l).active() != y.nvlinks(l).active()
          || x.nvlinks(l).remote_pci_address() != y.nvlinks(l).remote_pci_address())
        return false;
  }
  return true;
}

const std::string& name_of(machine_ptr self) {
  return self->state.config.record.name();
}

bool finish_drain_if_done(machine_ptr self);

/// Tells the scheduler when what it places by changed.
void tell_scheduler(machine_ptr self) {
  auto& st = self->state;
  if (!st.config.scheduler)
    return;
  auto snap = st.scheduler_view();
  auto bytes = snap.SerializeAsString();
  if (bytes == st.scheduler_snapshot)
    return;
  st.scheduler_snapshot = std::move(bytes);
  self->send(st.config.scheduler, std::move(snap));
}

/// Hands each GPU actor its readings from a readings report (issue 14),
/// whose GPUs are the held facts' GPUs in the same order (apply_readings
/// checked it): a few scalars each, not the whole GPU.
void send_gpu_readings(machine_ptr self, v1::HostReadings& readings) {
  auto& st = self->state;
  for (auto& r : *readings.mutable_gpus()) {
    auto i = st.gpus.find(r.id());
    if (i != st.gpus.end())
      self->send(i->second, atom::readings_v, std::move(r));
  }
}

/// Keeps one GPU actor per reported GPU id; `up`: whether the machine is Up.
/// After a complete read, the actors of GPUs missing from it end.
void sync_gpus(machine_ptr self, bool up) {
  auto& st = self->state;
  const auto& section = st.facts.gpus();
  for (const auto& g : section.gpus()) {
    if (g.id().empty())
      continue;
    auto i = st.gpus.find(g.id());
    if (i == st.gpus.end()) {
      auto handle = self->spawn<caf::linked>(gpu, st.config.record.name(), g, up,
                                             machine_actor{self}, st.config.clock);
      if (auto holder = gpu_holder(st.orders, st.stopping_gpus, g.id()); !holder.empty())
        self->send(handle, atom::assign_v, std::move(holder));
      st.gpus.emplace(g.id(), std::move(handle));
    } else
      self->send(i->second, g);
  }
  if (!is_complete_read(read_as(section)))
    return;
  // Whether the read lists GPU `id` (a handful: no set built per report).
  auto listed = [&section](const std::string& id) {
    return std::any_of(section.gpus().begin(), section.gpus().end(),
                       [&id](const v1::Gpu& g) { return g.id() == id; });
  };
  for (auto i = st.gpus.begin(); i != st.gpus.end();) {
    if (!listed(i->first)) {
      spdlog::info("machine {}: GPU {} is gone", st.config.record.name(), i->first);
      self->unlink_from(i->second);
      caf::anon_send_exit(i->second, caf::exit_reason::user_shutdown);
      st.gpu_verdicts.erase(i->first);
      i = st.gpus.erase(i);
    } else {
      ++i;
    }
  }
}

/// Tells every GPU actor which worker holds it (empty = free), from the
/// whole worker set placed here.
void tell_holders(machine_ptr self) {
  auto& st = self->state;
  for (auto& [id, g] : st.gpus)
    self->send(g, atom::assign_v, gpu_holder(st.orders, st.stopping_gpus, id));
}

/// Hands the agent the worker set, when connected and not yet applied.
void send_orders(machine_ptr self) {
  auto& st = self->state;
  if (!st.orders_known || st.session == 0 || !st.gate
      || st.acked_generation == st.orders.generation())
    return;
  for (auto& part : split_orders(st.orders, orders_part_bytes))
    self->send(st.gate, atom::assign_v, st.session, std::move(part));
}

/// The agent's worker list, from its answer frame or a report.
void on_statuses(machine_ptr self, v1::WorkerStatuses& statuses) {
  auto& st = self->state;
  statuses.set_machine(st.config.record.name());
  st.acked_generation = statuses.generation();
  st.reported_workers = statuses;
  // Issue 23: a GPU whose stopping worker ended is free now.
  if (settle_stopping_gpus(statuses, st.stopping_gpus))
    tell_holders(self);
  finish_drain_if_done(self);
  auto bytes = statuses.SerializeAsString();
  if (bytes != st.last_statuses) {
    st.last_statuses = std::move(bytes);
    if (st.config.scheduler)
      self->send(st.config.scheduler, std::move(statuses));
  }
  send_orders(self);
}

/// Moves the machine's liveness to `next` (`why` is logged).
void set_liveness(machine_ptr self, v1::Machine::State next, const char* why) {
  auto& st = self->state;
  if (st.liveness == next)
    return;
  for (auto& [id, g] : st.gpus)
    self->send(g, atom::machine_up_v, next == v1::Machine::Up);
  auto before = st.liveness;
  st.liveness = next;
  // Down and back Up: a flap (a heartbeat lapse too short for the reports).
  if (before == v1::Machine::Down && next == v1::Machine::Up)
    ++st.flaps;
  if (next == v1::Machine::Down)
    st.last_statuses.clear();
  if (st.config.record.maintenance()) {
    spdlog::info("machine {}: in Maintenance; underneath {} -> {} ({})", name_of(self),
                 to_string(before), to_string(next), why);
    return;
  }
  st.state_since_unix_ms = st.config.clock->now_unix_ms();
  spdlog::info("machine {}: {} -> {} ({})", name_of(self), to_string(before),
               to_string(next), why);
  tell_scheduler(self);
}

/// Writes the record; `sync` for what a user is told about.
caf::error persist(machine_ptr self, bool sync) {
  auto& st = self->state;
  if (!st.config.store)
    return caf::none;
  auto& rec = st.config.record;
  *rec.mutable_last_facts() = st.facts;
  rec.set_last_report_unix_ms(st.last_report_unix_ms);
  if (auto err = st.config.store->put(family::machines, rec.name(), rec, sync)) {
    spdlog::error("machine {}: cannot store its record: {}", name_of(self),
                  render_error(err));
    // Facts (no sync) are tried again after the facts-store interval, not
    // on every report: a full disk must not flood the log (issue 23).
    if (!sync)
      st.facts_stored_unix_ms = st.config.clock->now_unix_ms();
    return err;
  }
  st.facts_stored_unix_ms = st.config.clock->now_unix_ms();
  st.gpu_copy_unstored = false;
  return caf::none;
}

/// Takes the facts of `report`, logs a change of pressure, and says whether
/// the record changed (its address, data location or --accept).
bool take_report(machine_ptr self, v1::MachineReport& report) {
  auto& st = self->state;
  bool address_changed = !report.address().empty()
                         && report.address() != st.config.record.address();
  if (address_changed)
    st.config.record.set_address(report.address());
  // Issue 20: the installer's data location and --accept, kept in the record.
  auto& rec = st.config.record;
  if (report.data_location() != rec.data_location()) {
    rec.set_data_location(report.data_location());
    address_changed = true;
  }
  if (report.request_acceptance() && !rec.acceptance_requested()) {
    rec.set_acceptance_requested(true);
    rec.set_acceptance_requested_unix_ms(st.config.clock->now_unix_ms());
    address_changed = true;
  }
  st.last_report = self->clock().now();
  st.last_report_unix_ms = st.config.clock->now_unix_ms();
  st.agent_gone = false;
  if (report.readings_of() == 0) {  // a readings report was applied by on_report
    st.full_sequence = report.sequence();
    st.facts = std::move(*report.mutable_facts());
    auto warnings = fold_repeated_gpus(*st.facts.mutable_gpus());
    if (warnings != st.inventory_warnings)
      for (const auto& w : warnings)
        spdlog::warn("machine {}: {}", st.config.record.name(), w);
    st.inventory_warnings = std::move(warnings);
  }
  auto was_pressured = st.pressure.memory || st.pressure.disk;
  st.pressure = evaluate_pressure(st.facts, st.config.pressure);
  auto pressured = st.pressure.memory || st.pressure.disk;
  if (pressured != was_pressured) {
    if (pressured)
      spdlog::warn("machine {}: under pressure, takes no new work: {}",
                   st.config.record.name(), st.pressure.reasons.front());
    else
      spdlog::info("machine {}: pressure cleared, takes new work again",
                   st.config.record.name());
  }
  return address_changed;
}

/// Sends the history one sample of each GPU of the last report, with the
/// health its GPU actor last said.
void tell_history(machine_ptr self) {
  auto& st = self->state;
  if (!st.config.history || st.facts.gpus().gpus().empty())
    return;
  // Each GPU's point, computed here (issue 14): the history gets a few
  // scalars per GPU, not a copy of its facts.
  v1::GpuSamples samples;
  samples.set_machine(st.config.record.name());
  for (const auto& g : st.facts.gpus().gpus()) {
    if (g.id().empty())
      continue;
    auto* of = samples.add_gpus();
    of->set_gpu(g.id());
    of->set_pci_address(g.pci_address());
    if (g.has_index())
      of->set_index(g.index());
    // A GPU whose actor said nothing yet is Healthy (as scheduler_view has it).
    auto i = st.gpu_verdicts.find(g.id());
    *of->mutable_sample() =
      to_sample(point_of(g, i != st.gpu_verdicts.end() ? i->second.first : gpu_health::healthy,
                         st.last_report_unix_ms));
  }
  self->send(st.config.history, std::move(samples));
}

/// Arms the heartbeat lapse check unless one is pending.
void arm_lapse(machine_ptr self) {
  auto& st = self->state;
  if (!st.lapse_timer_pending) {
    st.lapse_timer_pending = true;
    self->delayed_send(self, st.config.heartbeat_lapse, atom::lapse_v);
  }
}

/// A readings report that cannot be applied (issue 14): the agent is alive
/// and its worker list is current; the facts wait for its next full report.
void on_heartbeat(machine_ptr self, v1::MachineReport& report) {
  auto& st = self->state;
  st.last_report = self->clock().now();
  st.last_report_unix_ms = st.config.clock->now_unix_ms();
  st.agent_gone = false;
  arm_lapse(self);
  if (report.has_workers())
    on_statuses(self, *report.mutable_workers());
  else
    send_orders(self);
}

/// An agent's report: facts, liveness, GPUs, the stored record, the lapse
/// timer, the scheduler's view and the worker list. A readings report
/// (issue 14) updates the readings of the facts held in place.
void on_report(machine_ptr self, v1::MachineReport& report) {
  auto& st = self->state;
  // The scheduler's snapshot is built only when what it holds may have
  // changed (issue 14): its facts, the pressure, the state or the record
  // (state and record changes tell it themselves). A report that repeats a
  // GPU id (folded by take_report) always counts as a change, as before.
  const bool readings = report.readings_of() != 0;
  if (readings && report.readings_of() != st.full_sequence) {
    // Readings for a full report this actor does not hold (the controller
    // restarted or took over mid-session): a heartbeat, no more, until the
    // agent's next full report (a new session's first, or within
    // readings_between_full_reports).
    spdlog::debug("machine {}: readings of report {} but report {} is held: a heartbeat only",
                  name_of(self), report.readings_of(), st.full_sequence);
    on_heartbeat(self, report);
    return;
  }
  // Readings change nothing the scheduler places by (report_readings.hpp).
  const bool placing_facts_changed =
    st.config.scheduler && !readings && !same_scheduler_facts(st.facts, report.facts());
  const bool was_pressured = st.pressure.memory || st.pressure.disk;
  if (readings) {
    // Applied in place before anything else is taken from the report, or
    // refused whole when it does not fit the facts held.
    if (auto why = apply_readings(*report.mutable_readings(), st.facts); !why.empty()) {
      spdlog::warn("machine {}: readings of report {} do not fit it ({}): a heartbeat only",
                   name_of(self), report.readings_of(), why);
      on_heartbeat(self, report);
      return;
    }
  }
  bool address_changed = take_report(self, report);
  auto came_up = st.liveness != v1::Machine::Up;
  if (came_up)
    set_liveness(self, v1::Machine::Up, "report received");
  if (readings)
    send_gpu_readings(self, *report.mutable_readings());
  else
    sync_gpus(self, true);
  tell_history(self);
  if (!report.agent_version().empty()
      && report.agent_version() != st.config.record.agent_version()) {
    st.config.record.set_agent_version(report.agent_version());
    came_up = true;
  }
  came_up = came_up || address_changed;
  // The controller keeps a copy of the GPUs and their faults, so they
  // show while the machine is Down and after a controller restart.
  // Readings change no GPU's picture (report_readings.hpp): the print of a
  // readings report would be the full report's, so it is not made.
  bool gpus_changed = false;
  if (!readings) {
    auto gpu_print = gpu_fingerprint(st.facts.gpus());
    gpus_changed = gpu_print != st.stored_gpu_fingerprint;
    if (gpus_changed)
      st.stored_gpu_fingerprint = std::move(gpu_print);
  }
  // A changed GPU picture alone (a new fault latch) is written after its GPU
  // actors have judged it (the health handler below), at the next report or
  // at the lapse: the ~0.1 ms write of the whole record no longer comes
  // between the report and the fence (issue 17's latency). It is written
  // without sync either way; the agent keeps the latch durably and reports
  // it again.
  if (came_up || st.gpu_copy_unstored
      || st.last_report_unix_ms - st.facts_stored_unix_ms > facts_store_interval_ms)
    persist(self, false);
  else if (gpus_changed)
    st.gpu_copy_unstored = true;
  came_up = came_up || gpus_changed;
  arm_lapse(self);
  if (placing_facts_changed || came_up || st.scheduler_snapshot.empty()
      || was_pressured != (st.pressure.memory || st.pressure.disk))
    tell_scheduler(self);
  if (report.has_workers())
    on_statuses(self, *report.mutable_workers());
  else
    send_orders(self);
}

/// The view of every GPU of the machine, by PCI address.
caf::result<std::vector<v1::GpuView>> gpu_views(machine_ptr self) {
  auto rp = self->make_response_promise<std::vector<v1::GpuView>>();
  std::vector<gpu_actor> targets;
  for (auto& [id, g] : self->state.gpus)
    targets.push_back(g);
  // A GPU the scheduler set aside (a UUID another machine reports too) is
  // never placed onto, whatever its health: said first among its reasons,
  // so `astra gpus` and the API do not show it as free (a new-user trial
  // read such GPUs as Healthy with no holder).
  std::map<std::string, std::string> aside;
  for (const auto& a : self->state.set_aside)
    aside.emplace(a.id(), a.reason());
  gather<v1::GpuView>(
    self, targets, std::chrono::seconds{5},
    [rp, aside = std::move(aside)](std::vector<v1::GpuView> views) mutable {
      std::sort(views.begin(), views.end(), [](const auto& a, const auto& b) {
        return a.gpu().pci_address() < b.gpu().pci_address();
      });
      for (auto& v : views)
        if (auto a = aside.find(v.gpu().id()); a != aside.end()) {
          auto* reasons = v.mutable_health_reasons();
          reasons->Add("set aside by the scheduler: " + a->second);
          std::rotate(reasons->begin(), reasons->end() - 1, reasons->end());
        }
      rp.deliver(std::move(views));
    },
    nullptr, atom::get_v);
  return rp;
}

caf::result<v1::MachineView> set_cordon(machine_ptr self, bool on) {
  auto& rec = self->state.config.record;
  // Uncordoning ends a drain too.
  bool draining = !on && (rec.drain_deadline_unix_ms() != 0 || rec.drained());
  if (rec.cordoned() != on || draining) {
    auto before = rec;
    rec.set_cordoned(on);
    if (!on) {
      rec.set_drain_deadline_unix_ms(0);
      rec.set_drained(false);
    }
    if (auto err = persist(self, true)) {
      rec = std::move(before);
      return err;
    }
    spdlog::info("machine {}: {}", name_of(self), on ? "cordoned" : "uncordoned");
    tell_scheduler(self);
  }
  return self->state.view();
}

caf::result<v1::MachineView> set_maintenance(machine_ptr self, bool on) {
  auto& st = self->state;
  auto& rec = st.config.record;
  if (rec.maintenance() != on) {
    auto before = st.shown_state();
    rec.set_maintenance(on);
    if (auto err = persist(self, true)) {
      rec.set_maintenance(!on);
      return err;
    }
    st.state_since_unix_ms = st.config.clock->now_unix_ms();
    spdlog::info("machine {}: {} -> {} (maintenance {})", name_of(self),
                 to_string(before), to_string(st.shown_state()), on ? "on" : "off");
    tell_scheduler(self);
  }
  return st.view();
}

/// Issue 21: the validations say whether the machine's pool requires
/// acceptance and whether it is accepted (stored with sync when it changes).
/// Not accepted, `reason` is the acceptance that runs there ("val-…", for
/// waiting reasons; "" keeps the one told before).
caf::result<v1::MachineView> set_acceptance(machine_ptr self, bool required, bool accepted,
                                            const std::string& reason) {
  auto& st = self->state;
  auto& rec = st.config.record;
  auto before = st.shown_state();
  if (!accepted && !reason.empty()) {
    st.acceptance_id = reason;
    st.acceptance_ended.clear();
  }
  if (accepted && (!rec.accepted() || rec.accepted_reason() != reason)) {
    auto old = rec;
    rec.set_accepted(accepted);
    rec.set_accepted_reason(reason);
    if (auto err = persist(self, true)) {
      rec = std::move(old);
      return err;
    }
  }
  st.acceptance_required = required;
  if (before != st.shown_state()) {
    st.state_since_unix_ms = st.config.clock->now_unix_ms();
    spdlog::info("machine {}: {} -> {}{}", name_of(self), to_string(before),
                 to_string(st.shown_state()),
                 !accepted || reason.empty() ? "" : " (accepted: " + reason + ")");
  }
  tell_scheduler(self);
  return st.view();
}

/// An acceptance that ran here ended without passing it: waiting reasons say
/// how it ended and what to do, no longer that it runs.
void on_acceptance_ended(machine_ptr self, const v1::Validation& v) {
  auto& st = self->state;
  st.acceptance_id = v.id();
  st.acceptance_ended = validation::machine_verdict(v, name_of(self)) == "fail"
                          ? std::string{"failed"}
                        : v.state() == "Cancelled"
                          ? "was " + validation::cancelled_words(v.cancelled_by(), v.cancel_reason())
                          : "ended " + v.state() + " without passing";
  spdlog::info("machine {}: acceptance {} {}", name_of(self), v.id(), st.acceptance_ended);
  tell_scheduler(self);
}

/// Issue 20: `astra machine data-location NAME PATH` (machines.md, "Where a
/// machine keeps data"): an absolute, normal path of at most 4096 bytes.
caf::result<v1::MachineView> set_data_location(machine_ptr self, const v1::Request& req) {
  if (req.body_case() != v1::Request::kSetDataLocation)
    return caf::make_error(ec::invalid_request, "not a request a machine answers");
  const auto& path = req.set_data_location().path();
  if (auto why = data_location_problem(path))
    return caf::make_error(ec::invalid_request, "data location '" + path + "' " + *why);
  auto& rec = self->state.config.record;
  if (rec.data_location_admin() != path) {
    auto old = rec;
    rec.set_data_location_admin(path);
    if (auto err = persist(self, true)) {
      rec = std::move(old);
      return err;
    }
    spdlog::info("machine {}: data location {} (set by {})", name_of(self), path,
                 req.caller().name());
  }
  return self->state.view();
}

caf::result<v1::MachineView> set_labels(machine_ptr self, const v1::SetLabels& req) {
  auto& rec = self->state.config.record;
  if (auto err = check_labels(req))
    return err;
  auto before = rec.labels();
  for (const auto& k : req.remove())
    rec.mutable_labels()->erase(k);
  for (const auto& [k, v] : req.set())
    (*rec.mutable_labels())[k] = v;
  if (auto err = persist(self, true)) {
    *rec.mutable_labels() = before;
    return err;
  }
  spdlog::info("machine {}: labels set ({}) and removed ({})", name_of(self),
               req.set_size(), req.remove_size());
  tell_scheduler(self);
  return self->state.view();
}

/// Gate session `session` of the agent began (`up`) or ended.
void on_connected(machine_ptr self, uint64_t session, bool up, gate_command_actor& gate) {
  auto& st = self->state;
  if (up) {
    st.session = session;
    st.gate = std::move(gate);
    // A new session: whatever the agent applied, it says so again.
    st.acked_generation = 0;
    st.last_statuses.clear();
    st.agent_gone = false;
    send_orders(self);
    tell_scheduler(self);
  } else if (st.session == session) {
    st.session = 0;
    st.gate = gate_command_actor{};
    st.agent_gone = true;
    spdlog::info("machine {}: agent disconnected (it takes no new work until the agent is back)",
                 name_of(self));
    tell_scheduler(self);
  }
}

/// Asks the agent, through the gate, for a part of a worker's log.
caf::result<v1::LogChunk> fetch_logs(machine_ptr self, v1::LogsCommand& cmd) {
  auto& st = self->state;
  if (st.session == 0 || !st.gate)
    return caf::make_error(ec::not_connected,
                           "machine " + name_of(self)
                             + " is not connected: its agent keeps the "
                               "worker's log; start it and try again");
  auto rp = self->make_response_promise<v1::LogChunk>();
  self->request(st.gate, std::chrono::seconds{10},
                atom::logs_v, st.session, std::move(cmd))
    .then(
      [rp](v1::LogsReply& reply) mutable {
        if (!reply.error().empty())
          rp.deliver(caf::make_error(ec::invalid_request, reply.error()));
        else
          rp.deliver(std::move(*reply.mutable_chunk()));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

/// Whether the machine's last report lists a GPU whose id, UUID or PCI
/// address is `gpu_id`.
bool knows_gpu(const v1::GpuSection& section, const std::string& gpu_id) {
  for (const auto& g : section.gpus())
    if (g.id() == gpu_id || g.pci_address() == gpu_id)
      return true;
  return false;
}

/// Asks the agent, through the gate, to clear GPU `gpu_id`'s latched fault.
caf::result<v1::ClearFaultResult> clear_fault(machine_ptr self, const std::string& gpu_id) {
  auto& st = self->state;
  if (st.session == 0 || !st.gate)
    return caf::make_error(ec::not_connected,
                           "machine " + name_of(self)
                             + " is not connected: a fault is cleared on "
                               "the machine itself; start its agent and "
                               "try again");
  auto rp = self->make_response_promise<v1::ClearFaultResult>();
  self->request(st.gate, std::chrono::seconds{10}, atom::clear_v, st.session, gpu_id)
    .then(
      [self, rp, gpu_id](v1::ClearFaultReply& reply) mutable {
        if (!reply.error().empty()) {
          rp.deliver(caf::make_error(ec::store_failure, reply.error()));
          return;
        }
        // Nothing cleared and no such GPU on the machine: a typo, said as
        // one (issue 13 item 7), not "cleared: false".
        if (!reply.cleared() && !knows_gpu(self->state.facts.gpus(), gpu_id)) {
          rp.deliver(caf::make_error(ec::invalid_request,
                                     "machine " + name_of(self) + " has no GPU "
                                       + gpu_id + " (astra gpus --machine "
                                       + name_of(self) + " lists them)"));
          return;
        }
        v1::ClearFaultResult out;
        out.set_uuid(reply.uuid());
        out.set_cleared(reply.cleared());
        rp.deliver(std::move(out));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

/// Ends a drain whose deadline passed once no worker here is live (its
/// agent said so): drained, stored with sync. Answers whether it is drained.
bool finish_drain_if_done(machine_ptr self) {
  auto& st = self->state;
  auto& rec = st.config.record;
  if (rec.drained())
    return true;
  if (!st.drain_stopping || rec.drain_deadline_unix_ms() == 0 || st.workers_live())
    return false;
  st.drain_stopping = false;
  rec.set_drained(true);
  if (auto err = persist(self, true))
    spdlog::error("machine {}: drain done but not stored: {}", name_of(self),
                  render_error(err));
  spdlog::info("machine {}: drained: its workers have ended", name_of(self));
  tell_scheduler(self);
  return true;
}

/// Arms the timer of the drain in the record, if one is under way.
void arm_drain(machine_ptr self) {
  const auto& rec = self->state.config.record;
  auto deadline = rec.drain_deadline_unix_ms();
  if (deadline == 0 || rec.drained())
    return;
  auto wait = std::max<int64_t>(0, deadline - self->state.config.clock->now_unix_ms());
  self->delayed_send(self, std::chrono::milliseconds{wait}, atom::drain_due_v, deadline);
}

/// `astra drain NAME --deadline D`: cordoned now, its workers stopped at
/// the deadline (issue 13, item 6).
caf::result<v1::MachineView> start_drain(machine_ptr self, const v1::DrainMachine& req) {
  auto& st = self->state;
  auto& rec = st.config.record;
  auto before = rec;
  auto now = st.config.clock->now_unix_ms();
  rec.set_cordoned(true);
  rec.set_drained(false);
  rec.set_drain_deadline_unix_ms(
    std::max<int64_t>(1, now + static_cast<int64_t>(req.deadline_seconds()) * 1000));
  if (auto err = persist(self, true)) {
    rec = std::move(before);
    return err;
  }
  spdlog::info("machine {}: draining: cordoned, its workers stop in {} s", name_of(self),
               req.deadline_seconds());
  tell_scheduler(self);
  arm_drain(self);
  return st.view();
}

/// The drain's deadline: every run with a worker here is stopped (its
/// workers get SIGTERM, then SIGKILL after their grace); the drain is done
/// once the agent reports them ended (finish_drain_if_done).
void drain_due(machine_ptr self, int64_t deadline) {
  auto& st = self->state;
  auto& rec = st.config.record;
  if (rec.drain_deadline_unix_ms() != deadline || rec.drained())
    return;
  std::set<std::string> runs;
  for (const auto& w : st.orders.workers())
    runs.insert(run_key(w.spec()));  // issue 13: names are per workspace
  for (const auto& run : runs) {
    spdlog::info("machine {}: drain deadline: stopping run {}", name_of(self), run);
    if (!st.config.scheduler)
      continue;
    // Stopped, not deleted: `astra run show` says why it ended.
    self->request(st.config.scheduler, std::chrono::seconds{30}, atom::stop_v, run,
                  "machine " + name_of(self) + " was drained")
      .then([](const v1::Run&) {},
            [name = name_of(self), run](const caf::error& err) {
              spdlog::warn("machine {}: drain: run {} not stopped: {}", name, run,
                           render_error(err));
            });
  }
  st.drain_stopping = true;
  if (!finish_drain_if_done(self))
    spdlog::info("machine {}: drain deadline: {} run(s) asked to stop; drained once "
                 "its agent reports their workers ended",
                 name_of(self), runs.size());
}

/// The heartbeat lapse timer fired.
void on_lapse(machine_ptr self) {
  auto& st = self->state;
  st.lapse_timer_pending = false;
  if (st.gpu_copy_unstored)
    persist(self, false);
  auto now = self->clock().now();
  auto deadline = st.last_report + st.config.heartbeat_lapse;
  if (now >= deadline) {
    // Lapsed: Up (or Idle, never reported) becomes Down. The timer is
    // re-armed by the next report.
    if (st.liveness != v1::Machine::Down)
      set_liveness(self, v1::Machine::Down, "heartbeat lapsed");
    return;
  }
  // A report came since the timer was set: wait for the rest.
  st.lapse_timer_pending = true;
  self->delayed_send(self, deadline - now, atom::lapse_v);
}

} // namespace

machine_actor::behavior_type
machine(machine_actor::stateful_pointer<machine_state> self,
        machine_config config) {
  if (auto err = config.validate()) {
    spdlog::error("machine: {}", render_error(err));
    self->quit(err);
    return machine_actor::behavior_type::make_empty_behavior();
  }
  auto& st = self->state;
  st.config = std::move(config);
  st.facts = st.config.record.last_facts();
  st.last_report_unix_ms = st.config.record.last_report_unix_ms();
  st.pressure = evaluate_pressure(st.facts, st.config.pressure);
  st.state_since_unix_ms = st.config.clock->now_unix_ms();
  // The lapse runs from the moment this actor starts: a machine that never
  // reports to this controller goes from Idle to Down.
  st.last_report = self->clock().now();
  st.lapse_timer_pending = true;
  self->delayed_send(self, st.config.heartbeat_lapse, atom::lapse_v);
  sync_gpus(self, false);
  self->send(st.config.scheduler, atom::attach_v, name_of(self),
             machine_actor{self});
  tell_scheduler(self);
  arm_drain(self);
  return {
    [self](v1::MachineReport& report) { on_report(self, report); },
    [self](atom::get) -> v1::MachineView { return self->state.view(); },
    [self](atom::gpus) -> caf::result<std::vector<v1::GpuView>> {
      return gpu_views(self);
    },
    [self](atom::cordon, bool on) -> caf::result<v1::MachineView> {
      return set_cordon(self, on);
    },
    [self](atom::maintenance, bool on) -> caf::result<v1::MachineView> {
      return set_maintenance(self, on);
    },
    [self](atom::connected, uint64_t session, bool up, gate_command_actor& gate) {
      on_connected(self, session, up, gate);
    },
    [self](atom::assign, v1::WorkerOrders& orders) {
      auto& st = self->state;
      note_stopping_gpus(st.orders, orders, st.stopping_gpus);
      st.orders = std::move(orders);
      st.orders_known = true;
      tell_holders(self);
      send_orders(self);
    },
    [self](v1::WorkerStatuses& statuses) { on_statuses(self, statuses); },
    [self](v1::SetLabels& req) -> caf::result<v1::MachineView> {
      return set_labels(self, req);
    },
    [self](atom::logs, v1::LogsCommand& cmd) -> caf::result<v1::LogChunk> {
      return fetch_logs(self, cmd);
    },
    [self](atom::health, std::string& id, gpu_health health, std::string& reasons) {
      auto& st = self->state;
      if (st.gpus.count(id) == 0)
        return;
      st.gpu_verdicts[id] = {health, std::move(reasons)};
      tell_scheduler(self);
      if (st.gpu_copy_unstored)
        persist(self, false);
    },
    [self](atom::clear, std::string& gpu_id) -> caf::result<v1::ClearFaultResult> {
      return clear_fault(self, gpu_id);
    },
    [self](atom::lapse) { on_lapse(self); },
    [self](v1::SchedulerNotes& notes) {
      auto& st = self->state;
      st.set_aside.assign(notes.set_aside().begin(), notes.set_aside().end());
    },
    [self](atom::validate, v1::ValidationStep& quick) { self->state.quick = std::move(quick); },
    [self](atom::accept, bool required, bool accepted,
           std::string& reason) -> caf::result<v1::MachineView> {
      return set_acceptance(self, required, accepted, reason);
    },
    [self](atom::accept, v1::Validation& v) { on_acceptance_ended(self, v); },
    [self](const v1::Request& req) -> caf::result<v1::MachineView> {
      return set_data_location(self, req);
    },
    [self](const v1::DrainMachine& req) -> caf::result<v1::MachineView> {
      return start_drain(self, req);
    },
    [self](atom::drain_due, int64_t deadline) { drain_due(self, deadline); },
  };
}

} // namespace astraeus
