#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "messages/error.hpp"
#include "runtime/process/config.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

using env_t = std::map<std::string, std::string>;
using flags_t = std::vector<std::pair<std::string, std::string>>;

/// A config file with `text` under the test temp dir, removed at the end.
struct temp_file {
  std::string path;

  explicit temp_file(const std::string& text) {
    std::string pattern = testing::TempDir() + "astraeus-config-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr)
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    dir = pattern;
    path = dir + "/controller.yaml";
    std::ofstream{path} << text;
  }

  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  std::string dir;
};

std::string source(const std::string& relative) {
  return std::string{ASTRAEUS_SOURCE_DIR} + "/" + relative;
}

std::string read(const std::string& path) {
  std::ifstream in{path};
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

/// The keys named in a `describe_*_keys` text (each entry's first word).
std::vector<std::string> described_keys(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != ' ')
      out.push_back(line.substr(0, line.find(' ')));
  return out;
}

/// Expects `err` to be invalid_config and its text to contain every part.
void expect_error(const caf::error& err,
                  std::initializer_list<std::string> parts) {
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_EQ(err, ec::invalid_config);
  auto text = render_error(err);
  for (auto& part : parts)
    EXPECT_NE(text.find(part), std::string::npos)
      << "missing \"" << part << "\" in: " << text;
}

} // namespace

TEST(Config, ShippedControllerFileEqualsTheDefaults) {
  auto path = source("config/controller.yaml");
  auto cfg = load_controller_config(path, {}, {});
  ASSERT_TRUE(cfg) << render_error(cfg.error());
  ControllerConfig defaults;
  defaults.data_dir = default_data_dir("controller");
  defaults.keys_dir = defaults.data_dir + "-keys";
  EXPECT_EQ(render_config(*cfg), render_config(defaults));
  EXPECT_EQ(cfg->heartbeat_lapse, 60s);
  EXPECT_EQ(cfg->frame_cap_bytes, 1u << 20);
  EXPECT_EQ(cfg->memory_available_min_bytes, 100ull << 20);
  // Every key is written in the shipped file (store.path commented out).
  auto text = read(path);
  for (auto& key : described_keys(describe_controller_keys())) {
    auto leaf = key.substr(key.rfind('.') + 1) + ":";
    EXPECT_NE(text.find(leaf), std::string::npos) << key;
  }
}

TEST(Config, ShippedAgentFileEqualsTheDefaults) {
  auto path = source("config/agent.yaml");
  auto cfg = load_agent_config(path, {}, {});
  ASSERT_TRUE(cfg) << render_error(cfg.error());
  AgentConfig defaults;
  defaults.data_dir = default_data_dir("agent");
  EXPECT_EQ(render_config(*cfg), render_config(defaults));
  EXPECT_EQ(cfg->reconnect_min, 500ms);
  EXPECT_EQ(cfg->host_root, "/");
  auto text = read(path);
  for (auto& key : described_keys(describe_agent_keys())) {
    auto leaf = key.substr(key.rfind('.') + 1) + ":";
    EXPECT_NE(text.find(leaf), std::string::npos) << key;
  }
}

TEST(Config, RenderedConfigLoadsBackUnchanged) {
  ControllerConfig cfg;
  cfg.listen_address = "10.0.0.1";
  cfg.data_dir = "/srv/a \"quoted\" dir";
  cfg.keys_dir = "/srv/keys";
  cfg.heartbeat_lapse = 1500ms;
  cfg.heartbeat_report_interval = 500ms;  // a third of the lapse at most (issue 18)
  cfg.frame_cap_bytes = 3000;
  cfg.memory_psi_full_avg10_max = 33.3;
  cfg.log_file = "";
  temp_file f{render_config(cfg)};
  auto back = load_controller_config(f.path, {}, {});
  ASSERT_TRUE(back) << render_error(back.error());
  EXPECT_EQ(render_config(*back), render_config(cfg));
}

