#include "runtime/test_runners/test_echo_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/engine_args.h"
#include "runtime/stage_protocol.h"

namespace omni::runtime {

namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

uint64_t echo_seed(std::span<const int32_t> prompt, const std::vector<std::span<const uint8_t>>& inputs) {
  uint64_t hash = kFnvOffset;
  for (int32_t token : prompt) {
    for (int shift = 0; shift < 32; shift += 8)
      hash = (hash ^ ((static_cast<uint32_t>(token) >> shift) & 0xff)) * kFnvPrime;
  }
  for (const auto& input : inputs) {
    for (uint8_t byte : input) hash = (hash ^ byte) * kFnvPrime;
  }
  return hash;
}

int32_t echo_token(uint64_t seed, int index) {
  return static_cast<int32_t>(mix(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index + 1)) % 32000);
}

std::vector<uint8_t> echo_payload(uint64_t seed, int chunk, size_t size) {
  std::vector<uint8_t> bytes(size);
  uint64_t state = mix(seed ^ (static_cast<uint64_t>(chunk) << 32));
  for (size_t i = 0; i < size; ++i) {
    if (i % 8 == 0) state = mix(state + i);
    bytes[i] = static_cast<uint8_t>(state >> (8 * (i % 8)));
  }
  return bytes;
}

TestEchoRunner::Options TestEchoRunner::Options::from_engine_args(const Json& engine_args,
                                                                  const StageRunnerContext& context) {
  const EngineArgs args(engine_args, context.stage_id);
  Options options;
  options.max_tokens = args.value_or("max_tokens", options.max_tokens);
  options.step_delay_ms = args.value_or("step_delay_ms", options.step_delay_ms);
  options.payload_bytes = args.value_or("payload_bytes", options.payload_bytes);
  options.payload_chunks = args.value_or("payload_chunks", options.payload_chunks);
  options.init_delay_ms = args.value_or("init_delay_ms", options.init_delay_ms);
  options.fail_init = args.value_or("fail_init", options.fail_init);
  if (auto code = args.optional<std::string>("fail_init_code"); code && !code->empty()) {
    options.fail_init_code = error_code_from_name(*code);
  }
  options.crash_on_prompt_token = args.value_or("crash_on_prompt_token", options.crash_on_prompt_token);
  options.crash_exit_code = args.value_or("crash_exit_code", options.crash_exit_code);
  options.stream_input = args.value_or("stream_input", options.stream_input);
  return options;
}

TestEchoRunner::TestEchoRunner(Options options, const StageRunnerContext& context)
    : options_(std::move(options)), stage_id_(context.stage_id) {
  if (options_.init_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(options_.init_delay_ms));
  if (!options_.fail_init.empty()) throw Error(options_.fail_init_code, options_.fail_init);
}

void TestEchoRunner::add_request(StageRequest request) {
  int max_tokens = options_.max_tokens;
  if (auto it = request.sampling_params.find("max_tokens"); it != request.sampling_params.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      throw_error(ErrorCode::kInvalidArgument,
                  "stage {}: sampling_params.max_tokens must be a positive integer, not {}", stage_id_, it->dump());
    }
    max_tokens = it->get<int>();
  }
  std::vector<std::span<const uint8_t>> inputs;
  for (const PayloadView& view : request.inputs) inputs.push_back(view.bytes());
  Running running{echo_seed(request.prompt_token_ids, inputs), max_tokens, 0, false};
  running.crash = options_.crash_on_prompt_token >= 0 &&
                  std::find(request.prompt_token_ids.begin(), request.prompt_token_ids.end(),
                            options_.crash_on_prompt_token) != request.prompt_token_ids.end();
  if (request.input_open && !options_.stream_input) {
    throw_error(ErrorCode::kUnsupported, "stage {}: test-echo takes streamed input only with stream_input", stage_id_);
  }
  if (options_.stream_input) {
    running.streaming = true;
    running.input_closed = !request.input_open;
    running.chunk_seeds.push_back(running.seed);
  }
  requests_[request.request_id] = running;
}

void TestEchoRunner::add_input(const std::string& request_id, StageInputChunk chunk) {
  auto it = requests_.find(request_id);
  if (it == requests_.end() || !it->second.streaming || it->second.input_closed) {
    throw_error(ErrorCode::kInternal, "stage {}: request {} takes no more input", stage_id_, request_id);
  }
  std::vector<std::span<const uint8_t>> payloads;
  for (const PayloadView& view : chunk.payloads) payloads.push_back(view.bytes());
  it->second.chunk_seeds.push_back(echo_seed(chunk.token_ids, payloads));
  it->second.input_closed = chunk.last;
}

bool TestEchoRunner::can_step() const {
  return std::any_of(requests_.begin(), requests_.end(),
                     [](const auto& entry) { return !entry.second.streaming || !entry.second.chunk_seeds.empty(); });
}

void TestEchoRunner::abort(const std::string& request_id) { requests_.erase(request_id); }

std::vector<StageOutput> TestEchoRunner::step() {
  if (options_.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms));
  std::vector<StageOutput> outputs;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Running& running = it->second;
    if (running.crash && running.generated == 1) _exit(options_.crash_exit_code);
    if (running.streaming) {
      if (running.chunk_seeds.empty()) {
        ++it;
        continue;
      }
      StageOutput output;
      output.request_id = it->first;
      int32_t token = echo_token(running.chunk_seeds.front(), running.generated++);
      running.chunk_seeds.pop_front();
      output.token_ids.push_back(token);
      output.text = std::to_string(token) + " ";
      if (running.input_closed && running.chunk_seeds.empty()) {
        output.finish_reason = "stop";
        it = requests_.erase(it);
      } else {
        ++it;
      }
      outputs.push_back(std::move(output));
      continue;
    }
    StageOutput output;
    output.request_id = it->first;
    int32_t token = echo_token(running.seed, running.generated);
    output.token_ids.push_back(token);
    output.text = std::to_string(token) + " ";
    int chunks = std::min(options_.payload_chunks, running.max_tokens);
    if (options_.payload_bytes > 0 && running.generated < chunks) {
      output.payload = echo_payload(running.seed, running.generated, options_.payload_bytes);
    }
    ++running.generated;
    if (running.generated >= running.max_tokens) {
      output.finish_reason = "length";
      it = requests_.erase(it);
    } else {
      ++it;
    }
    outputs.push_back(std::move(output));
  }
  return outputs;
}

}  // namespace omni::runtime
