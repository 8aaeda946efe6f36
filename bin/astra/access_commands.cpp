// astra's access commands: join tokens for new machines, API tokens for
// people and scripts, who astra is, the audit log, `astra login`; and
// `astra version`.

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/cli_format.hpp"
#include "messages/error.hpp"
#include "messages/labels.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/process/config.hpp"
#include "runtime/process/duration_limits.hpp"
#include "runtime/process/private_file.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::cli {

namespace {

/// What `astra tokens create` parses.
struct join_token_flags {
  std::string pool;
  std::string ttl = "1h";
  std::vector<std::string> labels;
};

/// `astra tokens create`: a join token and the install command using it.
void add_join_tokens(CLI::App& app, invocation& inv) {
  auto* tokens = app.add_subcommand("tokens", "join tokens for new machines");
  tokens->require_subcommand(1);
  auto* create = tokens->add_subcommand(
    "create", "mint a single-use join token and print the install command "
              "that uses it (owners and admins)");
  auto& f = inv.keep<join_token_flags>();
  create->add_option("--pool", f.pool, "the machine's pool (label pool=NAME)");
  create->add_option("--ttl", f.ttl, "how long the unused token stays valid: 1h "
                                     "(default), 30m, 24h, 7d (at most 30d)")
    ->capture_default_str();
  create->add_option("--label", f.labels, "KEY=VALUE, a label the machine gets; "
                                          "repeatable");
  create->callback([&inv, &f] {
    auto ttl = parse_bounded_seconds(f.ttl, "--ttl", max_join_ttl_seconds);
    if (!ttl || *ttl == 0) {
      std::fprintf(stderr, "astra: %s\n",
                   ttl ? "--ttl: '0' is not a duration (use 1h, 30m, 24h, 7d)"
                       : render_error(ttl.error()).c_str());
      inv.rc = 2;
      return;
    }
    v1::Request req;
    auto* body = req.mutable_create_join_token();
    body->set_ttl_seconds(*ttl);
    if (!f.pool.empty()) {
      if (auto err = check_label("pool", f.pool)) {
        std::fprintf(stderr, "astra: --pool: %s\n", render_error(err).c_str());
        inv.rc = 2;
        return;
      }
      (*body->mutable_labels())["pool"] = f.pool;
    }
    for (const auto& kv : f.labels) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "astra: --label: '%s' is not KEY=VALUE\n", kv.c_str());
        inv.rc = 2;
        return;
      }
      // The controller's rule, checked here too: a bad label is a usage
      // error (exit 2) before anything is sent, as for `astra label`.
      if (auto err = check_label(kv.substr(0, eq), kv.substr(eq + 1))) {
        std::fprintf(stderr, "astra: --label: %s\n", render_error(err).c_str());
        inv.rc = 2;
        return;
      }
      (*body->mutable_labels())[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    inv.rc = call(inv.opts, req, [&inv](const v1::Response& r) {
      return format_join_token(join_token_for(r.join_token(), inv.opts.addr), inv.opts.addr,
                               now_ms());
    });
  });
}

/// What `astra api-tokens create` parses.
struct api_token_flags {
  std::string name;
  std::string role = "member";
  std::string ttl;
};

/// `astra api-tokens create|revoke`.
void add_api_tokens(CLI::App& app, invocation& inv) {
  auto* api = app.add_subcommand("api-tokens", "API tokens for people and scripts");
  api->require_subcommand(1);
  auto* create = api->add_subcommand(
    "create", "mint an API token for NAME with a role (owners and admins; an "
              "owner token only by an owner)");
  auto& f = inv.keep<api_token_flags>();
  create->add_option("--name", f.name, "who holds it, e.g. alice")
    ->required()
    ->check(value_check(check_api_token_name));
  create->add_option("--role", f.role, "owner, admin or member")
    ->check(CLI::IsMember({"owner", "admin", "member"}))
    ->capture_default_str();
  create->add_option("--ttl", f.ttl, "how long it is valid (e.g. 30d, at most "
                                     "3650d); default: until revoked");
  create->callback([&inv, &f] {
    v1::Request req;
    auto* body = req.mutable_create_api_token();
    body->set_name(f.name);
    body->set_role(f.role);
    if (!f.ttl.empty()) {
      auto ttl = parse_bounded_seconds(f.ttl, "--ttl", max_api_token_ttl_seconds);
      if (!ttl || *ttl == 0) {
        std::fprintf(stderr, "astra: %s\n",
                     ttl ? "--ttl: '0' is not a duration (leave --ttl out for a token valid "
                           "until revoked)"
                         : render_error(ttl.error()).c_str());
        inv.rc = 2;
        return;
      }
      body->set_ttl_seconds(*ttl);
    }
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      const auto& t = r.api_token();
      return "token  " + t.token() + "\nid     " + t.id() + "\nname   "
             + t.name() + "\nrole   " + t.role()
             + "\n(shown once; `astra login` with it, or set ASTRAEUS_TOKEN)\n";
    });
  });
  auto* revoke = api->add_subcommand("revoke", "revoke an API token by its id");
  auto& id = inv.keep<std::string>();
  revoke->add_option("ID", id, "the token's id (12 hex digits)")->required();
  revoke->callback([&inv, &id] {
    v1::Request req;
    req.mutable_revoke_api_token()->set_id(id);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "API token " + r.api_token().id() + " (" + r.api_token().name()
             + ") revoked\n";
    });
  });
}

