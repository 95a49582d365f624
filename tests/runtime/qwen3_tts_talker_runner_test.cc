// The qwen3_tts_talker stage runner on the tiny reference checkpoint of tests/data/tiny_qwen3_tts:
// greedy generation of whole requests (prompt construction, talker steps, the code predictor and
// the talker's logits processors) gives exactly the reference's codes, batched or alone; seeded
// sampling is reproducible; EOS, max_new_tokens, min_tokens, suppression, KV reservation, abort
// and bad requests behave as the runner's header says.
#include "runtime/qwen3_tts_talker_runner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/random_checkpoint.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/stage_runner.h"
#include "support/temp_dir.h"

namespace omni::runtime {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts";
constexpr int kEos = 2150 - 1984;

Json engine_args(const Json& extra = Json::object()) {
  Json args = {{"runner", std::string(kQwen3TtsTalkerRunnerKind)},
               {"model", kDir.string()},
               {"max_num_seqs", 4},
               {"max_model_len", 512},
               {"subtalker_sampling_params", {{"do_sample", false}}}};
  args.update(extra);
  return args;
}

StageRequest speech_request(const std::string& id, Json info, Json sampling = Json::object()) {
  StageRequest r;
  r.request_id = id;
  r.additional_information = std::move(info);
  r.sampling_params = std::move(sampling);
  return r;
}

struct Result {
  std::vector<int32_t> code0s;
  std::vector<std::vector<int32_t>> frames;
  std::string finish_reason;
  int outputs = 0;
};

// Steps until no request runs; every output carries at most one frame whose code 0 is its token.
std::map<std::string, Result> run_all(StageRunner& runner) {
  std::map<std::string, Result> results;
  for (int steps = 0; runner.running_requests() > 0; ++steps) {
    EXPECT_LT(steps, 1000) << "the runner does not finish";
    if (steps >= 1000) break;
    for (const StageOutput& out : runner.step()) {
      Result& r = results[out.request_id];
      EXPECT_TRUE(r.finish_reason.empty()) << out.request_id << " produced output after finishing";
      ++r.outputs;
      EXPECT_FALSE(out.error.has_value());
      if (out.payload) {
        const std::vector<int32_t> codes = model::qwen3_tts::decode_codec_frames(*out.payload, 16);
        EXPECT_EQ(codes.size(), 16u);
        EXPECT_EQ(out.token_ids, std::vector<int32_t>{codes[0]});
        r.frames.push_back(codes);
      } else {
        EXPECT_TRUE(out.token_ids.empty());
      }
      r.code0s.insert(r.code0s.end(), out.token_ids.begin(), out.token_ids.end());
      if (out.finish_reason) r.finish_reason = *out.finish_reason;
    }
  }
  return results;
}

Json reference_info(const Json& entry, int max_frames) {
  return {{"text", entry["text"]},         {"voice", entry["voice"]},
          {"language", entry["language"]}, {"instructions", entry["instructions"]},
          {"task_type", "CustomVoice"},    {"max_new_tokens", max_frames}};
}

const Json& reference() {
  static const Json* ref = new Json(read_json_file(kDir / "reference.json"));
  return *ref;
}

TEST(Qwen3TtsTalkerRunner, GreedyGenerationMatchesTheReference) {
  const int frames = reference()["max_frames"];
  const Json greedy = {{"temperature", 0.0}};
  std::map<std::string, Result> batched;
  {
    auto runner = make_stage_runner(engine_args(), {});
    for (const Json& entry : reference()["prompts"]) {
      if (!entry.contains("frames")) continue;
      runner->add_request(speech_request(entry["name"], reference_info(entry, frames), greedy));
    }
    batched = run_all(*runner);
  }
  int checked = 0;
  for (const Json& entry : reference()["prompts"]) {
    if (!entry.contains("frames")) continue;
    const std::string name = entry["name"];
    const auto want = entry["frames"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(want.size(), static_cast<size_t>(frames)) << name;  // the reference ran to max_new_tokens
    EXPECT_EQ(batched[name].frames, want) << name;
    EXPECT_EQ(batched[name].code0s, entry["code0s"].get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(batched[name].finish_reason, "length") << name;
    EXPECT_EQ(batched[name].outputs, frames) << name;

    // Alone, the request generates the same frames as next to the other one.
    auto runner = make_stage_runner(engine_args(), {});
    runner->add_request(speech_request(name, reference_info(entry, frames), greedy));
    EXPECT_EQ(run_all(*runner)[name].frames, want) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

Json hello(int max_new_tokens = 6) {
  return {{"text", "Hello there."}, {"voice", "Vivian"}, {"max_new_tokens", max_new_tokens}};
}

TEST(Qwen3TtsTalkerRunner, SeededSamplingIsReproducibleWhateverTheBatch) {
  const Json sampled = {{"temperature", 0.9}, {"top_k", 50}, {"seed", 7}};
  auto sampling_args = engine_args({{"subtalker_sampling_params", {{"do_sample", true}, {"temperature", 0.9}}}});
  auto alone = make_stage_runner(sampling_args, {});
  alone->add_request(speech_request("a", hello(), sampled));
  const Result first = run_all(*alone)["a"];
  ASSERT_EQ(first.frames.size(), 6u);

  auto batched = make_stage_runner(sampling_args, {});
  batched->add_request(speech_request("other", hello(9), {{"temperature", 0.9}, {"seed", 99}}));
  batched->add_request(speech_request("a", hello(), sampled));
  std::map<std::string, Result> results = run_all(*batched);
  EXPECT_EQ(results["a"].frames, first.frames);
  EXPECT_NE(results["other"].frames, std::vector<std::vector<int32_t>>(first.frames.begin(), first.frames.end()));

  // additional_information.seed wins over sampling_params.seed.
  auto overridden = make_stage_runner(sampling_args, {});
  Json info = hello();
  info["seed"] = 7;
  overridden->add_request(speech_request("a", info, {{"temperature", 0.9}, {"top_k", 50}, {"seed", 12345}}));
  EXPECT_EQ(run_all(*overridden)["a"].frames, first.frames);
}

TEST(Qwen3TtsTalkerRunner, StopsOnCodecEosAfterMinTokensAndNeverSamplesControlIds) {
  auto runner = make_stage_runner(engine_args(), {});
  // EOS strongly favoured: min_tokens (2) still forces two frames, then EOS ends the request
  // without a frame.
  runner->add_request(speech_request("eos", hello(20), {{"temperature", 0.0}, {"logit_bias", {{"166", 1000.0}}}}));
  // A speaker id strongly favoured: the control ids are suppressed whatever the bias.
  runner->add_request(speech_request("speaker", hello(5), {{"temperature", 0.0}, {"logit_bias", {{"877", 1000.0}}}}));
  std::map<std::string, Result> results = run_all(*runner);
  EXPECT_EQ(results["eos"].frames.size(), 2u);
  EXPECT_EQ(results["eos"].finish_reason, "stop");
  EXPECT_EQ(results["eos"].outputs, 3);
  EXPECT_EQ(results["speaker"].frames.size(), 5u);
  EXPECT_EQ(results["speaker"].finish_reason, "length");
  for (int32_t code : results["speaker"].code0s) EXPECT_LT(code, 64);

  // min_tokens from the request raises the floor.
  runner->add_request(
      speech_request("eos4", hello(20), {{"temperature", 0.0}, {"min_tokens", 4}, {"logit_bias", {{"166", 1000.0}}}}));
  EXPECT_EQ(run_all(*runner)["eos4"].frames.size(), 4u);
}

TEST(Qwen3TtsTalkerRunner, WaitsForKvBlocksAndSlotsAndAbortFreesThem) {
  // One request's reservation (22 prompt rows + 60 frames) takes all 6 blocks of 16 positions.
  auto runner = make_stage_runner(engine_args({{"num_gpu_blocks_override", 6}, {"max_model_len", 96}}), {});
  runner->add_request(speech_request("first", hello(60), {{"temperature", 0.0}}));
  runner->add_request(speech_request("second", hello(3), {{"temperature", 0.0}}));
  EXPECT_EQ(runner->running_requests(), 2u);
  std::vector<StageOutput> outputs = runner->step();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].request_id, "first");
  runner->abort("first");
  runner->abort("unknown");
  EXPECT_EQ(runner->running_requests(), 1u);
  std::map<std::string, Result> results = run_all(*runner);
  EXPECT_EQ(results.count("first"), 0u);
  EXPECT_EQ(results["second"].frames.size(), 3u);

  // A slot per running request: with max_num_seqs 1 the second waits for the first to finish.
  auto single = make_stage_runner(engine_args({{"max_num_seqs", 1}}), {});
  single->add_request(speech_request("x", hello(2), {{"temperature", 0.0}}));
  single->add_request(speech_request("y", hello(2), {{"temperature", 0.0}}));
  outputs = single->step();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].request_id, "x");
  results = run_all(*single);
  EXPECT_EQ(results["x"].frames.size(), 1u);
  EXPECT_EQ(results["y"].frames.size(), 2u);
}

void expect_rejected(StageRunner& runner, StageRequest request, ErrorCode code,
                     const std::vector<std::string>& fragments) {
  try {
    runner.add_request(std::move(request));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(Qwen3TtsTalkerRunner, BadRequestsAreInvalidArgumentsNamingTheField) {
  auto runner = make_stage_runner(engine_args({{"tts_max_instructions_length", 5}}), {});
  expect_rejected(*runner, speech_request("r", {{"text", ""}, {"voice", "aiden"}}), ErrorCode::kInvalidArgument,
                  {"text"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "nobody"}}), ErrorCode::kInvalidArgument,
                  {"voice 'nobody'", "aiden, dylan, eric, vivian"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "aiden"}, {"instructions", "too long"}}),
                  ErrorCode::kInvalidArgument, {"instructions", "8 characters", "at most 5"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", 3}}), ErrorCode::kInvalidArgument,
                  {"additional_information.voice"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "aiden"}, {"max_new_tokens", 0}}),
                  ErrorCode::kInvalidArgument, {"max_new_tokens"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "aiden"}}, {{"temperature", -1}}),
                  ErrorCode::kInvalidArgument, {"temperature"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "aiden"}}, {{"logit_bias", {{"5000", 1}}}}),
                  ErrorCode::kInvalidArgument, {"logit_bias token 5000"});
  EXPECT_EQ(runner->running_requests(), 0u);
  // The pipeline's sampling constraints are accepted (and stop on the checkpoint's own EOS id).
  runner->add_request(speech_request("ok", {{"text", "Hi"}, {"voice", "aiden"}, {"max_new_tokens", 1}},
                                     {{"detokenize", false}, {"stop_token_ids", {2150}}, {"temperature", 0.0}}));
  EXPECT_EQ(run_all(*runner)["ok"].frames.size(), 1u);
}