TEST(Config, EnvironmentBeatsFileAndFlagsBeatEnvironment) {
  temp_file f{"heartbeat:\n  lapse: 45s\nlisten:\n  port: 9000\n"};
  auto from_env = load_controller_config(
    f.path, env_t{{"ASTRAEUS_HEARTBEAT_LAPSE", "30s"}}, {});
  ASSERT_TRUE(from_env) << render_error(from_env.error());
  EXPECT_EQ(from_env->heartbeat_lapse, 30s);
  EXPECT_EQ(from_env->listen_port, 9000);
  auto from_flag = load_controller_config(
    f.path, env_t{{"ASTRAEUS_HEARTBEAT_LAPSE", "30s"}},
    flags_t{{"heartbeat.lapse", "2m"}, {"listen.port", "9001"}});
  ASSERT_TRUE(from_flag) << render_error(from_flag.error());
  EXPECT_EQ(from_flag->heartbeat_lapse, 2min);
  EXPECT_EQ(from_flag->listen_port, 9001);
  // 0 picks a free port when the gate binds (astraeus dev --port 0).
  auto any_port = load_controller_config(std::nullopt, {}, flags_t{{"listen.port", "0"}});
  ASSERT_TRUE(any_port) << render_error(any_port.error());
  EXPECT_EQ(any_port->listen_port, 0);
  // The environment works without a file, too.
  auto no_file = load_agent_config(
    std::nullopt, env_t{{"ASTRAEUS_MACHINE_NAME", "gpu-09"}}, {});
  ASSERT_TRUE(no_file) << render_error(no_file.error());
  EXPECT_EQ(no_file->name, "gpu-09");
}

TEST(Config, OtherAstraeusVariablesAreIgnored) {
  auto cfg = load_controller_config(
    std::nullopt,
    env_t{{"ASTRAEUS_ADDR", "10.0.0.1:7450"},
          {"ASTRAEUS_TOKEN", "secret"},
          {"ASTRAEUS_NODE_NAME", "gpu-01"}},
    {});
  ASSERT_TRUE(cfg) << render_error(cfg.error());
  EXPECT_EQ(cfg->listen_address, "0.0.0.0");
}

TEST(Config, UnknownKeyInFileNamesKeyAndFile) {
  temp_file f{"heartbeat:\n  lapsee: 30s\n"};
  auto cfg = load_controller_config(f.path, {}, {});
  ASSERT_FALSE(cfg);
  expect_error(cfg.error(), {f.path, "heartbeat.lapsee", "line 2",
                             "did you mean heartbeat.lapse"});
  temp_file top{"nonsense: 1\n"};
  auto cfg2 = load_controller_config(top.path, {}, {});
  ASSERT_FALSE(cfg2);
  expect_error(cfg2.error(), {top.path, "\"nonsense\""});
  // A section given a scalar is no key either.
  temp_file section{"heartbeat: 30s\n"};
  auto cfg3 = load_controller_config(section.path, {}, {});
  ASSERT_FALSE(cfg3);
  expect_error(cfg3.error(), {section.path, "\"heartbeat\"", "heartbeat.lapse"});
}

TEST(Config, UnknownFlagKeyIsAnError) {
  auto cfg = load_agent_config(std::nullopt, {}, flags_t{{"listen.port", "1"}});
  ASSERT_FALSE(cfg);
  expect_error(cfg.error(), {"command line", "listen.port"});
}

TEST(Config, BadValuesNameKeyValueAndWhatWasExpected) {
  temp_file f{"heartbeat:\n  lapse: sixty\n"};
  auto d = load_controller_config(f.path, {}, {});
  ASSERT_FALSE(d);
  EXPECT_EQ(render_error(d.error()),
            "config " + f.path
              + ": heartbeat.lapse: \"sixty\" is not a duration (use 60s, "
                "500ms, 2m)");
  auto size = load_controller_config(std::nullopt, {},
                                     flags_t{{"gate.frame_cap", "lots"}});
  ASSERT_FALSE(size);
  expect_error(size.error(), {"gate.frame_cap", "\"lots\"", "byte size"});
  auto big = load_controller_config(std::nullopt, {},
                                    flags_t{{"gate.frame_cap", "65MiB"}});
  ASSERT_FALSE(big);
  expect_error(big.error(), {"gate.frame_cap", "\"65MiB\"", "1KiB to 64MiB"});
  auto port = load_agent_config(
    std::nullopt, env_t{{"ASTRAEUS_CONTROLLER_PORT", "70000"}}, {});
  ASSERT_FALSE(port);
  expect_error(port.error(), {"ASTRAEUS_CONTROLLER_PORT", "controller.port",
                              "\"70000\"", "1 to 65535"});
  auto short_lapse = load_controller_config(
    std::nullopt, {}, flags_t{{"heartbeat.lapse", "50ms"}});
  ASSERT_FALSE(short_lapse);
  expect_error(short_lapse.error(), {"heartbeat.lapse", "\"50ms\"", "100ms"});
  auto pct = load_controller_config(
    std::nullopt, {}, flags_t{{"pressure.disk_free_min_percent", "120"}});
  ASSERT_FALSE(pct);
  expect_error(pct.error(), {"pressure.disk_free_min_percent", "\"120\"",
                             "0 to 100"});
  auto level = load_controller_config(std::nullopt, {},
                                      flags_t{{"log.level", "loud"}});
  ASSERT_FALSE(level);
  expect_error(level.error(), {"log.level", "\"loud\"", "trace"});
  temp_file list{"listen:\n  port: [1, 2]\n"};
  auto l = load_controller_config(list.path, {}, {});
  ASSERT_FALSE(l);
  expect_error(l.error(), {list.path, "listen.port", "list"});
}

