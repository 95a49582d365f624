// The pieces of a distributed launch (serve --stage-id / --headless) that the head and the
// headless workers share: the head's settings, the pipeline fingerprint both sides compare at
// registration, and the addresses (which are this host's, which one the master is reached from).
//
// A head (serve --stage-id N -oma A -omp P) binds its control socket on tcp://A:P, launches the
// replicas of stage N itself and waits for the other stages' replicas to join from headless
// workers (serve --stage-id M --headless -oma A -omp P), which register on that same socket. Every
// stage's replicas, local and joined, form one pool; docs/distributed.md describes the behaviour.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "base/json.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

struct DistributedHead {
  int local_stage = 0;  // --stage-id: the stage this process launches; the others are remote slots
  Json fingerprint;     // pipeline_fingerprint() of the head's pipeline
  // A replica in ERROR or DOWN is dropped from its pool after this long (vLLM-Omni: 600 s).
  std::chrono::milliseconds replica_grace{600'000};
};

// What two processes of one distributed launch must agree on: every stage's topology, engine
// arguments and sampling defaults, as the pipeline and deploy YAML resolve them before the
// process's own CLI flags (which override its own stage only). Left out: `devices` and
// `num_replicas` (process-local: --omni-dp-size-local) and the engine arguments that name local
// paths (`model`, `tokenizer`), which may differ between hosts.
Json pipeline_fingerprint(const PipelineSpec& pipeline);

// The first field where `worker` differs from `head`, named by its path with both values:
// "stages[1].engine_args.max_num_seqs: the head has 64, the worker 8"; nullopt when equal.
std::optional<std::string> fingerprint_difference(const Json& head, const Json& worker);

// True when `address` is one of this host's interface addresses (or a loopback name), so that a
// replica advertising it shares this host's shared memory.
bool is_local_address(const std::string& address);

// The source address the kernel would use to reach host:port (a UDP connect that sends nothing,
// then getsockname): what a headless worker advertises when --omni-replica-address is unset.
// Throws omni::Error(kUnavailable) naming the master when it cannot be resolved or routed to.
std::string routing_probe_address(const std::string& host, int port);

}  // namespace omni::runtime
