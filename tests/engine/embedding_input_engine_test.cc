// ArEngine driving a model that builds its own input rows (model/embedding_input_lm.h), with a
// fake whose KV "storage" is the row value written at each slot: the prompt is rows the model
// builds from additional_information, every decode row is built from the previous step's sub-model
// output, each step's sampled tokens go through the sub-model hook into per-step outputs, the
// requests' suppressed ranges are never sampled, the KV of a whole request is reserved at
// admission (no preemption), the model's per-request resources are acquired on admission and
// released when the request ends or is aborted, and embedded prompts never touch the prefix cache.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/ar_engine.h"
#include "engine_test_util.h"
#include "model/embedding_input_lm.h"

namespace omni::engine {
namespace {

constexpr int kVocab = 32;
constexpr int32_t kEos = 31;

// Row values: prompt row p of a request = 1000 * its "base" + p; a decode row = 10 * the previous
// step's sub-model output + 1. Logits read the row values of the whole history back through the
// block table and favour (sum of values) % (kVocab - 1); the sub-model turns a token t into the
// output byte t + 1 (none for EOS).
class FakeEmbeddingLm final : public model::EmbeddingInputLm {
 public:
  struct State final : model::ArRequestState {
    int64_t base = 0;
    int num_rows = 0;
    int last_output = -1;  // the sub-model's output of the previous step
    int slot = -1;
    // Streamed input: the payloads so far, whether more follow, and the steps the request ran.
    int inputs = 0;
    bool input_open = false;
    int steps = 0;
  };
  struct Slice {
    std::string kind;  // "prompt" or "decode"
    int query_len = 0;
    int64_t first_value = 0;
  };

  FakeEmbeddingLm() { info_ = {kVocab, 4096, {kEos}, false}; }

  const model::CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override { return 1024; }
  void init_kv_cache(int num_blocks) override { kv_.assign(static_cast<size_t>(num_blocks) * model::kKvBlockSize, -1); }
  void forward(const model::ForwardBatch&, std::vector<float>&) override {
    throw_error(ErrorCode::kUnsupported, "token ids are not this model's input");
  }

  model::ArSamplingDefaults sampling_defaults() const override { return {}; }
  model::ArRequestStart start_request(const model::ArRequestInput& input) override {
    const Json& info = input.additional_information;
    if (!info.contains("rows"))
      throw_error(ErrorCode::kInvalidArgument, "request {}: rows is required", input.request_id);
    auto state = std::make_unique<State>();
    state->base = info.value("base", 1);
    state->num_rows = info["rows"].get<int>();
    model::ArRequestStart start;
    start.num_prompt_rows = state->num_rows;
    start.state = std::move(state);
    if (info.contains("max_new")) start.max_tokens = info["max_new"].get<int>();
    if (info.contains("suppress")) start.suppressed_tokens = {{info["suppress"][0], info["suppress"][1]}};
    auto& streamed = static_cast<State&>(*start.state);
    streamed.inputs = static_cast<int>(input.inputs.size());
    streamed.input_open = input.input_open;
    return start;
  }
  // Streamed input: step k of a request (its prompt for k = 0) needs payload k, or the input's end.
  void add_input(model::ArRequestState& state, std::span<const std::span<const uint8_t>> payloads, bool last) override {
    auto& s = static_cast<State&>(state);
    for (std::span<const uint8_t> payload : payloads) {
      if (payload.size() != 1) throw_error(ErrorCode::kInvalidArgument, "a payload of {} bytes", payload.size());
    }
    s.inputs += static_cast<int>(payloads.size());
    s.input_open = !last;
  }
  bool ready(const model::ArRequestState& state) const override {
    const auto& s = static_cast<const State&>(state);
    return !s.input_open || s.steps < s.inputs;
  }
  void prepare_requests(int max_num_seqs, const std::vector<int>&, bool) override {
    for (int s = max_num_seqs - 1; s >= 0; --s) free_slots_.push_back(s);
  }
  void acquire(model::ArRequestState& state) override {
    ASSERT_FALSE(free_slots_.empty());
    static_cast<State&>(state).slot = free_slots_.back();
    free_slots_.pop_back();
    ++acquired;
  }
  void release(model::ArRequestState& state) override {
    free_slots_.push_back(static_cast<State&>(state).slot);
    ++released;
  }

