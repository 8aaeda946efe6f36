// The attack suite of issue 7 ("Enrolment and a secure gate"): a real
// controller and a real agent on loopback, attacked by peers that have no
// credentials, by an enrolled machine that oversteps, by racing and stale
// join tokens, by replayed handshakes and signatures, and by callers
// without the role. Every attack must fail, the real agent must be served
// throughout, and no token may be found in plain text in the store or the
// logs afterwards.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>


#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "channel_forgery.hpp"
#include "integration/cluster_harness.hpp"
#include "messages/error.hpp"

using namespace astraeus;
using namespace astraeus::itest;
using json = nlohmann::json;

namespace {

std::string tail(const std::string& text, size_t n = 4000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

/// Resident memory of `pid` in bytes (VmRSS), 0 when unknown.
uint64_t rss_bytes(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6)) * 1024;
  return 0;
}

/// Every byte of every regular file under `dir`.
std::string all_bytes_under(const fs::path& dir) {
  std::string out;
  std::error_code err;
  for (auto i = fs::recursive_directory_iterator(dir, err);
       !err && i != fs::recursive_directory_iterator(); i.increment(err)) {
    if (i->is_regular_file(err))
      out += read_text(i->path());
  }
  return out;
}

/// Sends `hello` (a client's first record) on `s`, waits for the gate's
/// accept and feeds it to `c`; its step (the sealed auth in `reply`).
caf::expected<channel_step> open_channel(raw_socket& s, channel_client& c,
                                         const std::string& hello) {
  if (!s.send_bytes(hello))
    return caf::make_error(ec::unreachable, "cannot send");
  uint32_t len = 0;
  auto got = wait_until(
    [&] {
      s.wait_closed(20ms);
      if (s.received.size() < 4)
        return false;
      auto n = decode_frame_length(s.received.data(), 1 << 20);
      len = n ? *n : 0;
      return n && s.received.size() >= 4 + len;
    },
    2s);
  if (!got)
    return caf::make_error(ec::timeout, "no channel accept within 2 s");
  return c.on_record(s.received.data() + 4, len);
}

