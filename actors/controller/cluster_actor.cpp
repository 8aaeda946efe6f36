#include "actors/controller/cluster_actor.hpp"
#include "runtime/process/kill_point.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/cluster_requests.hpp"
#include "actors/controller/machine_actor.hpp"
#include "messages/error.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {


/// Spawns the machine actor of `record`, linked to the cluster, and enters
/// it in the registry.
machine_actor spawn_machine(cluster_ptr self, v1::MachineRecord record) {
  auto& st = self->state;
  machine_config cfg;
  auto name = record.name();
  auto identity = record.machine_id();
  cfg.record = std::move(record);
  cfg.heartbeat_lapse = st.config.heartbeat_lapse;
  cfg.pressure = st.config.pressure;
  cfg.store = st.config.store;
  cfg.scheduler = st.config.scheduler;
  cfg.history = st.config.history;
  cfg.clock = st.config.clock;
  auto handle = self->spawn<caf::linked>(machine, std::move(cfg));
  st.identities[name] = std::move(identity);
  st.machines[name] = handle;
  return handle;
}

/// Restores every stored machine: Idle (or Maintenance) until it reports.
void restore_machines(cluster_ptr self) {
  size_t restored = 0;
  auto err = self->state.config.store->for_each(
    family::machines, [&](std::string_view key, std::string_view bytes) {
      v1::MachineRecord rec;
      if (!rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
          || rec.name() != key) {
        spdlog::error("cluster: stored machine record '{}' does not parse; "
                      "left in the store untouched",
                      std::string{key});
        return true;
      }
      spawn_machine(self, std::move(rec));
      ++restored;
      return true;
    });
  if (err)
    spdlog::error("cluster: cannot read stored machines: {}", render_error(err));
  spdlog::info("cluster: {} machine(s) restored from the store", restored);
}

/// Restores every stored workspace.
void restore_workspaces(cluster_ptr self) {
  auto loaded = self->state.config.store->load_all<v1::Workspace>(family::workspaces);
  if (!loaded) {
    spdlog::error("cluster: cannot read stored workspaces: {}",
                  render_error(loaded.error()));
    return;
  }
  for (auto& [key, ws] : *loaded)
    self->state.workspaces[key] = std::move(ws);
}