TEST(Config, ValueSyntax) {
  auto cfg = load_controller_config(
    std::nullopt, {},
    flags_t{{"heartbeat.lapse", "90"},
            {"gate.hello_timeout", "1h"},
            {"gate.request_timeout", "500ms"},
            {"gate.frame_cap", "512KiB"},
            {"pressure.memory_available_min", "1GB"},
            {"pressure.memory_available_min_percent", "7.5%"},
            {"log.level", "DEBUG"}});
  ASSERT_TRUE(cfg) << render_error(cfg.error());
  EXPECT_EQ(cfg->heartbeat_lapse, 90s);
  EXPECT_EQ(cfg->hello_timeout, 1h);
  EXPECT_EQ(cfg->request_timeout, 500ms);
  EXPECT_EQ(cfg->frame_cap_bytes, 512u * 1024);
  EXPECT_EQ(cfg->memory_available_min_bytes, 1000000000u);
  EXPECT_DOUBLE_EQ(cfg->memory_available_min_percent, 7.5);
  EXPECT_EQ(cfg->log_level, "debug");
  auto bytes = load_controller_config(
    std::nullopt, {}, flags_t{{"pressure.memory_available_min", "4096"}});
  ASSERT_TRUE(bytes);
  EXPECT_EQ(bytes->memory_available_min_bytes, 4096u);
}

TEST(Config, YamlSyntaxErrorNamesFileAndLine) {
  temp_file f{"listen:\n  port: 7450\n  address: [unclosed\n"};
  auto cfg = load_controller_config(f.path, {}, {});
  ASSERT_FALSE(cfg);
  expect_error(cfg.error(), {f.path, "line ", "column "});
  temp_file g{"listen:\n  port: 7450\n bad indent: x\n"};
  auto cfg2 = load_controller_config(g.path, {}, {});
  ASSERT_FALSE(cfg2);
  expect_error(cfg2.error(), {g.path, "line 3"});
}

TEST(Config, CrossFieldCheckNamesBothKeys) {
  auto cfg = load_agent_config(std::nullopt,
                               env_t{{"ASTRAEUS_RECONNECT_MAX_BACKOFF", "100ms"}},
                               {});
  ASSERT_FALSE(cfg);
  expect_error(cfg.error(), {"reconnect.max_backoff", "reconnect.min_backoff",
                             "100ms", "500ms", "ASTRAEUS_RECONNECT_MAX_BACKOFF"});
  auto ok = load_agent_config(std::nullopt, {},
                              flags_t{{"reconnect.min_backoff", "100ms"},
                                      {"reconnect.max_backoff", "100ms"}});
  EXPECT_TRUE(ok) << render_error(ok.error());
}

TEST(Config, EmptyFileGivesTheDefaults) {
  temp_file f{""};
  auto cfg = load_controller_config(f.path, {}, {});
  ASSERT_TRUE(cfg) << render_error(cfg.error());
  ControllerConfig defaults;
  defaults.data_dir = default_data_dir("controller");
  defaults.keys_dir = defaults.data_dir + "-keys";
  EXPECT_EQ(render_config(*cfg), render_config(defaults));
  temp_file comments{"# nothing here\n\nstore:\n  # path: /x\n"};
  auto cfg2 = load_controller_config(comments.path, {}, {});
  ASSERT_TRUE(cfg2) << render_error(cfg2.error());
}

TEST(Config, MissingExplicitFileIsAnErrorNamingThePath) {
  auto path = testing::TempDir() + "astraeus-no-such-dir/controller.yaml";
  auto cfg = load_controller_config(path, {}, {});
  ASSERT_FALSE(cfg);
  expect_error(cfg.error(), {path});
}

TEST(Config, DataDirDefaultsAndOverrides) {
  auto cfg = load_agent_config(std::nullopt, {}, flags_t{{"data.path", "/d"}});
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->data_dir, "/d");
  auto dflt = load_agent_config(std::nullopt, {}, {});
  ASSERT_TRUE(dflt);
  EXPECT_EQ(dflt->data_dir, default_data_dir("agent"));
  auto dir = default_data_dir("agent");
  EXPECT_NE(dir.find("astraeus/agent"), std::string::npos) << dir;
}