class Security : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0);
    store_ = (dir_ / "controller").string();
    ctl_ = spawn("controller",
                 {program("astraeus-controller"), "--port", std::to_string(port_),
                  "--data-dir", store_, "--heartbeat-lapse", "2s",
                  "--set", "heartbeat.report_interval=600ms",
                  "--set", "gate.hello_timeout=1s",
                  "--set", "gate.max_unauthenticated_per_address=64"});
    ASSERT_TRUE(wait_until(
      [&] {
        return !ctl_->running()
               || (use_owner_credentials(port_, keys_dir_of(store_))
                   && gate_client::connect_cli(loopback(port_), 500ms,
                                               owner_credentials(port_)));
      },
      10s))
      << "the controller did not come up";
    ASSERT_TRUE(ctl_->running()) << ctl_->err();
    remember(owner_credentials(port_).api_token);
    auto enrol = enrol_flags(port_, dir_.path(), "gpu-01");
    ASSERT_FALSE(enrol.empty());
    remember(read_text(enrol[1]));
    std::vector<std::string> argv{program("astraeus-agent"), "--controller", addr(),
                                  "--data-dir", (dir_ / "agent").string(),
                                  "--name", "gpu-01", "--report-interval", "200ms",
                                  "--set", "reconnect.max_backoff=1s"};
    argv.insert(argv.end(), enrol.begin(), enrol.end());
    agent_ = spawn("agent", argv);
    ASSERT_TRUE(wait_until([&] { return machine_in_state(port_, "gpu-01", v1::Machine::Up); },
                           10s))
      << "the real agent did not come Up";
  }

  void TearDown() override {
    // After every attack: no token in plain text in the store or the logs.
    if (!HasFailure()) {
      auto store = all_bytes_under(store_);
      std::string logs;
      for (auto& p : procs_)
        logs += p->err() + p->out();
      for (const auto& t : tokens_) {
        auto secret = t.size() > 5 ? t.substr(5) : t; // without "astj_"/"asta_"
        EXPECT_EQ(store.find(secret), std::string::npos)
          << "a token is in the store in plain text";
        EXPECT_EQ(logs.find(secret), std::string::npos)
          << "a token is in a log in plain text";
      }
    }
    for (auto& p : procs_) {
      if (HasFailure())
        std::fprintf(stderr, "---- %s\n---- stderr:\n%s\n", p->command_line().c_str(),
                     tail(p->err()).c_str());
      p->kill_now();
    }
  }

  process* spawn(const std::string& label, std::vector<std::string> argv) {
    auto n = std::to_string(procs_.size());
    procs_.push_back(std::make_unique<process>(std::move(argv),
                                               dir_ / (label + "-" + n + ".out"),
                                               dir_ / (label + "-" + n + ".err")));
    return procs_.back().get();
  }

  std::string addr() const {
    return "127.0.0.1:" + std::to_string(port_);
  }

  /// A token to look for in plain text at the end.
  void remember(std::string token) {
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
      token.pop_back();
    if (!token.empty())
      tokens_.push_back(token);
  }

  std::string join_token(uint64_t ttl_seconds = 0) {
    auto t = mint_join_token(port_, {}, ttl_seconds);
    EXPECT_FALSE(t.empty());
    remember(t);
    return t;
  }

  /// An API token for `name` with `role`, minted by the owner.
  std::string api_token(const std::string& name, const std::string& role,
                        uint64_t ttl_seconds = 0, std::string* id = nullptr) {
    v1::Request req;
    req.mutable_create_api_token()->set_name(name);
    req.mutable_create_api_token()->set_role(role);
    req.mutable_create_api_token()->set_ttl_seconds(ttl_seconds);
    auto resp = gate_call(port_, req);
    EXPECT_TRUE(resp && !resp->has_error());
    if (!resp || resp->has_error())
      return {};
    remember(resp->api_token().token());
    if (id != nullptr)
      *id = resp->api_token().id();
    return resp->api_token().token();
  }

  v1::Hello agent_hello(const std::string& name, const std::string& token = {}) {
    v1::Hello h;
    h.set_protocol_version(protocol_version);
    h.set_role(v1::AGENT);
    h.set_machine_name(name);
    // A stable machine id per name, as an agent's data folder keeps it.
    std::string id = to_hex(std::string_view{name}).substr(0, 32);
    id.resize(32, '0');
    h.set_machine_id(id);
    h.set_join_token(token);
    return h;
  }

  gate_credentials machine_credentials(std::shared_ptr<const identity_keypair> keys) {
    gate_credentials c;
    c.identity = std::move(keys);
    c.pinned = owner_credentials(port_).pinned;
    return c;
  }

  /// The real agent still reports and the controller still answers.
  void expect_still_serving() {
    auto before = get_machine(port_, "gpu-01");
    ASSERT_TRUE(before) << "the controller no longer answers";
    EXPECT_EQ(before->state(), v1::Machine::Up);
    EXPECT_TRUE(wait_until(
      [&] {
        auto m = get_machine(port_, "gpu-01");
        return m && m->last_report_unix_ms() > before->last_report_unix_ms();
      },
      3s))
      << "the agent's reports stopped arriving";
    EXPECT_TRUE(ctl_->running()) << "the controller died";
  }

  temp_dir dir_;
  uint16_t port_ = 0;
  std::string store_;
  std::vector<std::unique_ptr<process>> procs_;
  std::vector<std::string> tokens_;
  process* ctl_ = nullptr;
  process* agent_ = nullptr;
};

// -- 1. an unauthenticated peer -------------------------------------------------