/// Restores the Ed25519 key every machine enrolled with.
void restore_machine_keys(cluster_ptr self) {
  auto err = self->state.config.store->for_each(
    family::tokens, [&](std::string_view key, std::string_view bytes) {
      if (key.substr(0, 8) != "machine/")
        return true;
      v1::MachineIdentity id;
      if (!id.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        spdlog::error("cluster: stored identity '{}' does not parse; left "
                      "untouched (that machine must enrol again)",
                      std::string{key});
      else
        self->state.keys[id.name()] = id.identity_key();
      return true;
    });
  if (err)
    spdlog::error("cluster: cannot read machine identities: {}",
                  render_error(err));
}

caf::error identity_mismatch(const std::string& name) {
  return caf::make_error(
    ec::identity_mismatch,
    "machine name " + name
      + " is registered to another machine identity; give this agent "
        "another --name, or reuse the original agent's data folder");
}

/// Checks the Ed25519 key of `hello` against the one its name enrolled with.
/// A machine not enrolled yet uses up its join token: its record fills
/// `token`, and the changes that mark it used and keep the machine's
/// identity are appended to `batch` (written by the caller with the
/// machine's record, in one write: issue 23 item 2). Errors:
/// ec::identity_mismatch, ec::invalid_request (no key),
/// ec::enrollment_required and the token registry's errors, a store error.
caf::error check_enrolment(cluster_ptr self, const v1::Hello& hello, uint64_t now,
                           v1::JoinTokenRecord& token, std::vector<Store::change>& batch) {
  auto& st = self->state;
  const auto& name = hello.machine_name();
  const auto& key = hello.identity_key();
  if (key.size() != 32)
    return caf::make_error(ec::invalid_request,
                           "machine " + name
                             + " has no identity key from the secure channel");
  auto bound = st.keys.find(name);
  if (bound != st.keys.end())
    return bound->second != key ? identity_mismatch(name) : caf::none;
  // Not enrolled yet (new, or registered before enrolment existed): its
  // join token, used up now, says it may join.
  if (hello.join_token().empty())
    return caf::make_error(
      ec::enrollment_required,
      "machine " + name
        + " is not enrolled: start its agent with --token-file (an admin mints "
          "a join token with `astra tokens create`)");
  auto redeemed = st.config.tokens->prepare_redeem_join(hello.join_token(), name, now);
  if (!redeemed) {
    spdlog::warn("cluster: machine {} (key {}) cannot enrol: {}", name,
                 to_hex(key).substr(0, 16), render_error(redeemed.error()));
    return redeemed.error();
  }
  batch.push_back(std::move(redeemed->first));
  token = std::move(redeemed->second);
  v1::MachineIdentity id;
  id.set_name(name);
  id.set_identity_key(key);
  id.set_join_token_id(token.id());
  id.set_enrolled_unix_ms(now);
  batch.push_back({family::tokens, machine_identity_key(name), id.SerializeAsString()});
  return caf::none;
}

/// Answers an agent's hello (actors/interfaces.hpp, `atom::enrol`).
/// `gate` delivers its session's commands (null for an embedding control
/// plane's agent, which has none).
caf::result<machine_actor> enrol(cluster_ptr self, const v1::Hello& hello,
                                 uint64_t session, gate_command_actor gate) {
  auto& st = self->state;
  const auto& name = hello.machine_name();
  if (!valid_machine_name(name))
    return caf::make_error(ec::invalid_request,
                           "machine name '" + name
                             + "' is not a valid hostname (1-63 letters, "
                               "digits, '-', '_', '.')");
  if (hello.machine_id().empty())
    return caf::make_error(ec::invalid_request,
                           "machine " + name + " sent no machine identity");
  machine_actor handle;
  auto now = self->state.config.clock->now_unix_ms();
  auto known = st.machines.find(name);
  if (known != st.machines.end() && st.identities[name] != hello.machine_id())
    return identity_mismatch(name);
  v1::JoinTokenRecord token;
  std::vector<Store::change> batch;
  if (st.config.tokens)
    if (auto err = check_enrolment(self, hello, now, token, batch))
      return err;
  std::optional<v1::MachineRecord> fresh;
  if (known == st.machines.end()) {
    fresh.emplace();
    fresh->set_name(name);
    fresh->set_machine_id(hello.machine_id());
    fresh->set_registered_unix_ms(now);
    fresh->set_agent_version(hello.software_version());
    // The labels given with its join token become the machine's.
    *fresh->mutable_labels() = token.labels();
    batch.push_back({family::machines, name, fresh->SerializeAsString()});
  }
  // The token used, the identity and the record: all or none.
  if (auto err = st.config.store->write(batch, true))
    return err;
  kill_point("between_token_use_and_registration");
  if (!token.id().empty()) {
    st.keys[name] = hello.identity_key();
    spdlog::info("cluster: machine {} enrolled with join token {} (key {})", name,
                 token.id(), to_hex(hello.identity_key()).substr(0, 16));
  }
  if (fresh) {
    spdlog::info("cluster: machine {} registered (Idle until it reports)", name);
    handle = spawn_machine(self, std::move(*fresh));
  } else {
    handle = known->second;
  }
  self->send(handle, atom::connected_v, session, true, std::move(gate));
  return handle;
}

} // namespace

std::string run_console_url(const cluster_config& config, const v1::RunSpec& spec) {
  auto base = console_base(config.console_url, config.install.get());
  if (base.empty())
    return {};
  return base + "/o/" + config.organization + "/w/"
         + (spec.workspace().empty() ? std::string{default_workspace} : spec.workspace())
         + "/jobs/" + config.cluster_name + "/" + spec.name();
}

std::string machine_identity_key(const std::string& machine) {
  return "machine/" + machine;
}

bool valid_machine_name(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
           || c == '.';
  });
}

caf::error validate_workspace(v1::Workspace& ws) {
  const auto& n = ws.name();
  if (auto err = check_workspace_name(n))
    return err;
  if (ws.organisation().empty())
    ws.set_organisation("default");
  else if (check_workspace_name(ws.organisation()))
    return caf::make_error(ec::invalid_request,
                           "organisation '" + ws.organisation()
                             + "': use 1-63 letters, digits and '-'");
  auto blank = [](const std::string& s) {
    return std::any_of(s.begin(), s.end(), [](unsigned char c) {
      return std::isspace(c) != 0 || std::iscntrl(c) != 0;
    });
  };
  for (const auto& [k, v] : ws.grants())
    if (k.empty() || v.empty() || k.find('=') != std::string::npos || blank(k)
        || blank(v))
      return caf::make_error(ec::invalid_request,
                             "grant '" + k + "=" + v
                               + "': give each grant as KEY=VALUE without spaces, "
                                 "e.g. pool=h100");
  return caf::none;
}

