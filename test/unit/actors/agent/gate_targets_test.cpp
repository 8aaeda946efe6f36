// Which gate an agent connects to next (HA mode, issue 15): the gates it was
// given, the leader a standby names, and when to try again. Plain logic, no
// actor system. Source: actors/agent/gate_targets.hpp.

#include <gtest/gtest.h>

#include "actors/agent/gate_targets.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

const gate_target s1{"10.0.0.1", 7450};
const gate_target s2{"10.0.0.2", 7450};
const gate_target s3{"10.0.0.3", 7450};

} // namespace

TEST(GateTargets, OneGateThatFailsBacksOffAsBefore) {
  gate_targets t{{s1}};
  EXPECT_EQ(t.target(), s1);
  EXPECT_EQ(t.failed(), retry_when::back_off);
  EXPECT_EQ(t.target(), s1);
  EXPECT_EQ(t.failed(), retry_when::back_off);
}

TEST(GateTargets, EveryGivenGateIsTriedAtOnceBeforeBackOff) {
  gate_targets t{{s1, s2, s3}};
  EXPECT_EQ(t.failed(), retry_when::at_once);
  EXPECT_EQ(t.target(), s2);
  EXPECT_EQ(t.failed(), retry_when::at_once);
  EXPECT_EQ(t.target(), s3);
  EXPECT_EQ(t.failed(), retry_when::back_off);
  EXPECT_EQ(t.target(), s1);
}

TEST(GateTargets, AStandbyOnlyGivenSendsTheAgentToTheLeaderItNames) {
  gate_targets t{{s1}};
  EXPECT_EQ(t.not_leader(s3), retry_when::at_once);
  EXPECT_TRUE(t.following());
  EXPECT_EQ(t.target(), s3);
  t.welcomed();
  // The leader goes away: the agent tries it again at once, then asks the
  // standby again.
  EXPECT_EQ(t.lost(), retry_when::at_once);
  EXPECT_EQ(t.target(), s3);
  EXPECT_EQ(t.failed(), retry_when::at_once);
  EXPECT_FALSE(t.following());
  EXPECT_EQ(t.target(), s1);
  // Until its lease runs out the standby names the dead leader: a pause,
  // not a loop.
  EXPECT_EQ(t.not_leader(s3), retry_when::soon);
  EXPECT_EQ(t.target(), s1);
  EXPECT_EQ(t.soon_delay(15000ms), 250ms);
  // After the pause the dead leader is tried once more, then a pause again.
  EXPECT_EQ(t.not_leader(s3), retry_when::at_once);
  EXPECT_EQ(t.failed(), retry_when::at_once);
  EXPECT_EQ(t.not_leader(s3), retry_when::soon);
  // The new leader is followed at once.
  EXPECT_EQ(t.not_leader(s2), retry_when::at_once);
  EXPECT_EQ(t.target(), s2);
  t.welcomed();
  EXPECT_EQ(t.soon_delay(15000ms), 250ms);
}

TEST(GateTargets, WhileNoneLeadsTheAgentAsksAgainShortly) {
  gate_targets t{{s1}};
  EXPECT_EQ(t.no_leader(), retry_when::soon);
  EXPECT_EQ(t.target(), s1);
  gate_targets three{{s1, s2, s3}};
  // The others may know better (a standby cut off from etcd); after all
  // said none leads, a pause.
  EXPECT_EQ(three.no_leader(), retry_when::at_once);
  EXPECT_EQ(three.target(), s2);
  EXPECT_EQ(three.failed(), retry_when::at_once);
  EXPECT_EQ(three.target(), s3);
  EXPECT_EQ(three.failed(), retry_when::soon) << "a standby answered this round";
}

TEST(GateTargets, ALeaderThatSaysNoneLeadsYetIsAskedAgainAfterAPause) {
  gate_targets t{{s1, s2}};
  EXPECT_EQ(t.not_leader(s3), retry_when::at_once);
  EXPECT_EQ(t.no_leader(), retry_when::soon);
  EXPECT_FALSE(t.following());
}