TEST_F(Security, TenThousandCraftedFramesFromAnUnauthenticatedPeerAreAllRefused) {
  // A real session recorded byte for byte, to replay.
  std::string recorded;
  {
    channel_client c{std::make_shared<const identity_keypair>(identity_keypair::generate()),
                     owner_credentials(port_).pinned};
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    recorded = c.start();
    // Answer the accept, and send a sealed CLI hello.
    auto step = open_channel(s, c, recorded);
    ASSERT_TRUE(step) << render_error(step.error());
    v1::Frame f;
    f.mutable_hello()->set_protocol_version(protocol_version);
    f.mutable_hello()->set_role(v1::CLI);
    f.mutable_hello()->set_api_token(owner_credentials(port_).api_token);
    auto rest = step->reply + c.encode(f);
    ASSERT_TRUE(s.send_bytes(rest));
    recorded += rest;
  }
  v1::Frame channel_hello;
  channel_hello.mutable_channel_hello()->set_protocol_version(protocol_version);
  channel_hello.mutable_channel_hello()->set_ephemeral_key(std::string(32, '\x07'));
  auto handshake = encode_frame(channel_hello);
  std::vector<std::string> plain;
  {
    v1::Frame f;
    f.mutable_hello()->set_protocol_version(protocol_version);
    f.mutable_hello()->set_role(v1::CLI);
    plain.push_back(encode_frame(f));
    f.Clear();
    f.mutable_report()->set_machine("gpu-01");
    f.mutable_report()->mutable_facts()->set_hostname("spoofed");
    plain.push_back(encode_frame(f));
    f.Clear();
    f.mutable_request()->mutable_set_cordon()->set_name("gpu-01");
    f.mutable_request()->mutable_set_cordon()->set_cordoned(true);
    plain.push_back(encode_frame(f));
    f.Clear();
    f.mutable_channel_auth()->set_identity_key(std::string(32, '\x01'));
    f.mutable_channel_auth()->set_signature(std::string(64, '\x02'));
    plain.push_back(encode_frame(f));
  }

  // The real agent is watched throughout: Up at every look.
  std::atomic<bool> watching{true};
  std::atomic<int> looks{0}, not_up{0};
  // One long-lived CLI session looks (it was welcomed before the flood, so
  // the flood's share of unauthenticated connections does not touch it).
  auto watch = gate_client::connect_cli(loopback(port_), 3s, owner_credentials(port_));
  ASSERT_TRUE(watch) << render_error(watch.error());
  std::thread watcher{[&] {
    while (watching) {
      v1::Request req;
      req.mutable_get_machine()->set_name("gpu-01");
      auto resp = watch->call(req, 3s);
      ++looks;
      if (!resp || resp->has_error() || resp->machine().state() != v1::Machine::Up)
        ++not_up;
      std::this_thread::sleep_for(100ms);
    }
  }};

  auto rss_before = rss_bytes(ctl_->pid());
  std::mt19937_64 rng{20261201};
  const int total = 10000;
  int sent = 0;
  auto t0 = steady::now();
  for (int i = 0; i < total; ++i) {
    std::string bytes;
    switch (i % 5) {
      case 0: { // random bytes, random length
        bytes.resize(1 + rng() % 300);
        for (auto& c : bytes)
          c = static_cast<char>(rng());
        break;
      }
      case 1: { // a length field up to 4 GiB, then a little
        auto n = static_cast<uint32_t>(1025 + rng() % (0xFFFFFFFFull - 1025));
        bytes = length_prefix(n) + std::string(rng() % 64, 'x');
        break;
      }
      case 2: // a truncated handshake
        bytes = handshake.substr(0, 1 + rng() % (handshake.size() - 1));
        break;
      case 3: // a replayed handshake (a real session, byte for byte)
        bytes = recorded;
        break;
      case 4: // a valid-looking frame before the handshake
        bytes = plain[rng() % plain.size()];
        break;
    }
    raw_socket s{port_};
    if (!s.connected())
      continue; // refused at the door: also not accepted
    s.send_bytes(bytes);
    ++sent;
    // Now and then (those that close at once, and a few truncated ones that
    // wait for the deadline) read what came back.
    if ((i % 50 < 5 && i % 5 != 2) || i % 2000 == 2) {
      // Never a welcome in the clear, and the connection is closed.
      EXPECT_TRUE(s.wait_closed(3s)) << "input " << i << " kept open";
      for (const auto& f : s.frames())
        EXPECT_FALSE(f.has_welcome()) << "input " << i;
    }
  }
  auto elapsed = seconds_since(t0);
  std::this_thread::sleep_for(1500ms); // the half-open ones reach their deadline
  auto rss_after = rss_bytes(ctl_->pid());
  watching = false;
  watcher.join();
  std::printf("[ attack ] %d crafted inputs in %.1f s; controller RSS %.1f -> %.1f MB; "
              "%d looks at the real agent, %d not Up\n",
              sent, elapsed, rss_before / 1e6, rss_after / 1e6, looks.load(),
              not_up.load());
  EXPECT_GE(sent, total * 9 / 10);
  EXPECT_LE(rss_after, rss_before + 50'000'000) << "the controller's memory grew";
  EXPECT_EQ(not_up.load(), 0) << "the real agent was not served throughout";
  EXPECT_GT(looks.load(), 5);
  // Nothing was accepted: no machine but the real one, nothing cordoned.
  auto machines = list_machines(port_);
  ASSERT_TRUE(machines);
  ASSERT_EQ(machines->size(), 1u);
  EXPECT_FALSE(machines->front().cordoned());
  EXPECT_NE(machines->front().facts().hostname(), "spoofed");
  expect_still_serving();
}

