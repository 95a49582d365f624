// The replica lifecycle without processes: start-up transitions, picking, failure, lapses.
#include "runtime/replica_set.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace omni::runtime {
namespace {

using Clock = ReplicaSet::Clock;
using std::chrono::milliseconds;

// Stage 0 with two replicas, stage 1 with one.
PipelineSpec two_stage_pipeline() {
  PipelineSpec p;
  p.stages.resize(2);
  p.stages[0] = {0, {}, false, "latents"};
  p.stages[0].num_replicas = 2;
  p.stages[1] = {1, {0}, true, "audio"};
  return p;
}

void make_ready(ReplicaSet& set, Clock::time_point now) {
  for (int stage = 0; stage < set.num_stages(); ++stage) {
    for (Replica& replica : set.stage(stage)) {
      set.on_startup_message(replica, RegisterMessage{stage, replica.index, 1, "host", ""}, now);
      set.on_startup_message(replica, ReadyMessage{stage, replica.index}, now);
    }
  }
}

TEST(ReplicaSetTest, OneReplicaPerStageReplicaNamedByItsControlIdentity) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline);
  ASSERT_EQ(set.num_stages(), 2);
  EXPECT_EQ(set.stage(0).size(), 2u);
  EXPECT_EQ(set.stage(1).size(), 1u);
  EXPECT_EQ(set.at(0, 1).identity, "stage0.replica1");
  EXPECT_EQ(set.find("stage1.replica0"), &set.at(1, 0));
  EXPECT_EQ(set.find("stage7.replica0"), nullptr);
  std::vector<ReplicaInfo> infos = set.infos();
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[1].stage_id, 0);
  EXPECT_EQ(infos[1].replica, 1);
  EXPECT_EQ(infos[1].pid, -1) << "not launched";
  EXPECT_FALSE(infos[1].failed);
}

TEST(ReplicaSetTest, StartUpMessagesMoveAReplicaToReadyAndOnlyReadyOnesArePicked) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline);
  const auto now = Clock::now();
  EXPECT_EQ(set.pick(0), -1) << "nothing is ready yet";
  set.on_startup_message(set.at(0, 1), RegisterMessage{0, 1, 42, "host", "0"}, now);
  EXPECT_EQ(set.at(0, 1).phase, ReplicaPhase::kRegistered);
  EXPECT_EQ(set.at(0, 1).last_heard, now);
  EXPECT_EQ(set.pick(0), -1) << "registered is not ready";
  set.on_startup_message(set.at(0, 1), ReadyMessage{0, 1}, now);
  EXPECT_EQ(set.at(0, 1).phase, ReplicaPhase::kReady);
  EXPECT_EQ(set.pick(0), 1);
  EXPECT_FALSE(set.all_ready());
  make_ready(set, now);
  EXPECT_TRUE(set.all_ready());
}

TEST(ReplicaSetTest, PickTakesTheLeastLoadedReadyReplicaLowestIndexFirst) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline);
  make_ready(set, Clock::now());
  EXPECT_EQ(set.pick(0), 0) << "equal load: the lowest index";
  set.assign(set.at(0, 0), "a");
  EXPECT_EQ(set.pick(0), 1);
  set.assign(set.at(0, 1), "b");
  set.assign(set.at(0, 1), "c");
  EXPECT_EQ(set.pick(0), 0);
  set.release(set.at(0, 1), "b");
  set.release(set.at(0, 1), "c");
  EXPECT_EQ(set.pick(0), 1);
  EXPECT_EQ(set.pick(1), 0);
}