  void forward_step(const model::ForwardBatch& batch, std::span<model::ArRequestState* const> states,
                    std::vector<float>& logits) override {
    EXPECT_TRUE(batch.token_ids.empty());
    ASSERT_EQ(states.size(), batch.seqs.size());
    std::vector<Slice>& step = steps.emplace_back();
    logits.assign(batch.seqs.size() * kVocab, 0.0f);
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
      const model::SequenceSlice& seq = batch.seqs[i];
      auto& state = static_cast<State&>(*states[i]);
      EXPECT_GE(state.slot, 0) << "a running request holds its resources";
      EXPECT_TRUE(ready(state)) << "only ready requests are scheduled";
      ++state.steps;
      const bool prompt = seq.context_len == 0;
      EXPECT_EQ(seq.query_len, prompt ? state.num_rows : 1) << "prompts are fed whole";
      int64_t sum = 0;
      for (int p = 0; p < seq.context_len + seq.query_len; ++p) {
        const size_t slot = static_cast<size_t>(seq.block_table.at(p / model::kKvBlockSize)) * model::kKvBlockSize +
                            p % model::kKvBlockSize;
        if (p >= seq.context_len) {
          kv_.at(slot) = prompt ? 1000 * state.base + p : 10 * state.last_output + 1;
        }
        sum += kv_.at(slot);
      }
      step.push_back({prompt ? "prompt" : "decode", seq.query_len, kv_.at(slot_of(seq, seq.context_len))});
      logits[i * kVocab + static_cast<size_t>(sum % (kVocab - 1))] = 10.0f;
    }
  }
  void finish_step(std::span<const model::ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) override {
    for (size_t i = 0; i < rows.size(); ++i) {
      auto& state = static_cast<State&>(*rows[i].state);
      if (rows[i].token == kEos) continue;
      state.last_output = rows[i].token + 1;
      outputs[i] = {static_cast<uint8_t>(state.last_output)};
    }
  }

  // The token the fake picks after a history of row values summing to `sum`.
  static int32_t pick(int64_t sum) { return static_cast<int32_t>(sum % (kVocab - 1)); }

  std::vector<std::vector<Slice>> steps;
  int acquired = 0;
  int released = 0;
  std::vector<int> free_slots_;

 private:
  static size_t slot_of(const model::SequenceSlice& seq, int p) {
    return static_cast<size_t>(seq.block_table.at(p / model::kKvBlockSize)) * model::kKvBlockSize +
           p % model::kKvBlockSize;
  }
  model::CausalLmInfo info_;
  std::vector<int64_t> kv_;
};

EngineRequest speech(const std::string& id, Json info, SamplingParams params = {.temperature = 0}) {
  EngineRequest r;
  r.request_id = id;
  r.sampling_params = std::move(params);
  r.additional_information = std::move(info);
  return r;
}

struct Stream {
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> step_outputs;
  std::optional<FinishReason> finish;
};

std::map<std::string, Stream> run(ArEngine& engine) {
  std::map<std::string, Stream> streams;
  for (int i = 0; i < 1000 && engine.has_unfinished_requests(); ++i) {
    for (const RequestOutput& out : engine.step()) {
      for (const CompletionOutput& c : out.completions) {
        Stream& s = streams[out.request_id];
        EXPECT_EQ(c.step_outputs.size(), c.token_ids.size());
        s.tokens.insert(s.tokens.end(), c.token_ids.begin(), c.token_ids.end());
        s.step_outputs.insert(s.step_outputs.end(), c.step_outputs.begin(), c.step_outputs.end());
        if (c.finish_reason) s.finish = c.finish_reason;
      }
    }
  }
  return streams;
}

// What the fake generates for a request alone: the sums of its rows step by step.
std::vector<int32_t> expected_tokens(int64_t base, int rows, int max_new) {
  int64_t sum = 0;
  for (int p = 0; p < rows; ++p) sum += 1000 * base + p;
  std::vector<int32_t> tokens;
  for (int i = 0; i < max_new; ++i) {
    const int32_t t = FakeEmbeddingLm::pick(sum);
    tokens.push_back(t);
    if (t == kEos) break;
    sum += 10 * (t + 1) + 1;
  }
  return tokens;
}

TEST(EmbeddingInputEngine, PromptRowsDecodeRowsAndStepOutputsComeFromTheModel) {
  FakeEmbeddingLm model;
  ArEngine engine(model, {.max_num_seqs = 4, .enable_prefix_caching = true, .num_gpu_blocks_override = 64});
  engine.add_request(speech("a", {{"rows", 20}, {"base", 3}, {"max_new", 6}}));
  engine.add_request(speech("b", {{"rows", 5}, {"base", 7}, {"max_new", 4}}));
  std::map<std::string, Stream> streams = run(engine);

  EXPECT_EQ(streams["a"].tokens, expected_tokens(3, 20, 6));
  EXPECT_EQ(streams["b"].tokens, expected_tokens(7, 5, 4));
  for (const auto& [id, s] : streams) {
    ASSERT_EQ(s.step_outputs.size(), s.tokens.size()) << id;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      EXPECT_EQ(s.step_outputs[i], std::vector<uint8_t>{static_cast<uint8_t>(s.tokens[i] + 1)}) << id << " " << i;
    }
    EXPECT_EQ(s.finish, FinishReason::kLength) << id;
  }
  // Both prompts in the first step, whole; then one decode row each, built from the last output.
  ASSERT_GE(model.steps.size(), 2u);
  ASSERT_EQ(model.steps[0].size(), 2u);
  EXPECT_EQ(model.steps[0][0].kind, "prompt");
  EXPECT_EQ(model.steps[0][0].query_len, 20);
  EXPECT_EQ(model.steps[0][0].first_value, 3000);
  EXPECT_EQ(model.steps[0][1].query_len, 5);
  ASSERT_EQ(model.steps[1].size(), 2u);
  EXPECT_EQ(model.steps[1][0].kind, "decode");
  EXPECT_EQ(model.steps[1][0].first_value, 10 * (streams["a"].tokens[0] + 1) + 1);
  // Rows, not tokens: nothing was looked up in or added to the prefix cache.
  EXPECT_EQ(engine.stats().prefix_cache.queried_blocks, 0u);
  EXPECT_EQ(engine.stats().num_free_blocks, 64);
  EXPECT_EQ(model.acquired, 2);
  EXPECT_EQ(model.released, 2);
}

