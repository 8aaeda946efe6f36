// HA mode's leader election and write fencing (store/leader_election.hpp)
// on a real single-member etcd: one leader at a time, a standby takes over
// when the leader's lease ends, and a deposed leader writes nothing.

#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "integration/store/etcd_cluster.hpp"
#include "store/leader_election.hpp"

namespace astraeus::itest {
namespace {

class LeaderElection : public ::testing::Test {
protected:
  void SetUp() override {
    etcd_ = std::make_unique<etcd_cluster>(dir_.path(), 1);
    ASSERT_TRUE(etcd_->wait_ready(10s)) << "etcd did not start";
  }

  void TearDown() override {
    etcd_->dump(HasFailure());
  }

  std::shared_ptr<etcd_store> open_store() {
    etcd_options opts;
    opts.endpoints = etcd_->endpoints();
    opts.prefix = "/astraeus/election/";
    auto st = etcd_store::open(opts);
    EXPECT_TRUE(st) << render_error(st.error());
    return std::shared_ptr<etcd_store>{std::move(*st)};
  }

  election_config candidate(std::shared_ptr<etcd_store> st, const std::string& id) {
    election_config c;
    c.store = std::move(st);
    c.id = id;
    c.api_url = "http://" + id;
    c.gate = id;
    c.ttl = std::chrono::seconds{2};
    c.poll = 50ms;
    return c;
  }

  temp_dir dir_{"astraeus-election"};
  std::unique_ptr<etcd_cluster> etcd_;
};

TEST_F(LeaderElection, OneLeaderAndAFencedHandover) {
  auto sa = open_store();
  auto sb = open_store();
  leader_election a{candidate(sa, "a:1")};
  leader_election b{candidate(sb, "b:1")};
  auto won = a.campaign([] { return false; });
  ASSERT_TRUE(won && *won);
  ASSERT_FALSE(sa->put_raw(family::runs, "r1", "by a"));
  // B stands by and sees A lead.
  std::atomic<bool> stop{false};
  std::promise<std::string> first_seen;
  std::atomic<bool> told{false};
  auto b_done = std::async(std::launch::async, [&] {
    return b.campaign([&] { return stop.load(); },
                      [&](const std::optional<leader_info>& l) {
                        if (l && !told.exchange(true))
                          first_seen.set_value(l->id);
                      });
  });
  auto seen = first_seen.get_future();
  ASSERT_EQ(seen.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(seen.get(), "a:1");
  // A resigns: B leads at once, and A's writes are fenced out.
  auto t0 = steady::now();
  ASSERT_FALSE(a.resign());
  ASSERT_EQ(b_done.wait_for(5s), std::future_status::ready);
  auto b_won = b_done.get();
  ASSERT_TRUE(b_won && *b_won);
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_FALSE(sb->put_raw(family::runs, "r2", "by b"));
  auto refused = sa->put_raw(family::runs, "r3", "by a, deposed");
  ASSERT_TRUE(refused);
  EXPECT_NE(render_error(refused).find("not the leader"), std::string::npos)
    << render_error(refused);
  std::vector<Store::change> batch = {{family::runs, "r4", std::string{"x"}}};
  EXPECT_TRUE(sa->write(batch));
  EXPECT_FALSE(*sb->get_raw(family::runs, "r3"));
  EXPECT_FALSE(*sb->get_raw(family::runs, "r4"));
  EXPECT_TRUE(*sb->get_raw(family::runs, "r2"));
  EXPECT_EQ(b.self()->id, "b:1");
}

TEST_F(LeaderElection, AStalledLeaderIsDeposedAndTold) {
  auto sa = open_store();
  auto sb = open_store();
  leader_election a{candidate(sa, "a:1")};
  leader_election b{candidate(sb, "b:1")};
  ASSERT_TRUE(*a.campaign([] { return false; }));
  // A stops renewing (as if SIGSTOPped): B leads within TTL and a little.
  auto t0 = steady::now();
  auto b_won = b.campaign([&] { return seconds_since(t0) > 6; });
  ASSERT_TRUE(b_won && *b_won);
  auto took = seconds_since(t0);
  EXPECT_GE(took, 1.0);
  EXPECT_LT(took, 4.0);
  // A resumes: its write is rejected, and its renewal says it lost.
  auto refused = sa->put_raw(family::runs, "late", "by a");
  ASSERT_TRUE(refused);
  EXPECT_NE(render_error(refused).find("not the leader"), std::string::npos)
    << render_error(refused);
  std::promise<std::string> lost;
  a.keep_leading([&](const std::string& why) { lost.set_value(why); });
  auto why = lost.get_future();
  ASSERT_EQ(why.wait_for(5s), std::future_status::ready);
  EXPECT_NE(why.get().find("expired"), std::string::npos);
  EXPECT_FALSE(*sb->get_raw(family::runs, "late"));
}

} // namespace
} // namespace astraeus::itest
