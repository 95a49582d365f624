// TEST ONLY: the "test-echo" stage runner, a stand-in engine for tests of processes, transport,
// connectors and routing. It generates deterministic tokens from the prompt and the input payload
// bytes (so a downstream stage's output proves which bytes arrived), can emit payloads, and can be
// told to fail, stall or crash. It loads no model and must not be used to serve.
//
// engine_args (all optional except runner):
//   runner: "test-echo"
//   max_tokens: tokens per request when sampling_params has no max_tokens (default 4)
//   step_delay_ms: sleep per step (default 0)
//   payload_bytes, payload_chunks: emit a payload of payload_bytes bytes on each of the first
//     payload_chunks steps of a request (default 0 and 1; chunks are capped at the token count)
//   init_delay_ms: sleep while initialising (default 0)
//   fail_init: when set, initialisation fails with this message and fail_init_code
//     (an error code name, default "load_failed")
//   crash_on_prompt_token, crash_exit_code: the process exits with crash_exit_code (default 70)
//     on the second step of a request whose prompt contains that token
//   stream_input: accept streamed (async_chunk) input: the request's first input (prompt and
//     payloads) and each later chunk yield one token each, echo_token(echo_seed(chunk), k) for
//     chunk k; the request finishes ("stop") after answering its last chunk (default false)
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kTestEchoRunnerKind = "test-echo";

// The generation rule, public so tests can compute the outputs they expect.
uint64_t echo_seed(std::span<const int32_t> prompt, const std::vector<std::span<const uint8_t>>& inputs);
int32_t echo_token(uint64_t seed, int index);
std::vector<uint8_t> echo_payload(uint64_t seed, int chunk, size_t size);

class TestEchoRunner : public StageRunner {
 public:
  struct Options {
    int max_tokens = 4;
    int step_delay_ms = 0;
    size_t payload_bytes = 0;
    int payload_chunks = 1;
    int init_delay_ms = 0;
    std::string fail_init;
    ErrorCode fail_init_code = ErrorCode::kLoadFailed;
    int64_t crash_on_prompt_token = -1;
    int crash_exit_code = 70;
    bool stream_input = false;
    // Throws omni::Error(kInvalidConfig) naming the stage and the mistyped field.
    static Options from_engine_args(const Json& engine_args, const StageRunnerContext& context);
  };

  // Sleeps init_delay_ms, then throws the fail_init error if one is configured.
  TestEchoRunner(Options options, const StageRunnerContext& context);

  void add_request(StageRequest request) override;
  void add_input(const std::string& request_id, StageInputChunk chunk) override;
  void abort(const std::string& request_id) override;
  bool can_step() const override;
  size_t running_requests() const override { return requests_.size(); }
  std::vector<StageOutput> step() override;

 private:
  struct Running {
    uint64_t seed = 0;
    int max_tokens = 0;
    int generated = 0;
    bool crash = false;
    bool streaming = false;
    bool input_closed = true;
    std::deque<uint64_t> chunk_seeds;  // streamed chunks not answered yet
  };
  Options options_;
  int stage_id_;
  std::map<std::string, Running> requests_;
};

}  // namespace omni::runtime