TEST(ReplicaSetTest, AFailedReplicaHandsBackItsRequestsAndIsNeverPickedAgain) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline);
  make_ready(set, Clock::now());
  set.assign(set.at(0, 0), "a");
  set.assign(set.at(0, 0), "b");
  std::set<std::string> affected;
  EXPECT_EQ(set.fail(set.at(0, 0), "its process exited with code 3", affected),
            "stage 0 (replica 0) failed: its process exited with code 3");
  EXPECT_EQ(affected, (std::set<std::string>{"a", "b"}));
  EXPECT_TRUE(set.at(0, 0).requests.empty());
  EXPECT_EQ(set.at(0, 0).phase, ReplicaPhase::kFailed);
  EXPECT_EQ(set.pick(0), 1) << "the other replica, although it is the more loaded one from now on";
  set.assign(set.at(0, 1), "c");
  EXPECT_EQ(set.pick(0), 1);
  EXPECT_TRUE(set.infos()[0].failed);
  EXPECT_FALSE(set.all_ready());
  set.fail(set.at(0, 1), "gone", affected);
  EXPECT_EQ(affected, std::set<std::string>{"c"});
  EXPECT_EQ(set.pick(0), -1) << "a stage without a ready replica";
}

TEST(ReplicaSetTest, AReadyReplicaSilentPastTheHeartbeatTimeoutHasLapsed) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline);
  const auto start = Clock::now();
  make_ready(set, start);
  EXPECT_TRUE(set.lapsed(start + milliseconds(900), milliseconds(1000)).empty());
  set.heard(set.at(0, 1), start + milliseconds(800));
  set.on_heartbeat(set.at(0, 1), HeartbeatMessage{0, 1, 5, {}});
  EXPECT_EQ(set.infos()[1].running_requests, 5);
  std::vector<ReplicaSet::Lapse> lapses = set.lapsed(start + milliseconds(1500), milliseconds(1000));
  ASSERT_EQ(lapses.size(), 2u) << "stage 0 replica 0 and stage 1 replica 0; stage 0 replica 1 was heard at 800 ms";
  EXPECT_EQ(lapses[0].replica, &set.at(0, 0));
  EXPECT_EQ(lapses[1].replica, &set.at(1, 0));
  EXPECT_EQ(lapses[0].reason, "it sent no heartbeat for 1s");
  EXPECT_FALSE(lapses[0].exited);
  EXPECT_EQ(lapses[0].replica->phase, ReplicaPhase::kReady) << "failing it is the caller's decision";
  std::set<std::string> affected;
  set.fail(set.at(0, 0), lapses[0].reason, affected);
  EXPECT_EQ(set.lapsed(start + milliseconds(1500), milliseconds(1000)).size(), 1u) << "a failed replica lapses once";
}

TEST(ReplicaSetTest, StartUpTimesOutNamingTheStageReplicaAndFlag) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline);
  const auto start = Clock::now();
  for (int stage = 0; stage < set.num_stages(); ++stage) {
    for (Replica& replica : set.stage(stage)) replica.started = start;
  }
  set.on_startup_message(set.at(0, 0), ReadyMessage{0, 0}, start);
  int received = 0;
  auto receive = [&] { ++received; };
  EXPECT_NO_THROW(set.check_startup(start + milliseconds(500), milliseconds(1000), milliseconds(0), receive));
  try {
    set.check_startup(start + milliseconds(1500), milliseconds(1000), milliseconds(0), receive);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_STREQ(e.what(), "stage 0 (replica 1) was not ready within --stage-init-timeout=1s");
  }
  EXPECT_EQ(received, 0) << "no process ended, so nothing was waited for";
}

TEST(ReplicaSetTest, ConsumersOfAStageAreTheStagesReadingIt) {
  PipelineSpec p = two_stage_pipeline();
  p.stages.push_back({2, {0}, true, "text"});
  EXPECT_EQ(consumers_of(p, 0), (std::vector<int>{1, 2}));
  EXPECT_TRUE(consumers_of(p, 2).empty());
}

}  // namespace
}  // namespace omni::runtime