TEST(GateTargets, RedirectsInARowAreBoundedByAPause) {
  gate_targets t{{s1}};
  // Standbys that name each other (a stale view) cannot make a loop.
  EXPECT_EQ(t.not_leader(s2), retry_when::at_once);
  EXPECT_EQ(t.not_leader(s3), retry_when::at_once);
  EXPECT_EQ(t.not_leader(s2), retry_when::at_once);
  EXPECT_EQ(t.not_leader(s3), retry_when::soon);
  EXPECT_EQ(t.target(), s1);
}

TEST(GateTargets, AGivenLeaderThatDiedIsNotFollowedBackWithoutAPause) {
  gate_targets t{{s1, s2, s3}};
  t.welcomed();
  EXPECT_EQ(t.lost(), retry_when::at_once);
  EXPECT_EQ(t.failed(), retry_when::at_once);  // s1, the dead leader
  EXPECT_EQ(t.target(), s2);
  EXPECT_EQ(t.not_leader(s1), retry_when::soon) << "s1 just failed";
  EXPECT_EQ(t.target(), s3) << "the next given gate is asked after the pause";
}

TEST(GateTargets, PausesStayShortForAnElectionThenDouble) {
  gate_targets t{{s1}};
  for (uint32_t i = 0; i < gate_targets::soon_flat; ++i) {
    EXPECT_EQ(t.no_leader(), retry_when::soon);
    EXPECT_EQ(t.soon_delay(15000ms), 250ms) << i;
  }
  EXPECT_EQ(t.no_leader(), retry_when::soon);
  EXPECT_EQ(t.soon_delay(15000ms), 500ms);
  EXPECT_EQ(t.no_leader(), retry_when::soon);
  EXPECT_EQ(t.soon_delay(15000ms), 1000ms);
  for (int i = 0; i < 10; ++i)
    t.no_leader();
  EXPECT_EQ(t.soon_delay(15000ms), 15000ms) << "at most the back-off cap";
  t.welcomed();
  EXPECT_EQ(t.no_leader(), retry_when::soon);
  EXPECT_EQ(t.soon_delay(15000ms), 250ms);
}

TEST(GateTargets, ASilentLeaderIsSkippedAndNotFollowedUntilAnotherLeads) {
  gate_targets t{{s1, s2, s3}};
  t.welcomed();  // on s1, which then freezes (SIGSTOP): silent
  EXPECT_EQ(t.silent(), retry_when::at_once);
  EXPECT_TRUE(t.avoided(s1));
  EXPECT_EQ(t.target(), s2);
  // Its lease has not run out: s2 still names it. Not followed: a pause,
  // and the next given gate after it.
  EXPECT_EQ(t.not_leader(s1), retry_when::soon);
  EXPECT_EQ(t.target(), s3);
  // s3 names it too; the round wraps past s1 to s2.
  EXPECT_EQ(t.not_leader(s1), retry_when::soon);
  EXPECT_EQ(t.target(), s2) << "the silent s1 is skipped";
  // s2 was elected: its answer names s2 itself... as a leader it welcomes.
  t.welcomed();
  EXPECT_FALSE(t.avoided(s1));
}

TEST(GateTargets, ASilentGateThatStillLeadsIsFollowedAgainAfterAWhile) {
  gate_targets t{{s2}};
  EXPECT_EQ(t.not_leader(s1), retry_when::at_once);  // following s1
  t.welcomed();
  // s1 froze for less than its lease: it still leads when it resumes.
  EXPECT_EQ(t.silent(), retry_when::at_once) << "back to s2, which named it";
  EXPECT_FALSE(t.following());
  EXPECT_EQ(t.target(), s2);
  for (uint32_t i = 0; i < gate_targets::silent_answers; ++i)
    EXPECT_EQ(t.not_leader(s1), retry_when::soon) << i;
  EXPECT_EQ(t.not_leader(s1), retry_when::at_once) << "named long enough: it leads";
  EXPECT_EQ(t.target(), s1);
}

TEST(GateTargets, ANewLeaderNamedEndsTheAvoidance) {
  gate_targets t{{s1, s2, s3}};
  t.welcomed();
  EXPECT_EQ(t.silent(), retry_when::at_once);
  EXPECT_EQ(t.target(), s2);
  EXPECT_EQ(t.not_leader(s3), retry_when::at_once);
  EXPECT_FALSE(t.avoided(s1));
  EXPECT_EQ(t.target(), s3);
}