// -- 2. an enrolled machine that oversteps ----------------------------------------

TEST_F(Security, AnEnrolledMachineMaySpeakOnlyForItself) {
  auto keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
  auto creds = machine_credentials(keys);
  {
    auto m = gate_client::connect(loopback(port_), agent_hello("m-1", join_token()),
                                  3s, creds);
    ASSERT_TRUE(m) << render_error(m.error());
  }
  // From now on its identity alone; each overstep ends its session.
  auto session = [&]() {
    auto m = gate_client::connect(loopback(port_), agent_hello("m-1"), 3s, creds);
    EXPECT_TRUE(m) << render_error(m.error());
    return m;
  };
  auto expect_refused = [&](gate_client& m, const v1::Frame& f, const char* what) {
    ASSERT_FALSE(m.send(f)) << what;
    auto answer = next_refusal(m);
    EXPECT_TRUE(answer) << what << ": " << render_error(answer.error());
    EXPECT_TRUE(session_ended(m)) << what << ": the session was not ended";
  };
  {
    auto m = session();
    ASSERT_TRUE(m);
    v1::Frame f;
    f.mutable_report()->set_machine("gpu-01");
    f.mutable_report()->mutable_facts()->set_hostname("spoofed");
    expect_refused(*m, f, "a report for another machine");
  }
  {
    auto m = session();
    ASSERT_TRUE(m);
    v1::Frame f;
    f.mutable_request()->mutable_clear_fault()->set_machine("gpu-01");
    f.mutable_request()->mutable_clear_fault()->set_gpu("GPU-x");
    expect_refused(*m, f, "clearing a fault");
  }
  {
    auto m = session();
    ASSERT_TRUE(m);
    v1::Frame f;
    f.mutable_request()->mutable_create_join_token();
    expect_refused(*m, f, "minting a join token");
  }
  {
    auto m = session();
    ASSERT_TRUE(m);
    // An oversized frame: its length alone (2 MiB > the 1 MiB cap) ends it.
    ASSERT_FALSE(m->send_raw(length_prefix(2u << 20)));
    EXPECT_TRUE(session_ended(*m)) << "the session was not ended";
  }
  auto real = get_machine(port_, "gpu-01");
  ASSERT_TRUE(real);
  EXPECT_NE(real->facts().hostname(), "spoofed");
  EXPECT_TRUE(contains(ctl_->err(), "sent a report for machine 'gpu-01' but is "
                                    "connected as 'm-1'"))
    << "the refusal is logged";
  // And it cannot take another machine's name either.
  auto as_other = gate_client::connect(loopback(port_), agent_hello("gpu-01"), 3s, creds);
  EXPECT_FALSE(as_other);
  expect_still_serving();
}

// -- 3. join tokens under a race, and stale ones -----------------------------------