namespace {

/// Issue 16: a named workspace's runs bind only granted machine paths and
/// share the machine's /dev/shm only where privileged work is allowed.
// The machine folder an image given as an absolute path names ("/srv/rfs"
// of "/srv/rfs:v2", as the agent's find_image reads it); "" for an image
// of the machine's images folder (a name).
std::string image_host_path(const std::string& image) {
  if (image.empty() || image.front() != '/')
    return {};
  auto colon = image.rfind(':');
  auto slash = image.rfind('/');
  return colon != std::string::npos && colon > slash ? image.substr(0, colon) : image;
}

caf::error check_workspace_grants(const v1::Workspace& ws, const v1::RunSpec& spec) {
  auto how = "an admin grants it with: astra workspace grant " + ws.name();
  // An image given as a machine folder is read from the machine as a Bind
  // volume is (a copy of any folder, root's files included; eighth trial).
  if (auto path = image_host_path(spec.image()); !path.empty() && !ws.allow_privileged()
      && std::none_of(ws.bind_grants().begin(), ws.bind_grants().end(),
                      [&](const std::string& g) { return path_granted(path, g); }))
    return caf::make_error(ec::invalid_request,
                           "image: " + spec.image() + ": workspace " + ws.name()
                             + " is not granted the machine path " + path
                             + " (name an image of the machine's images folder, e.g. "
                               "--image busybox; or " + how + " --path PATH)");
  for (int i = 0; i < spec.volumes_size(); ++i) {
    const auto& v = spec.volumes(i);
    if (v.type() != "Bind")
      continue;
    bool granted = std::any_of(ws.bind_grants().begin(), ws.bind_grants().end(),
                               [&](const std::string& g) { return path_granted(v.host_path(), g); });
    if (granted)
      continue;
    std::string list;
    for (const auto& g : ws.bind_grants())
      list += (list.empty() ? "" : ", ") + g;
    return caf::make_error(ec::invalid_request,
                           "volumes[" + std::to_string(i) + "]: workspace " + ws.name()
                             + " is not granted the machine path " + v.host_path() + " ("
                             + (list.empty() ? "it is granted none" : "granted: " + list)
                             + "; " + how + " --path PATH)");
  }
  if (spec.ipc_mode() == "host" && !ws.allow_privileged())
    return caf::make_error(ec::invalid_request,
                           "security_context.ipc_mode: host: workspace " + ws.name()
                             + " is not allowed privileged work (" + how + " --privileged)");
  // A host process runs as the agent and sees the machine's files: the
  // grants above would mean nothing. So is a run without an image, which a
  // machine whose runtime is auto or process runs as one.
  if (!ws.allow_privileged() && (spec.runtime() == "process" || spec.image().empty()))
    return caf::make_error(ec::invalid_request,
                           std::string{spec.runtime() == "process" ? "runtime: process"
                                                                   : "image: none given"}
                             + ": workspace " + ws.name()
                             + " runs containers only; a host process is privileged work ("
                             + how + " --privileged), or give an image (--image busybox)");
  return caf::none;
}

// What the default workspace refuses a member's run (apply_workspace): the
// machine's files and host processes are the cluster's own, an admin's.
caf::error check_member_in_default_workspace(const v1::RunSpec& spec) {
  const std::string why = ": in the default workspace ";
  const std::string role = "; you are a member: ";
  const std::string elsewhere = "use a workspace an admin granted it (astra workspace grant W ";
  if (auto path = image_host_path(spec.image()); !path.empty())
    return caf::make_error(ec::invalid_request,
                           "image: " + spec.image() + why + "a machine folder as an image is an "
                             "admin's" + role + "name an image of the machine's images folder "
                             "(--image busybox), or " + elsewhere + "--path PATH)");
  for (int i = 0; i < spec.volumes_size(); ++i)
    if (spec.volumes(i).type() == "Bind")
      return caf::make_error(ec::invalid_request,
                             "volumes[" + std::to_string(i) + "]" + why
                               + "a machine path (Bind " + spec.volumes(i).host_path()
                               + ") is an admin's" + role + "use an EmptyDir volume, or "
                               + elsewhere + "--path PATH)");
  if (spec.ipc_mode() == "host")
    return caf::make_error(ec::invalid_request, "security_context.ipc_mode: host" + why
                                                  + "privileged work is an admin's" + role
                                                  + elsewhere + "--privileged)");
  if (spec.runtime() == "process" || spec.image().empty())
    return caf::make_error(ec::invalid_request,
                           std::string{spec.runtime() == "process" ? "runtime: process"
                                                                   : "image: none given"}
                             + why + "a host process (it runs as the agent, root) is an admin's"
                             + role + "give an image (--image busybox), or " + elsewhere
                             + "--privileged)");
  return caf::none;
}

} // namespace