namespace omni::runtime {
namespace {

RegisterMessage join_request(int stage, const std::string& address) {
  RegisterMessage m{stage, -1, 4242, "host-b", ""};
  m.address = address;
  m.pipeline = Json::object();
  return m;
}

// A distributed head's set: stage 0 local, stage 1 with replicas that join.
TEST(ReplicaSetPoolTest, JoinedReplicasFormThePoolAndDroppedSlotsAreReused) {
  const PipelineSpec pipeline = two_stage_pipeline();
  ReplicaSet set(pipeline, 0);
  EXPECT_EQ(set.stage(0).size(), 2u);
  EXPECT_TRUE(set.stage(1).empty()) << "a remote slot: its replicas join";
  const auto now = Clock::now();
  Replica& a = set.join(1, "stage1.b.1", join_request(1, "10.0.0.2"), true, now);
  Replica& b = set.join(1, "stage1.b.2", join_request(1, "10.0.0.3"), true, now);
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(set.lookup("stage1.b.2"), &b);
  EXPECT_EQ(set.lookup("stage1.b.9"), nullptr);
  EXPECT_EQ(a.phase, ReplicaPhase::kRegistered);
  EXPECT_EQ(set.ready_counts(), (std::vector<int>{0, 0}));
  set.on_startup_message(a, ReadyMessage{1, 0}, now);
  EXPECT_EQ(set.ready_counts(), (std::vector<int>{0, 1}));
  EXPECT_EQ(set.pick(1), 0);
  EXPECT_TRUE(set.all_ready() == false) << "stage 0's local replicas are not ready";

  a.phase = ReplicaPhase::kDown;
  a.gone_since = now;
  EXPECT_TRUE(set.drop_gone(now + milliseconds(999), milliseconds(1000)).empty()) << "within the grace period";
  ASSERT_EQ(set.drop_gone(now + milliseconds(1000), milliseconds(1000)).size(), 1u);
  EXPECT_EQ(a.phase, ReplicaPhase::kDropped);
  EXPECT_EQ(set.lookup("stage1.b.1"), nullptr);
  Replica& c = set.join(1, "stage1.b.3", join_request(1, "10.0.0.2"), true, now);
  EXPECT_EQ(c.index, 0) << "the dropped slot";
  EXPECT_EQ(&c, &a);
  EXPECT_EQ(&set.at(1, 1), &b) << "the others never move";
  EXPECT_EQ(set.infos().size(), 4u);
}

TEST(ReplicaSetPoolTest, TheLbPoliciesPickAmongReadyReplicas) {
  PipelineSpec pipeline = two_stage_pipeline();
  pipeline.stages[1].num_replicas = 3;
  ReplicaSet set(pipeline);
  make_ready(set, Clock::now());
  set.set_policy(LbPolicy::kRoundRobin);
  EXPECT_EQ(std::vector<int>({set.pick(1), set.pick(1), set.pick(1), set.pick(1)}), std::vector<int>({0, 1, 2, 0}));
  set.at(1, 1).phase = ReplicaPhase::kError;
  EXPECT_EQ(std::vector<int>({set.pick(1), set.pick(1), set.pick(1)}), std::vector<int>({2, 0, 2}));
  set.at(1, 1).phase = ReplicaPhase::kReady;

  set.set_policy(LbPolicy::kLeastQueueLength);
  set.at(1, 0).running_requests = 3;  // its heartbeat
  set.assign(set.at(1, 1), "r1");     // the head's own count, newer than the heartbeats
  for (int i = 0; i < 20; ++i) EXPECT_EQ(set.pick(1), 2);
  set.assign(set.at(1, 2), "r2");
  std::set<int> tied;
  for (int i = 0; i < 64; ++i) tied.insert(set.pick(1));
  EXPECT_EQ(tied, (std::set<int>{1, 2})) << "ties are broken at random";

  set.set_policy(LbPolicy::kRandom);
  std::map<int, int> picks;
  for (int i = 0; i < 300; ++i) picks[set.pick(1)]++;
  ASSERT_EQ(picks.size(), 3u);
  for (const auto& [replica, count] : picks) EXPECT_GT(count, 50) << replica;

  EXPECT_EQ(lb_policy_from_name("round-robin"), LbPolicy::kRoundRobin);
  EXPECT_THROW(lb_policy_from_name("fastest"), Error);
}

}  // namespace
}  // namespace omni::runtime
