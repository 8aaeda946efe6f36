// The agent keeps its name and identity in its data folder, so that a
// restarted or reinstalled agent is the same machine (issue: walking skeleton).

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "actor_fixture.hpp"
#include "actors/agent/agent.hpp"
#include "actors/controller/controller.hpp"

using namespace astraeus;

TEST(AgentIdentity, IsCreatedOnceAndKept) {
  test::temp_dir dir;
  auto data = dir.path() + "/agent";
  auto first = load_or_create_identity(data, "", "host-a");
  ASSERT_TRUE(first) << render_error(first.error());
  EXPECT_EQ(first->name, "host-a");
  EXPECT_EQ(first->machine_id.size(), 32u);
  struct stat st{};
  ASSERT_EQ(::stat((data + "/machine-id").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the identity is private";
  // A restart on a host whose hostname changed keeps the stored name.
  auto again = load_or_create_identity(data, "", "host-renamed");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->machine_id, first->machine_id);
  EXPECT_EQ(again->name, "host-a");
}

TEST(AgentIdentity, AnExplicitNameWinsAndIsKept) {
  test::temp_dir dir;
  auto one = load_or_create_identity(dir.path(), "gpu-01", "host-a");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->name, "gpu-01");
  auto two = load_or_create_identity(dir.path(), "", "host-a");
  ASSERT_TRUE(two);
  EXPECT_EQ(two->name, "gpu-01");
  EXPECT_EQ(two->machine_id, one->machine_id);
}

TEST(AgentIdentity, ABrokenMachineIdIsAnErrorNamingTheFile) {
  test::temp_dir dir;
  std::ofstream{dir.path() + "/machine-id"} << "not-an-id\n";
  auto id = load_or_create_identity(dir.path(), "", "host-a");
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error(), ec::invalid_config);
  EXPECT_NE(render_error(id.error()).find(dir.path() + "/machine-id"),
            std::string::npos);
}

TEST(AgentIdentity, AnUnwritableFolderIsAnErrorNamingIt) {
  auto id = load_or_create_identity("/proc/astraeus-cannot-exist", "", "h");
  ASSERT_FALSE(id);
  EXPECT_NE(render_error(id.error()).find("/proc/astraeus-cannot-exist"),
            std::string::npos);
}

TEST(AgentReport, CarriesTheNameSequenceAndHostFacts) {
  agent_config cfg;
  cfg.identity = {"gpu-01", std::string(32, 'a')};
  cfg.host.root = std::string{ASTRAEUS_FIXTURES} + "/hosts/dgx-h100";
  auto report = make_report(cfg, 7);
  EXPECT_EQ(report.machine(), "gpu-01");
  EXPECT_EQ(report.sequence(), 7u);
  EXPECT_EQ(report.facts().cpu().logical_cpus(), 224u);
  EXPECT_GT(report.sent_unix_ms(), 0);
}

// A name the controller would refuse for good stops the agent at start,
// with the reason, instead of reconnecting forever.
class AgentStart : public test::actor_test {};

TEST_F(AgentStart, AnInvalidMachineNameIsRefusedAtStart) {
  test::temp_dir dir;
  AgentConfig cfg;
  cfg.data_dir = dir.path();
  cfg.name = "bad name";
  cfg.kmsg_path.clear();
  auto agent = start_agent(sys, cfg);
  ASSERT_FALSE(agent);
  EXPECT_EQ(agent.error(), ec::invalid_config);
  EXPECT_NE(render_error(agent.error()).find("'bad name' is not a valid machine name"),
            std::string::npos)
    << render_error(agent.error());
}