TEST(Config, EnvironmentVariablesOfKeysAreDistinct) {
  for (auto text : {describe_controller_keys(), describe_agent_keys()}) {
    std::set<std::string> seen;
    auto keys = described_keys(text);
    EXPECT_GE(keys.size(), 11u);
    for (auto& key : keys) {
      std::string var;
      for (auto c : key)
        var += c == '.' ? '_' : static_cast<char>(std::toupper(c));
      EXPECT_TRUE(seen.insert(var).second) << key;
      EXPECT_NE(text.find("env ASTRAEUS_" + var), std::string::npos) << key;
    }
  }
}

TEST(Config, EnvironmentMapReadsTheProcessEnvironment) {
  setenv("ASTRAEUS_CONFIG_TEST_VAR", "a=b", 1);
  auto env = environment_map();
  EXPECT_EQ(env["ASTRAEUS_CONFIG_TEST_VAR"], "a=b");
  unsetenv("ASTRAEUS_CONFIG_TEST_VAR");
}

TEST(Config, WorkerLogCapIsAByteSizeNamedWhenOutOfRange) {
  auto dflt = load_agent_config(std::nullopt, {}, {});
  ASSERT_TRUE(dflt) << render_error(dflt.error());
  EXPECT_EQ(dflt->worker_log_max_bytes, 64ull << 20) << "64 MiB by default";
  auto set = load_agent_config(std::nullopt, env_t{{"ASTRAEUS_WORKERS_LOG_MAX_BYTES", "1GiB"}},
                               {});
  ASSERT_TRUE(set) << render_error(set.error());
  EXPECT_EQ(set->worker_log_max_bytes, 1ull << 30);
  auto small = load_agent_config(std::nullopt, {}, flags_t{{"workers.log_max_bytes", "4KB"}});
  ASSERT_FALSE(small);
  expect_error(small.error(), {"workers.log_max_bytes", "\"4KB\"", "4KiB to 1TiB"});
}

// Issue 18, rule 10: a lapse shorter than 3 report intervals makes machines
// flap; refused naming both keys.
TEST(Config, AHeartbeatLapseUnderThreeReportIntervalsIsRefusedNamingBothKeys) {
  auto cfg = load_controller_config(std::nullopt, {}, flags_t{{"heartbeat.lapse", "10s"}});
  ASSERT_FALSE(cfg);
  expect_error(cfg.error(), {"heartbeat.lapse 10s", "heartbeat.report_interval 10s",
                             "at least 3 times", "flap"});
  auto ok = load_controller_config(
    std::nullopt, {},
    flags_t{{"heartbeat.lapse", "10s"}, {"heartbeat.report_interval", "3s"}});
  ASSERT_TRUE(ok) << render_error(ok.error());
  EXPECT_EQ(ok->heartbeat_report_interval, 3s);
  EXPECT_FALSE(check_heartbeat(60s, "default", 20s, "report.interval", "default"));
  auto dev = check_heartbeat(10s, "the controller's settings", 10s, "report.interval",
                             "the agent's settings");
  ASSERT_TRUE(dev);
  expect_error(dev, {"heartbeat.lapse", "report.interval"});
}

// A user trial: `store.etcd.endpoints=127.0.0.1:abc` or `A,,B` reached etcd
// and failed there as "no endpoint answered (…: Connection)"; the list is
// now checked when read, naming the item.
TEST(Config, AnEtcdEndpointThatIsNotHostPortIsNamed) {
  auto with = [](const std::string& list) {
    return load_controller_config(
      std::nullopt, {}, flags_t{{"store.backend", "etcd"}, {"store.etcd.endpoints", list}});
  };
  auto good = with("10.0.0.1:2379,etcd-2:2379,[::1]:2379");
  ASSERT_TRUE(good) << render_error(good.error());
  struct bad_case {
    const char* list;
    const char* says;
  };
  for (auto c : {bad_case{"127.0.0.1:abc", "item 1 '127.0.0.1:abc' is not HOST:PORT"},
                 bad_case{"10.0.0.1:2379,,10.0.0.2:2379", "item 2 is empty"},
                 bad_case{"foo", "item 1 'foo' is not HOST:PORT"},
                 bad_case{"10.0.0.1:2379,10.0.0.2:70000", "item 2 '10.0.0.2:70000'"},
                 bad_case{":2379", "item 1 ':2379'"}}) {
    auto cfg = with(c.list);
    ASSERT_FALSE(cfg) << c.list;
    auto text = render_error(cfg.error());
    EXPECT_NE(text.find(c.says), std::string::npos) << text;
    EXPECT_NE(text.find("store.etcd.endpoints"), std::string::npos) << text;
  }
}