/// `astra whoami` and `astra audit`.
void add_whoami_and_audit(CLI::App& app, invocation& inv) {
  auto* whoami = app.add_subcommand("whoami", "who astra authenticates as");
  whoami->callback([&inv] {
    v1::Request req;
    req.mutable_whoami();
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return r.principal().name() + " (" + r.principal().role() + ", token "
             + r.principal().token_id() + ")\n";
    });
  });
  auto* audit = app.add_subcommand("audit", "the audit log of admin actions, "
                                            "newest first (owners and admins)");
  auto& limit = inv.keep<uint32_t>(100);
  // The API's range (GET /audit?limit=1..100000); 0 was read as 100.
  audit->add_option("--limit", limit, "at most this many records, 1 to 100000 (default 100)")
    ->check(CLI::Range(1, 100000));
  audit->callback([&inv, &limit] {
    v1::Request req;
    req.mutable_list_audit()->set_limit(limit);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_audit(r.audit());
    });
  });
}

/// The API token `astra login` checks: the file's, else a line of stdin;
/// false (and a message on stderr) when the file cannot be read.
bool read_login_token(const std::string& file, std::string& token) {
  if (!file.empty()) {
    auto t = read_trimmed_file(file);
    if (!t) {
      std::fprintf(stderr, "astra: %s\n", render_error(t.error()).c_str());
      return false;
    }
    token = *t;
    if (token.empty()) {
      std::fprintf(stderr, "astra: login: %s is empty: give a file holding an API token\n",
                   file.c_str());
      return false;
    }
    return true;
  }
  if (::isatty(0))
    std::fprintf(stderr, "API token: ");
  std::getline(std::cin, token);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
    token.pop_back();
  if (token.empty()) {
    // Not the controller's "run `astra login`": this is it.
    std::fprintf(stderr, "astra: login: no API token given (type or pipe one, or use "
                         "--token-file FILE); nothing was sent\n");
    return false;
  }
  return true;
}

/// `astra login`: checks the token with the controller and keeps it, with
/// the controller's address and key. Returns the exit code.
int login(const options& opts, const std::string& file) {
  std::string token;
  if (!read_login_token(file, token))
    return 2;
  // Without --addr (or ASTRAEUS_ADDR), the controller an earlier login kept,
  // as every other command finds it (a new-user trial's second login went
  // to 127.0.0.1:7450), with its key pinned.
  auto addr = opts.addr;
  auto pin = opts.controller_key;
  if (!opts.addr_given) {
    auto saved = read_credentials(credentials_path());
    if (!saved["addr"].empty()) {
      addr = saved["addr"];
      if (pin.empty())
        pin = saved["controller_key"];
    }
  }
  auto addrs = parse_gate_addresses(addr);
  if (!addrs) {
    std::fprintf(stderr, "astra: %s\n", render_error(addrs.error()).c_str());
    return 2;
  }
  gate_credentials creds;
  creds.api_token = token;
  if (!pin.empty()) {
    auto key = parse_public_key(pin, opts.controller_key.empty()
                                       ? std::string{"the kept controller key"}
                                       : std::string{"--controller-key"});
    if (!key) {
      std::fprintf(stderr, "astra: %s\n", render_error(key.error()).c_str());
      return 2;
    }
    creds.pinned = *key;
  }
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  auto client = gate_client::connect_cli_leader(*addrs, timeout, creds);
  if (!client) {
    std::fprintf(stderr, "astra: %s\n", render_error(client.error()).c_str());
    // 3 only when unreachable; a refused token is the controller's answer.
    return client.error() == ec::unreachable || client.error() == ec::timeout ? 3 : 1;
  }
  const auto& who = client->welcome().principal();
  auto path = credentials_path();
  if (auto err = write_private_file(path, "token=" + token + "\naddr=" + addr
                                            + "\ncontroller_key="
                                            + to_hex(client->server_key()))) {
    std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
    return 1;
  }
  std::printf("Logged in to %s as %s (%s); credentials in %s (mode 0600), "
              "controller key %s pinned.\n",
              addr.c_str(), who.name().c_str(), who.role().c_str(), path.c_str(),
              fingerprint(client->server_key()).c_str());
  return 0;
}

} // namespace

void add_access_commands(CLI::App& app, invocation& inv) {
  add_join_tokens(app, inv);
  add_api_tokens(app, inv);
  add_whoami_and_audit(app, inv);
  auto* cmd = app.add_subcommand(
    "login", "check an API token with the controller and keep it (mode 0600) "
             "for later commands, with the controller's address and key");
  auto& file = inv.keep<std::string>();
  cmd->add_option("--token-file", file,
                  "file holding the token; default: read it from stdin");
  // `astra --token-file F login` as `astra login --token-file F`.
  cmd->callback([&inv, &file] {
    inv.rc = login(inv.opts, file.empty() ? inv.opts.token_file : file);
  });
  auto* out = app.add_subcommand("logout", "forget the token `astra login` kept");
  out->callback([&inv] {
    auto path = credentials_path();
    std::error_code err;
    if (std::filesystem::remove(path, err)) {
      std::printf("Logged out: removed %s.\n", path.c_str());
      inv.rc = 0;
    } else if (err) {
      std::fprintf(stderr, "astra: cannot remove %s: %s\n", path.c_str(),
                   err.message().c_str());
      inv.rc = 2;
    } else {
      std::printf("Not logged in (no %s).\n", path.c_str());
      inv.rc = 0;
    }
  });
}

void add_version_command(CLI::App& app, invocation& inv) {
  auto* version = app.add_subcommand("version", "print astra's version");
  version->callback([&inv] {
    std::printf("astra %s (protocol %u)\n", ASTRAEUS_VERSION, astraeus::protocol_version);
    inv.rc = 0;
  });
}

} // namespace astraeus::cli