TEST(EmbeddingInputEngine, StopTokenEndsWithoutStepOutputAndSuppressedRangesAreNeverSampled) {
  FakeEmbeddingLm model;
  ArEngine engine(model, {.max_num_seqs = 4, .num_gpu_blocks_override = 64});
  // EOS favoured by logit_bias: with min_tokens 2 it comes only after two tokens.
  engine.add_request(speech("eos", {{"rows", 3}, {"max_new", 10}},
                            {.temperature = 0, .logit_bias = {{kEos, 100.0f}}, .min_tokens = 2}));
  // The favoured tokens of this request are suppressed: it never samples [0, 30).
  engine.add_request(speech("suppressed", {{"rows", 3}, {"max_new", 5}, {"suppress", {0, 30}}}));
  std::map<std::string, Stream> streams = run(engine);
  ASSERT_EQ(streams["eos"].tokens.size(), 3u);
  EXPECT_EQ(streams["eos"].tokens.back(), kEos);
  EXPECT_TRUE(streams["eos"].step_outputs.back().empty()) << "the stop token has no step output";
  EXPECT_FALSE(streams["eos"].step_outputs.front().empty());
  EXPECT_EQ(streams["eos"].finish, FinishReason::kStop);
  ASSERT_EQ(streams["suppressed"].tokens.size(), 5u);
  for (int32_t t : streams["suppressed"].tokens) EXPECT_GE(t, 30);
}

TEST(EmbeddingInputEngine, ReservesTheWholeRequestAtAdmissionAndAbortFreesIt) {
  FakeEmbeddingLm model;
  // 4 blocks of 16: "first" reserves 40 prompt rows + 20 outputs - 1 = 59 positions, all 4.
  ArEngine engine(model, {.max_num_seqs = 4, .num_gpu_blocks_override = 4, .max_model_len = 64});
  engine.add_request(speech("first", {{"rows", 40}, {"max_new", 20}}));
  engine.add_request(speech("second", {{"rows", 3}, {"max_new", 3}}));
  std::vector<RequestOutput> outputs = engine.step();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].request_id, "first");
  EXPECT_EQ(engine.stats().num_free_blocks, 0);
  EXPECT_EQ(engine.stats().num_waiting, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(engine.step().size(), 1u) << "second waits for blocks";
  EXPECT_EQ(engine.stats().num_preemptions, 0u);
  EXPECT_EQ(model.acquired, 1);

  // Aborting the waiting request releases nothing it never held; aborting the running one frees
  // its blocks and its resources, and the waiting one runs.
  engine.add_request(speech("third", {{"rows", 3}, {"max_new", 2}}));
  ASSERT_TRUE(engine.abort("third"));
  EXPECT_EQ(model.released, 0);
  ASSERT_TRUE(engine.abort("first"));
  EXPECT_EQ(model.released, 1);
  EXPECT_EQ(engine.stats().num_free_blocks, 4);
  std::map<std::string, Stream> streams = run(engine);
  EXPECT_EQ(streams["second"].tokens, expected_tokens(1, 3, 3));
  EXPECT_EQ(streams.count("first"), 0u);
  EXPECT_EQ(model.acquired, 2);
  EXPECT_EQ(model.released, 2);
  EXPECT_EQ(model.free_slots_.size(), 4u);
}