TEST(Qwen3TtsTalkerRunner, ConfigErrorsNameTheEngineArgument) {
  try {
    make_stage_runner(engine_args({{"subtalker_sampling_params", {{"top_q", 1}}}}), {});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("subtalker_sampling_params.top_q"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_stage_runner(engine_args({{"model", "/nonexistent"}}), {}), Error);
}

// Placement: the talker runs where its stage's device engine argument says ("auto": the stage
// process's first visible GPU, else the CPU); a GPU the process cannot see is refused by name.
TEST(Qwen3TtsTalkerRunner, RunsOnTheDeviceItsStageNames) {
  try {
    make_stage_runner(engine_args({{"device", "cuda:9"}}), {.stage_id = 3});
    FAIL() << "accepted an invisible GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("stage 3 engine argument device"), std::string::npos) << e.what();
  }
  auto runner = make_stage_runner(engine_args({{"device", "cpu"}}), {});
  runner->add_request(speech_request("x", hello(2)));
  EXPECT_EQ(run_all(*runner)["x"].frames.size(), 2u);
}

// ignore_eos: exactly max_new_tokens frames even where the weights make codec EOS the argmax.
TEST(Qwen3TtsTalkerRunner, IgnoreEosGivesExactlyMaxNewTokensFrames) {
  auto runner = make_stage_runner(engine_args(), {});
  runner->add_request(
      speech_request("eos", hello(7), {{"temperature", 0.0}, {"ignore_eos", true}, {"logit_bias", {{"166", 1000.0}}}}));
  const Result result = run_all(*runner)["eos"];
  EXPECT_EQ(result.frames.size(), 7u);
  EXPECT_EQ(result.finish_reason, "length");
  for (int32_t code : result.code0s) EXPECT_NE(code, kEos);
}

TEST(Qwen3TtsTalkerRunner, ServesTheRandomWeightWriterCheckpoint) {
  namespace tts = model::qwen3_tts;
  omni::testing::TempDir dir;
  tts::write_random_talker_checkpoint(dir.path(), tts::qwen3_tts_demo_shapes(), 3, tensor::DType::kBF16,
                                      OMNI_QWEN3_TOKENIZER_DIR);
  const tts::TalkerConfig config = tts::read_talker_config(dir.path());
  EXPECT_EQ(config.model_type, tts::TtsModelType::kCustomVoice);
  EXPECT_EQ(config.speaker_names(),
            std::vector<std::string>(std::begin(tts::kRandomTalkerSpeakers), std::end(tts::kRandomTalkerSpeakers)));
  EXPECT_EQ(*config.speaker_id("Vivian"), 3065);
  EXPECT_EQ(*config.language_id("english"), 2050);
  EXPECT_EQ(config.speaker_dialects.at("dylan"), "beijing_dialect");
  EXPECT_EQ(config.codec_eos_id, 2150);
  EXPECT_EQ(config.talker.vocab_size, 3072);
  EXPECT_EQ(config.code_predictor.vocab_size, 2048);
  EXPECT_EQ(config.text_vocab_size, 151936);

  // The Qwen2Tokenizer files: the real ids, the TTS tokens added.
  const auto tokenizer = model::Tokenizer::load(dir.path());
  EXPECT_EQ(tokenizer->encode("<|im_start|>assistant\n"), (std::vector<int32_t>{151644, 77091, 198}));
  EXPECT_EQ(tokenizer->encode("<tts_pad><tts_text_bos><tts_text_eod>"), (std::vector<int32_t>{151671, 151672, 151673}));

  auto runner = make_stage_runner(engine_args({{"model", dir.path().string()}}), {});
  runner->add_request(speech_request(
      "demo", {{"text", "Hello, world."}, {"voice", "Eric"}, {"language", "Chinese"}, {"max_new_tokens", 3}},
      {{"temperature", 0.0}, {"logit_bias", {{"2150", -1e9}}}}));
  const Result result = run_all(*runner)["demo"];
  ASSERT_EQ(result.frames.size(), 3u);
  EXPECT_EQ(result.finish_reason, "length");
  for (const auto& frame : result.frames) {
    for (int32_t code : frame) EXPECT_TRUE(code >= 0 && code < 2048) << code;
  }
}

}  // namespace
}  // namespace omni::runtime
