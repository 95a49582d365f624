// What the head and its headless workers compare and advertise: the pipeline fingerprint and the
// first difference, this host's addresses, the routing probe.
#include "runtime/distributed_launch.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace omni::runtime {
namespace {

PipelineSpec pipeline_with(int max_num_seqs) {
  PipelineSpec p;
  p.stages.resize(2);
  p.stages[0] = {0, {}, false, "latents"};
  p.stages[1] = {1, {0}, true, "audio"};
  p.stages[1].engine_args = {{"max_num_seqs", max_num_seqs}, {"model", "/models/a"}};
  return p;
}

TEST(DistributedLaunchTest, TheFirstDifferingFieldIsNamedWithBothValues) {
  const Json head = pipeline_fingerprint(pipeline_with(64));
  EXPECT_EQ(fingerprint_difference(head, pipeline_fingerprint(pipeline_with(64))), std::nullopt);
  EXPECT_EQ(fingerprint_difference(head, pipeline_fingerprint(pipeline_with(8))),
            "stages[1].engine_args.max_num_seqs: the head has 64, the worker 8");

  PipelineSpec elsewhere = pipeline_with(64);
  elsewhere.stages[1].engine_args["model"] = "/other/host/path";  // local paths may differ
  elsewhere.stages[1].devices = "3";                              // so may devices
  elsewhere.stages[1].num_replicas = 4;                           // and --omni-dp-size-local
  EXPECT_EQ(fingerprint_difference(head, pipeline_fingerprint(elsewhere)), std::nullopt);

  PipelineSpec more = pipeline_with(64);
  more.stages[1].engine_args["enforce_eager"] = true;
  EXPECT_EQ(fingerprint_difference(head, pipeline_fingerprint(more)),
            "stages[1].engine_args.enforce_eager: the head has none, the worker has true");
  PipelineSpec shorter = pipeline_with(64);
  shorter.stages.pop_back();
  EXPECT_NE(fingerprint_difference(head, pipeline_fingerprint(shorter)), std::nullopt);
}

TEST(DistributedLaunchTest, LocalAddressesAndTheRoutingProbe) {
  EXPECT_TRUE(is_local_address("127.0.0.1"));
  EXPECT_TRUE(is_local_address("localhost"));
  EXPECT_FALSE(is_local_address("192.0.2.77"));  // TEST-NET-1: nobody's interface
  EXPECT_EQ(routing_probe_address("127.0.0.1", 26000), "127.0.0.1");
  EXPECT_TRUE(is_local_address(routing_probe_address("127.0.0.1", 26000)));
  try {
    routing_probe_address("no-such-host.invalid", 26000);
    FAIL() << "resolved an .invalid name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--omni-master-address no-such-host.invalid"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::runtime