TEST(EmbeddingInputEngine, RejectsWhatTheModelCannotRun) {
  FakeEmbeddingLm model;
  ArEngine engine(model, {.max_num_seqs = 2, .num_gpu_blocks_override = 8, .max_model_len = 64});
  auto message = [&](EngineRequest r) { return testing::rejection(engine, std::move(r)); };
  EXPECT_NE(message(speech("r", Json::object())).find("rows is required"), std::string::npos);
  EXPECT_NE(message(speech("r", {{"rows", 65}})).find("the prompt has 65 rows, max_model_len is 64"),
            std::string::npos);
  EXPECT_NE(message(speech("r", {{"rows", 2}}, {.n = 2})).find("'n' must be 1"), std::string::npos);
  EXPECT_FALSE(engine.has_unfinished_requests());
}

TEST(EmbeddingInputEngine, StreamedInputHoldsARequestUntilItsNextStepCanBeBuilt) {
  FakeEmbeddingLm model;
  ArEngine engine(model, {.max_num_seqs = 4, .num_gpu_blocks_override = 64});
  const std::vector<uint8_t> byte = {1};
  const std::vector<std::span<const uint8_t>> one = {byte};
  // "late" has no input yet: it is not admitted; "streamed" has its first payload (its prompt).
  EngineRequest late = speech("late", {{"rows", 4}, {"base", 2}, {"max_new", 3}});
  late.input_open = true;
  engine.add_request(std::move(late));
  EngineRequest streamed = speech("streamed", {{"rows", 6}, {"base", 5}, {"max_new", 5}});
  streamed.inputs = one;
  streamed.input_open = true;
  engine.add_request(std::move(streamed));
  engine.add_request(speech("whole", {{"rows", 3}, {"base", 9}, {"max_new", 6}}));
  EXPECT_EQ(engine.stats().num_waiting, 2) << "the request without input waits outside the scheduler";

  std::map<std::string, Stream> streams;
  auto step = [&] {
    for (const RequestOutput& out : engine.step()) {
      for (const CompletionOutput& c : out.completions) {
        Stream& st = streams[out.request_id];
        st.tokens.insert(st.tokens.end(), c.token_ids.begin(), c.token_ids.end());
        if (c.finish_reason) st.finish = c.finish_reason;
      }
    }
  };
  step();  // both prompts; "streamed" has its first token, its next row needs a second payload
  EXPECT_EQ(streams["streamed"].tokens.size(), 1u);
  EXPECT_EQ(streams.count("late"), 0u);
  for (int i = 0; i < 8; ++i) step();  // "whole" runs to its end past the waiting ones
  EXPECT_EQ(streams["whole"].tokens, expected_tokens(9, 3, 6));
  EXPECT_EQ(streams["streamed"].tokens.size(), 1u);
  EXPECT_FALSE(engine.can_step()) << "every unfinished request waits for input";
  EXPECT_TRUE(engine.has_unfinished_requests());

  engine.add_input("streamed", one, false);
  EXPECT_TRUE(engine.can_step());
  step();
  EXPECT_EQ(streams["streamed"].tokens.size(), 2u);
  EXPECT_FALSE(engine.can_step());
  engine.add_input("late", one, false);
  engine.add_input("streamed", {}, true);  // the end: every later row can be built
  for (int i = 0; i < 10 && engine.can_step(); ++i) step();
  EXPECT_EQ(streams["streamed"].tokens, expected_tokens(5, 6, 5)) << "waiting changes nothing it generates";
  EXPECT_EQ(streams["streamed"].finish, FinishReason::kLength);
  EXPECT_EQ(streams["late"].tokens.size(), 1u) << "its prompt ran once its first payload came";
  EXPECT_FALSE(engine.can_step());

  // Input the model refuses, for a request whose input ended, or for no request: errors; abort frees it.
  EXPECT_THROW(engine.add_input("late", std::vector<std::span<const uint8_t>>{std::span<const uint8_t>()}, false),
               Error);
  EXPECT_THROW(engine.add_input("streamed", one, false), Error);
  EXPECT_THROW(engine.add_input("nobody", one, false), Error);
  ASSERT_TRUE(engine.abort("late"));
  EXPECT_FALSE(engine.has_unfinished_requests());
  EXPECT_EQ(engine.stats().num_free_blocks, 64);
  EXPECT_EQ(model.acquired, model.released);
}

}  // namespace
}  // namespace omni::engine
