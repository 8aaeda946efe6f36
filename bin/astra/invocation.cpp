#include "bin/astra/invocation.hpp"

#include <filesystem>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "bin/cli_format.hpp"
#include "messages/api_error.hpp"
#include "messages/json.hpp"
#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/process/config.hpp"
#include "runtime/process/private_file.hpp"

namespace astraeus::cli {

std::map<std::string, std::string> read_credentials(const std::string& path) {
  std::map<std::string, std::string> out;
  auto text = read_trimmed_file(path);
  if (!text)
    return out;
  std::stringstream in{*text};
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos)
      out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

namespace {

/// For a request that changes something, the command that shows whether
/// it took effect; empty for one that only reads.
std::string how_to_check(const v1::Request& req) {
  using B = v1::Request::BodyCase;
  switch (req.body_case()) {
    case B::kSetCordon: return "astra machine " + req.set_cordon().name();
    case B::kSetMaintenance: return "astra machine " + req.set_maintenance().name();
    case B::kSetLabels: return "astra machine " + req.set_labels().name();
    case B::kSetDataLocation: return "astra machine " + req.set_data_location().name();
    case B::kClearFault: return "astra gpus --machine " + req.clear_fault().machine();
    case B::kSubmitRun: return "astra run show " + req.submit_run().spec().name();
    case B::kDeleteRun: return "astra run show " + req.delete_run().name();
    case B::kCreateWorkspace:
    case B::kSetWorkspaceGrants: return "astra workspaces";
    case B::kCreateJoinToken:
    case B::kCreateApiToken:
    case B::kRevokeApiToken: return "astra audit";
    default: return {};
  }
}

} // namespace

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string credentials_path() {
  if (auto xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string{xdg} + "/astraeus/credentials";
  auto home = std::getenv("HOME");
  return std::string{home != nullptr ? home : "."} + "/.config/astraeus/credentials";
}

std::optional<gate_credentials> resolve_credentials(options& opts) {
  gate_credentials out;
  std::string pin = opts.controller_key;
  if (!opts.token_file.empty()) {
    // README: an unreadable --token-file is a usage error and nothing is
    // sent; a folder or an empty file holds no token either (a new-user
    // trial saw both sent, then refused by the controller, exit 1).
    std::error_code ec;
    if (std::filesystem::is_directory(opts.token_file, ec)) {
      std::fprintf(stderr, "astra: --token-file: %s is a folder, not a file holding a token; "
                           "nothing was sent\n", opts.token_file.c_str());
      return std::nullopt;
    }
    auto token = read_trimmed_file(opts.token_file);
    if (!token) {
      std::fprintf(stderr, "astra: --token-file: %s\n",
                   render_error(token.error()).c_str());
      return std::nullopt;
    }
    if (token->empty()) {
      std::fprintf(stderr, "astra: --token-file: %s is empty; nothing was sent\n",
                   opts.token_file.c_str());
      return std::nullopt;
    }
    out.api_token = *token;
  } else if (auto env = std::getenv("ASTRAEUS_TOKEN"); env != nullptr && *env != '\0') {
    out.api_token = env;
  } else if (auto saved = read_credentials(credentials_path());
             !saved["token"].empty()) {
    out.api_token = saved["token"];
    if (pin.empty())
      pin = saved["controller_key"];
    if (!opts.addr_given && !saved["addr"].empty())
      opts.addr = saved["addr"];
  } else {
    for (auto keys : {default_data_dir("dev") + "/controller-keys",
                      default_data_dir("controller") + "-keys"}) {
      auto token = read_trimmed_file(keys + "/owner-token");
      if (!token)
        continue;
      out.api_token = *token;
      if (pin.empty())
        if (auto key = read_trimmed_file(keys + "/gate.pub"))
          pin = *key;
      break;
    }
  }
  if (!pin.empty()) {
    auto key = parse_public_key(pin, opts.controller_key.empty()
                                       ? std::string{"the kept controller key"}
                                       : std::string{"--controller-key"});
    if (!key) {
      std::fprintf(stderr, "astra: %s; nothing was sent\n",
                   render_error(key.error()).c_str());
      return std::nullopt;
    }
    out.pinned = *key;
  }
  return out;
}

std::optional<gate_client> connect_gate(options opts, int& rc, bool quiet) {
  auto creds = resolve_credentials(opts);
  if (!creds) {
    rc = 2;
    return std::nullopt;
  }
  // One gate, or an HA group's ("A,B,C", any order): the leader answers.
  auto addrs = parse_gate_addresses(opts.addr);
  if (!addrs) {
    std::fprintf(stderr, "astra: %s\n", render_error(addrs.error()).c_str());
    rc = 2;
    return std::nullopt;
  }
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  auto client = gate_client::connect_cli_leader(*addrs, timeout, *creds);
  if (!client && quiet) {
    rc = client.error() == ec::unreachable || client.error() == ec::timeout ? 3 : 1;
    return std::nullopt;
  }
  if (!client) {
    std::fprintf(stderr, "astra: %s\n", render_error(client.error()).c_str());
    if (client.error() == ec::unreachable && addrs->size() > 1)
      // An HA group: `astraeus dev` is no answer there (a new-user trial).
      std::fprintf(stderr, "astra: does any controller of the group lead? One leads only "
                           "while it reaches a quorum of etcd's members "
                           "(`etcdctl endpoint health`); check the controllers' logs.\n");
    else if (client.error() == ec::unreachable)
      std::fprintf(stderr, "astra: is the controller running? Start one with "
                           "`astraeus dev`, or point astra at yours with "
                           "--addr or ASTRAEUS_ADDR.\n");
    if (client.error() == ec::protocol_violation && creds->api_token.empty())
      std::fprintf(stderr, "astra: to sign in, run `astra login`, set ASTRAEUS_TOKEN, or pass "
                           "--token-file.\n");
    // 3 when the controller could not be reached or did not answer; when it
    // answered and refused us (an unknown, revoked or missing token, a key
    // that is not the pinned one), 1, as for any refusal.
    rc = client.error() == ec::unreachable || client.error() == ec::timeout ? 3 : 1;
    return std::nullopt;
  }
  return std::move(*client);
}

std::optional<v1::Response> ask_controller(const options& opts, v1::Request req, int& rc) {
  auto client = connect_gate(opts, rc);
  if (!client)
    return std::nullopt;
  last_cluster_name() = client->welcome().cluster();
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  auto check = how_to_check(req);
  auto resp = client->call(std::move(req), timeout);
  if (!resp) {
    std::fprintf(stderr, "astra: %s\n", render_error(resp.error()).c_str());
    // The request went out: a change may have been made (issue 23 item 6).
    if (!check.empty())
      std::fprintf(stderr,
                   "astra: the request was sent but no answer came back, so it may "
                   "or may not have taken effect; check with `%s`\n",
                   check.c_str());
    rc = 3;
    return std::nullopt;
  }
  if (resp->has_error()) {
    if (opts.output == "json") {
      // The code as the API spells it (the seeds' NOT_CONNECTED, not
      // not_connected): -o json prints the API's objects.
      auto e = resp->error();
      e.set_code(api_error_code(e));
      std::fputs((to_json(e) + "\n").c_str(), stdout);
    }
    std::fprintf(stderr, "astra: %s\n", resp->error().message().c_str());
    rc = 1;
    return std::nullopt;
  }
  rc = 0;
  return std::move(*resp);
}

int call(options opts, v1::Request req,
         const std::function<std::string(const v1::Response&)>& table) {
  int rc = 0;
  auto resp = ask_controller(opts, std::move(req), rc);
  if (!resp)
    return rc;
  if (opts.output == "json") {
    if (resp->has_machines())
      std::fputs((to_json(resp->machines()) + "\n").c_str(), stdout);
    else if (resp->has_machine())
      std::fputs((to_json(resp->machine()) + "\n").c_str(), stdout);
    else if (resp->has_gpus())
      std::fputs((to_json(resp->gpus()) + "\n").c_str(), stdout);
    else if (resp->has_cleared())
      std::fputs((to_json_compact(resp->cleared()) + "\n").c_str(), stdout);
    else if (resp->has_xids())
      std::fputs((to_json(resp->xids()) + "\n").c_str(), stdout);
    else if (resp->has_run())
      std::fputs((to_json(resp->run()) + "\n").c_str(), stdout);
    else if (resp->has_runs())
      std::fputs((to_json(resp->runs()) + "\n").c_str(), stdout);
    else if (resp->has_workspace())
      std::fputs((to_json(resp->workspace()) + "\n").c_str(), stdout);
    else if (resp->has_workspaces())
      std::fputs((to_json(resp->workspaces()) + "\n").c_str(), stdout);
    else if (resp->has_join_token()) {
      // The seed's API answer carries the install command too.
      auto token = join_token_for(resp->join_token(), opts.addr);
      if (token.expires().empty())
        token.set_expires(rfc3339_utc(token.expires_unix_ms()));
      auto doc = to_json_compact(token);
      std::fputs((doc + "\n").c_str(), stdout);
    } else if (resp->has_api_token())
      std::fputs((to_json(resp->api_token()) + "\n").c_str(), stdout);
    else if (resp->has_principal())
      std::fputs((to_json(resp->principal()) + "\n").c_str(), stdout);
    else if (resp->has_audit())
      std::fputs((to_json(resp->audit()) + "\n").c_str(), stdout);
    else if (resp->has_validation())
      std::fputs((to_json(resp->validation()) + "\n").c_str(), stdout);
    else if (resp->has_validations())
      std::fputs((to_json(resp->validations()) + "\n").c_str(), stdout);
    else if (resp->has_report())
      std::fputs((to_json(resp->report()) + "\n").c_str(), stdout);
    else if (resp->has_topology())
      std::fputs((to_json(resp->topology()) + "\n").c_str(), stdout);
    else if (resp->has_validation_policy())
      std::fputs((to_json(resp->validation_policy()) + "\n").c_str(), stdout);
    else if (resp->has_validation_policies())
      std::fputs((to_json(resp->validation_policies()) + "\n").c_str(), stdout);
    else if (resp->has_join_tokens())
      std::fputs((to_json(resp->join_tokens()) + "\n").c_str(), stdout);
    else if (resp->has_api_tokens())
      std::fputs((to_json(resp->api_tokens()) + "\n").c_str(), stdout);
    else if (resp->has_gpu_history())
      std::fputs((to_json(resp->gpu_history()) + "\n").c_str(), stdout);
  } else {
    std::fputs(table(*resp).c_str(), stdout);
  }
  return 0;
}

std::string& last_cluster_name() {
  static std::string name;
  return name;
}

} // namespace astraeus::cli