caf::error apply_workspace(const v1::Workspace* ws, v1::RunSpec& spec, bool admin) {
  if (spec.workspace().empty())
    spec.set_workspace(default_workspace);
  // Full names carry the workspace's namespace; the default workspace has
  // none. Never the client's word.
  spec.set_namespace_(ws == nullptr ? std::string{} : ws->namespace_());
  if (ws == nullptr) {
    if (admin)
      return caf::none;
    if (auto err = check_member_in_default_workspace(spec))
      return err;
    // A container, wherever it lands: on a machine without runc (or with
    // workers.runtime process) the machine's choice would run the image's
    // command as a host process, root, past the checks above. There it
    // fails at start instead, as a named workspace's run does.
    if (spec.runtime().empty())
      spec.set_runtime("runc");
    return caf::none;
  }
  for (const auto& [k, v] : ws->grants()) {
    std::string asked;
    if (k == "pool" && !spec.pool().empty())
      asked = spec.pool();
    else if (auto i = spec.labels().find(k); i != spec.labels().end())
      asked = i->second;
    if (!asked.empty() && asked != v)
      return caf::make_error(ec::invalid_request,
                             "workspace " + ws->name() + " is granted " + k + "="
                               + v + "; the run asks for " + k + "=" + asked);
    if (k == "pool")
      spec.set_pool(v);
    else
      (*spec.mutable_labels())[k] = v;
  }
  return check_workspace_grants(*ws, spec);
}

bool path_granted(const std::string& path, const std::string& grant) {
  auto p = normal_grant_path(path);
  auto g = normal_grant_path(grant);
  if (p.empty() || g.empty())
    return false;
  return p == g || (p.size() > g.size() && p.compare(0, g.size(), g) == 0 && p[g.size()] == '/');
}

caf::error cluster_config::validate() const {
  if (!store)
    return caf::make_error(ec::invalid_config, "cluster: no store");
  if (heartbeat_lapse.count() <= 0 || request_timeout.count() <= 0)
    return caf::make_error(ec::invalid_config,
                           "cluster: durations must be positive");
  if (!clock)
    return caf::make_error(ec::invalid_config, "cluster: no wall clock");
  return caf::none;
}

cluster_actor::behavior_type
cluster(cluster_actor::stateful_pointer<cluster_state> self,
        cluster_config config) {
  if (auto err = config.validate()) {
    spdlog::error("cluster: {}", render_error(err));
    self->quit(err);
    return cluster_actor::behavior_type::make_empty_behavior();
  }
  self->state.config = std::move(config);
  restore_machines(self);
  restore_workspaces(self);
  restore_machine_keys(self);
  return {
    [self](atom::enrol, v1::Hello& hello,
           uint64_t session) -> caf::result<machine_actor> {
      return enrol(self, hello, session, gate_command_actor{});
    },
    [self](atom::enrol, v1::Hello& hello, uint64_t session,
           gate_command_actor& gate) -> caf::result<machine_actor> {
      return enrol(self, hello, session, std::move(gate));
    },
    [self](v1::Request& req) -> caf::result<v1::Response> {
      return answer_cluster_request(self, req);
    },
    [self](atom::get, const std::string& name) -> caf::result<machine_actor> {
      auto& st = self->state;
      auto i = st.machines.find(name);
      if (i == st.machines.end())
        return caf::make_error(ec::no_such_machine, "no machine named " + name);
      return i->second;
    },
    [self](atom::login, const std::string& token) -> caf::result<v1::Principal> {
      auto& st = self->state;
      if (!st.config.tokens)
        return v1::Principal{};
      auto who = st.config.tokens->authenticate(token, self->state.config.clock->now_unix_ms());
      if (!who) {
        spdlog::warn("cluster: a CLI session was refused: {}",
                     render_error(who.error()));
        return who.error();
      }
      return std::move(*who);
    },
  };
}

} // namespace astraeus