TEST_F(Security, FiftyParallelEnrolmentsWithOneTokenExactlyOneSucceeds) {
  auto token = join_token();
  std::atomic<int> ok{0}, used{0};
  std::vector<std::string> errors(50);
  std::vector<std::thread> threads;
  for (int i = 0; i < 50; ++i)
    threads.emplace_back([&, i] {
      auto keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
      char name[16];
      std::snprintf(name, sizeof(name), "race-%02d", i);
      auto m = gate_client::connect(loopback(port_), agent_hello(name, token), 10s,
                                    machine_credentials(keys));
      if (m)
        ++ok;
      else if (contains(render_error(m.error()), "ENROLLMENT_USED"))
        ++used;
      else
        errors[i] = render_error(m.error());
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(used.load(), 49);
  for (auto& e : errors)
    EXPECT_TRUE(e.empty()) << e;
  EXPECT_EQ(list_machines(port_)->size(), 2u) << "the real one and the winner";

  // An expired token: none.
  auto stale = join_token(1);
  std::this_thread::sleep_for(1200ms);
  std::atomic<int> late_ok{0}, expired{0};
  threads.clear();
  for (int i = 0; i < 10; ++i)
    threads.emplace_back([&, i] {
      auto keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
      auto m = gate_client::connect(loopback(port_),
                                    agent_hello("late-" + std::to_string(i), stale), 10s,
                                    machine_credentials(keys));
      if (m)
        ++late_ok;
      else if (contains(render_error(m.error()), "expired"))
        ++expired;
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(late_ok.load(), 0);
  EXPECT_EQ(expired.load(), 10);
  // No token at all: enrolment required.
  auto none = gate_client::connect(
    loopback(port_), agent_hello("no-token"), 3s,
    machine_credentials(std::make_shared<const identity_keypair>(identity_keypair::generate())));
  ASSERT_FALSE(none);
  EXPECT_TRUE(contains(render_error(none.error()), "not enrolled"))
    << render_error(none.error());
  expect_still_serving();
}

// -- 4. replayed handshakes and signatures ----------------------------------------

TEST_F(Security, AHandshakeOrSignatureFromAnotherSessionIsRefused) {
  auto keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
  // Machine m-2 enrols; its session is recorded byte for byte.
  std::string recorded;
  {
    channel_client c{keys, owner_credentials(port_).pinned};
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    recorded = c.start();
    auto step = open_channel(s, c, recorded);
    ASSERT_TRUE(step) << render_error(step.error());
    v1::Frame f;
    *f.mutable_hello() = agent_hello("m-2", join_token());
    auto rest = step->reply + c.encode(f);
    ASSERT_TRUE(s.send_bytes(rest));
    recorded += rest;
    ASSERT_TRUE(wait_until([&] { return get_machine(port_, "m-2").has_value(); }, 3s));
  }
  // The whole session replayed: the gate's ephemeral key differs, the
  // sealed auth does not open, the connection is closed.
  {
    raw_socket s{port_};
    ASSERT_TRUE(s.send_bytes(recorded));
    EXPECT_TRUE(s.wait_closed(3s));
    for (const auto& f : s.frames())
      EXPECT_FALSE(f.has_welcome());
  }
  EXPECT_TRUE(wait_until([&] { return contains(ctl_->err(), "did not open"); }, 2s))
    << "the replay is not logged";
  // m-2's key with a signature m-2 made for another transcript.
  {
    test::forged_client c;
    raw_socket s{port_};
    ASSERT_TRUE(s.send_bytes(c.hello()));
    uint32_t len = 0;
    ASSERT_TRUE(wait_until(
      [&] {
        s.wait_closed(20ms);
        auto n = s.received.size() >= 4 ? decode_frame_length(s.received.data(), 1 << 20)
                                        : caf::expected<uint32_t>{0u};
        len = n ? *n : 0;
        return len > 0 && s.received.size() >= 4 + len;
      },
      2s));
    auto sealed = c.on_accept(s.received.data() + 4, len);
    ASSERT_TRUE(sealed);
    v1::Frame hello;
    *hello.mutable_hello() = agent_hello("m-2");
    auto auth = test::forged_client::auth(keys->public_bytes,
                                          test::forged_client::foreign_signature(*keys));
    s.received.clear();
    auto bytes = sealed->seal_frame(auth); // record 0, then record 1
    bytes += sealed->seal_frame(hello);
    ASSERT_TRUE(s.send_bytes(bytes));
    EXPECT_TRUE(s.wait_closed(3s));
  }
  EXPECT_TRUE(contains(ctl_->err(), "does not verify")) << "not logged";
  // Another machine's key for m-2's name: refused as another identity.
  auto impostor = gate_client::connect(
    loopback(port_), agent_hello("m-2", join_token()), 3s,
    machine_credentials(std::make_shared<const identity_keypair>(identity_keypair::generate())));
  ASSERT_FALSE(impostor);
  EXPECT_TRUE(contains(render_error(impostor.error()), "another machine identity"))
    << render_error(impostor.error());
  // m-2 itself still gets in with its identity alone.
  EXPECT_TRUE(gate_client::connect(loopback(port_), agent_hello("m-2"), 3s,
                                   machine_credentials(keys)));
  expect_still_serving();
}

// -- 5. roles -----------------------------------------------------------------------

TEST_F(Security, AdminCallsAreRefusedWithoutAnAdminToken) {
  std::string revoked_id;
  auto member = api_token("bob", "member");
  auto expiring = api_token("carol", "admin", 1);
  auto revoked = api_token("dave", "admin", 0, &revoked_id);
  auto admin = api_token("alice", "admin");
  v1::Request revoke;
  revoke.mutable_revoke_api_token()->set_id(revoked_id);
  ASSERT_TRUE(gate_call(port_, revoke));
  std::this_thread::sleep_for(1100ms); // carol's token expires

  auto token_file = [&](const std::string& name, const std::string& token) {
    auto path = dir_ / ("token-" + name);
    write_text(path, token + "\n");
    return path.string();
  };
  auto astra = [&](const std::string& file, std::vector<std::string> args) {
    std::vector<std::string> argv{program("astra"), "--addr", addr()};
    if (!file.empty()) {
      argv.push_back("--token-file");
      argv.push_back(file);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path());
  };
  std::vector<std::vector<std::string>> admin_calls = {
    {"cordon", "gpu-01"},
    {"maintenance", "gpu-01", "on"},
    {"gpu", "clear-fault", "gpu-01", "GPU-00000000-0000-0000-0000-000000000000"},
    {"tokens", "create", "--pool", "h100"},
  };
  struct caller {
    std::string who, file, says;
  };
  // No token at all: astra would find none (HOME points nowhere useful).
  std::vector<caller> callers = {
    {"member", token_file("member", member), "only owners and admins"},
    {"expired", token_file("expired", expiring), "expired"},
    {"revoked", token_file("revoked", revoked), "revoked"},
    // An empty token file is refused before anything is sent (exit 2).
    {"none", token_file("none", ""), "is empty; nothing was sent"},
  };
  for (const auto& c : callers)
    for (const auto& call : admin_calls) {
      auto res = astra(c.file, call);
      EXPECT_NE(res.rc, 0) << c.who << " " << call[0] << ": " << res.out;
      EXPECT_TRUE(contains(res.err, c.says))
        << c.who << " " << call[0] << ": " << res.err;
    }
  auto m = get_machine(port_, "gpu-01");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->cordoned());
  EXPECT_EQ(m->state(), v1::Machine::Up);
  // A member may read.
  auto ls = astra(token_file("member2", member), {"machines"});
  EXPECT_EQ(ls.rc, 0) << ls.err;
  // An admin may act, and each admin action is audited: who, what, result.
  auto admin_file = token_file("admin", admin);
  auto res = astra(admin_file, {"cordon", "gpu-01"});
  EXPECT_EQ(res.rc, 0) << res.err;
  res = astra(admin_file, {"uncordon", "gpu-01"});
  EXPECT_EQ(res.rc, 0) << res.err;
  res = astra(admin_file, {"audit", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  auto doc = json::parse(res.out);
  bool alice_cordon = false, bob_refused = false;
  for (const auto& r : doc.value("records", json::array())) {
    auto who = r.value("who", "");
    if (contains(who, "alice") && r.value("action", "") == "cordon"
        && r.value("result", "") == "ok" && r.value("unix_ms", "0") != "0")
      alice_cordon = true;
    if (contains(who, "bob") && contains(r.value("result", ""), "refused"))
      bob_refused = true;
  }
  EXPECT_TRUE(alice_cordon) << res.out;
  EXPECT_TRUE(bob_refused) << res.out;
  // A member cannot read the audit log either.
  res = astra(token_file("member3", member), {"audit"});
  EXPECT_NE(res.rc, 0);
  // An admin may not revoke an owner's token, as it may not create one (a
  // fifth new-user trial revoked one); an admin's token it may.
  std::string owner_id, admin2_id;
  auto owner2 = api_token("olivia", "owner", 0, &owner_id);
  api_token("erin", "admin", 0, &admin2_id);
  res = astra(admin_file, {"api-tokens", "revoke", owner_id});
  EXPECT_EQ(res.rc, 1) << res.out;
  EXPECT_TRUE(contains(res.err, "only an owner may revoke an owner token")) << res.err;
  EXPECT_EQ(astra(token_file("owner2", owner2), {"whoami"}).rc, 0) << "still valid";
  res = astra(admin_file, {"api-tokens", "revoke", admin2_id});
  EXPECT_EQ(res.rc, 0) << res.err;
  expect_still_serving();
}

} // namespace
