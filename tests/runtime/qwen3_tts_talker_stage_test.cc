// The Qwen3-TTS talker stage (model/qwen3_tts/talker_stage_model.h on the "ar" runner) on the tiny reference checkpoint
// of tests/data/tiny_qwen3_tts: greedy generation of whole requests (prompt construction, talker steps, the code
// predictor and the talker's logits processors) gives exactly the reference's codes, batched or alone; seeded sampling
// is reproducible; the streaming text layout feeds one text token per frame; generation_config.json's defaults sit
// under the deploy's and the request's; Base and VoiceDesign checkpoints serve; EOS, max_new_tokens, min_tokens,
// suppression, KV reservation, abort and bad requests behave as the stage model's header says.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/prompt.h"
#include "model/qwen3_tts/random_checkpoint.h"
#include "model/qwen3_tts/talker.h"
#include "runtime/ar_stage_runner.h"
#include "runtime/stage_runner.h"
#include "support/temp_dir.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::runtime {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts";
constexpr int kEos = 2150 - 1984;

Json engine_args(const Json& extra = Json::object()) {
  Json args = {{"runner", std::string(kArRunnerKind)},
               {"stage_model", "qwen3_tts_talker"},
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

TEST(Qwen3TtsTalkerStage, GreedyGenerationMatchesTheReference) {
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

// An x-vector-only voice clone on the tiny Base checkpoint (tests/data/tiny_qwen3_tts_base): with
// the reference audio's x-vector as the speaker embedding, greedy generation in Base's streaming
// text layout gives the reference's codes, run after run.
TEST(Qwen3TtsTalkerStage, XVectorCloneMatchesTheReference) {
  const fs::path base = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base";
  const Json ref = read_json_file(base / "reference.json");
  const Json& clone = ref["clone"];
  const tensor::Tensor xvector = tensor::load_npy(base / "reference_xvector.npy");
  const std::vector<float> embedding(xvector.data<float>(), xvector.data<float>() + xvector.numel());
  const int frames = ref["max_frames"];
  const Json info = {{"text", clone["text"]},
                     {"language", clone["language"]},
                     {"task_type", "Base"},
                     {"speaker_embedding", embedding},
                     {"max_new_tokens", frames}};
  const auto want = clone["frames"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(want.size(), static_cast<size_t>(frames));
  for (int run = 0; run < 2; ++run) {
    auto runner = make_stage_runner(engine_args({{"model", base.string()}}), {});
    runner->add_request(speech_request("clone", info, {{"temperature", 0.0}}));
    const Result result = run_all(*runner)["clone"];
    EXPECT_EQ(result.frames, want) << "run " << run;
    EXPECT_EQ(result.code0s, clone["code0s"].get<std::vector<int32_t>>()) << "run " << run;
  }
}

// The checkpoint's generation_config.json supplies the talker's and the sub-talker's defaults;
// the deploy's subtalker_sampling_params and the request's sampling_params sit above them.
TEST(Qwen3TtsTalkerStage, GenerationConfigDefaultsSitUnderTheDeployAndTheRequest) {
  // A copy of the reference checkpoint whose generation_config.json asks for greedy decoding of
  // both (the reference's own settings: repetition penalty 1.05, min 2 frames).
  omni::testing::TempDir dir;
  for (const fs::directory_entry& file : fs::directory_iterator(kDir)) {
    fs::copy_file(file.path(), dir.path() / file.path().filename());
  }
  Json config = read_json_file(kDir / "generation_config.json");
  config["do_sample"] = false;
  config["subtalker_dosample"] = false;
  dir.write("generation_config.json", config.dump());
  Json args = engine_args({{"model", dir.path().string()}});
  args.erase("subtalker_sampling_params");

  const int frames = reference()["max_frames"];
  const Json& entry = reference()["prompts"][0];
  ASSERT_TRUE(entry.contains("frames"));
  const auto want = entry["frames"].get<std::vector<std::vector<int32_t>>>();
  auto frames_of = [&](const Json& engine, const Json& sampling) {
    auto runner = make_stage_runner(engine, {});
    runner->add_request(speech_request("r", reference_info(entry, frames), sampling));
    return run_all(*runner)["r"].frames;
  };
  // No sampling parameters anywhere: generation_config.json's greedy decoding gives the reference.
  EXPECT_EQ(frames_of(args, Json::object()), want);
  // The deploy's subtalker_sampling_params override subtalker_dosample...
  Json sampled_subtalker = args;
  sampled_subtalker["subtalker_sampling_params"] = {{"do_sample", true}, {"temperature", 0.9}};
  sampled_subtalker["seed"] = 3;
  std::vector<std::vector<int32_t>> got = frames_of(sampled_subtalker, Json::object());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got[0][0], want[0][0]) << "the talker's first code stays greedy";
  EXPECT_NE(got[0], want[0]) << "the sub-talker samples";
  // ...and the request's temperature (with the YAML's defaults merged in) overrides do_sample.
  got = frames_of(args, {{"temperature", 0.9}, {"top_k", 50}, {"seed", 5}});
  std::vector<int32_t> code0s, want_code0s;
  for (const auto& frame : got) code0s.push_back(frame[0]);
  for (const auto& frame : want) want_code0s.push_back(frame[0]);
  EXPECT_NE(code0s, want_code0s);
}

Json hello(int max_new_tokens = 6) {
  return {{"text", "Hello there."}, {"voice", "Vivian"}, {"max_new_tokens", max_new_tokens}};
}

TEST(Qwen3TtsTalkerStage, SeededSamplingIsReproducibleWhateverTheBatch) {
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

// The lowest index of the largest of the first `n` values: greedy sampling.
int32_t argmax(const float* values, int n) {
  return static_cast<int32_t>(std::max_element(values, values + n) - values);
}

// The streaming text layout (non_streaming_mode false) feeds the text one token per frame: decode
// step k adds text token k+1, then tts_eos, then tts_pad (docs/models/qwen3_tts.md). The runner's
// greedy frames equal a replay of that loop on the talker itself.
TEST(Qwen3TtsTalkerStage, StreamingLayoutFeedsTheTextOneTokenPerFrame) {
  namespace tts = model::qwen3_tts;
  // Greedy without penalty and with EOS out of reach, so that every code is a plain argmax.
  const Json greedy = {{"temperature", 0.0}, {"repetition_penalty", 1.0}, {"logit_bias", {{"166", -1e9}}}};
  tts::SpeechRequest speech;
  speech.text = "Hi there.";
  speech.voice = "aiden";
  speech.non_streaming_mode = false;
  tts::Talker talker(kDir, tts::read_talker_config(kDir));
  const tts::TalkerPrompt prompt = tts::build_talker_prompt(speech, talker, *text::Tokenizer::load(kDir));
  const int frames = static_cast<int>(prompt.trailing.shape()[0]) + 3;  // past the end of the text

  auto runner = make_stage_runner(engine_args(), {});
  runner->add_request(speech_request(
      "s", {{"text", speech.text}, {"voice", "aiden"}, {"non_streaming_mode", false}, {"max_new_tokens", frames}},
      greedy));
  const Result result = run_all(*runner)["s"];
  ASSERT_EQ(result.frames.size(), static_cast<size_t>(frames));

  const int64_t h = talker.hidden_size();
  const int control_start = talker.codec_vocab_size() - 1024;
  talker.init_kv_cache(4);
  talker.init_predictor_cache(1);
  const std::vector<int32_t> slot{0};
  std::vector<int32_t> frame;
  int32_t context = 0;
  for (int f = 0; f < frames; ++f) {
    SCOPED_TRACE(f);
    tensor::Tensor rows = prompt.rows;
    if (f > 0) {
      rows = tensor::Tensor::empty({1, h}, tensor::DType::kF32);
      const int64_t k = f - 1;
      const float* text =
          k < prompt.trailing.shape()[0] ? prompt.trailing.data<float>() + k * h : prompt.tts_pad.data<float>();
      std::copy_n(text, h, rows.data<float>());
      talker.add_frame_embedding(frame, rows.data<float>());
    }
    model::ForwardBatch batch;
    const auto length = static_cast<int32_t>(rows.shape()[0]);
    for (int32_t p = 0; p < length; ++p) batch.positions.push_back(context + p);
    batch.seqs.push_back({0, length, context, {0, 1, 2, 3}, true});
    context += length;
    std::vector<float> logits;
    tensor::Tensor hidden;
    talker.forward(batch, rows, logits, hidden);
    frame = {argmax(logits.data(), control_start)};
    talker.predictor_prefill(slot, hidden, frame, logits);
    frame.push_back(argmax(logits.data(), talker.codebook_size()));
    for (int group = 2; group < talker.num_code_groups(); ++group) {
      talker.predictor_step(group, slot, std::vector<int32_t>{frame.back()}, logits);
      frame.push_back(argmax(logits.data(), talker.codebook_size()));
    }
    EXPECT_EQ(result.frames[f], frame);
  }

  // The layout matters: the same request laid out non-streaming speaks differently.
  runner->add_request(speech_request(
      "n", {{"text", speech.text}, {"voice", "aiden"}, {"non_streaming_mode", true}, {"max_new_tokens", frames}},
      greedy));
  EXPECT_NE(run_all(*runner)["n"].frames, result.frames);
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

// A copy of the reference checkpoint whose config.json says `tts_model_type` (and, for Base, has
// the speaker encoder's config, as the released Base checkpoints do).
void write_variant(const fs::path& dir, const std::string& tts_model_type) {
  for (const fs::directory_entry& file : fs::directory_iterator(kDir)) {
    fs::copy_file(file.path(), dir / file.path().filename());
  }
  Json config = read_json_file(kDir / "config.json");
  config["tts_model_type"] = tts_model_type;
  if (tts_model_type == "base") config["speaker_encoder_config"] = {{"enc_dim", 32}, {"sample_rate", 24000}};
  std::ofstream(dir / "config.json") << config.dump();
}

TEST(Qwen3TtsTalkerStage, ServesBaseAndVoiceDesignCheckpoints) {
  const Json greedy = {{"temperature", 0.0}};
  omni::testing::TempDir base_dir;
  write_variant(base_dir.path(), "base");
  auto base = make_stage_runner(engine_args({{"model", base_dir.path().string()}}), {});
  const Json xvector = std::vector<float>(32, 0.25f);
  Json clone = {{"text", "Hi there."}, {"speaker_embedding", xvector}, {"max_new_tokens", 5}};
  base->add_request(speech_request("default", clone, greedy));
  clone["non_streaming_mode"] = false;
  base->add_request(speech_request("streaming", clone, greedy));
  clone["non_streaming_mode"] = true;
  base->add_request(speech_request("non_streaming", clone, greedy));
  std::map<std::string, Result> results = run_all(*base);
  ASSERT_EQ(results["default"].frames.size(), 5u);
  // Base lays the text out streaming unless the request asks otherwise (vLLM-Omni's default).
  EXPECT_EQ(results["default"].frames, results["streaming"].frames);
  EXPECT_NE(results["default"].frames, results["non_streaming"].frames);
  expect_rejected(*base, speech_request("r", {{"text", "Hi"}, {"speaker_embedding", std::vector<float>(31, 0.0f)}}),
                  ErrorCode::kInvalidArgument, {"speaker_embedding", "32 floats", "got 31"});
  expect_rejected(*base, speech_request("r", {{"text", "Hi"}, {"task_type", "CustomVoice"}, {"voice", "aiden"}}),
                  ErrorCode::kInvalidArgument, {"task_type 'CustomVoice'", "Base checkpoint"});

  omni::testing::TempDir design_dir;
  write_variant(design_dir.path(), "voice_design");
  auto design = make_stage_runner(engine_args({{"model", design_dir.path().string()}}), {});
  design->add_request(speech_request(
      "d", {{"text", "Hi there."}, {"instructions", "A calm, deep voice."}, {"max_new_tokens", 4}}, greedy));
  EXPECT_EQ(run_all(*design)["d"].frames.size(), 4u);
  expect_rejected(*design, speech_request("r", {{"text", "Hi"}}), ErrorCode::kInvalidArgument,
                  {"instructions are required"});
}

TEST(Qwen3TtsTalkerStage, StopsOnCodecEosAfterMinTokensAndNeverSamplesControlIds) {
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

TEST(Qwen3TtsTalkerStage, WaitsForKvBlocksAndSlotsAndAbortFreesThem) {
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

TEST(Qwen3TtsTalkerStage, BadRequestsAreInvalidArgumentsNamingTheField) {
  auto runner = make_stage_runner(engine_args({{"tts_max_instructions_length", 5}}), {});
  expect_rejected(*runner, speech_request("r", {{"text", ""}, {"voice", "aiden"}}), ErrorCode::kInvalidArgument,
                  {"text"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "nobody"}}), ErrorCode::kInvalidArgument,
                  {"voice 'nobody'", "aiden, dylan, eric, vivian"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "aiden"}, {"instructions", "too long"}}),
                  ErrorCode::kInvalidArgument, {"instructions", "8 characters", "at most 5"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", 3}}), ErrorCode::kInvalidArgument,
                  {"additional_information.voice"});
  expect_rejected(*runner, speech_request("r", {{"text", "Hi"}, {"voice", "aiden"}, {"non_streaming_mode", "yes"}}),
                  ErrorCode::kInvalidArgument, {"additional_information.non_streaming_mode"});
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

TEST(Qwen3TtsTalkerStage, ConfigErrorsNameTheEngineArgument) {
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
TEST(Qwen3TtsTalkerStage, RunsOnTheDeviceItsStageNames) {
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
TEST(Qwen3TtsTalkerStage, IgnoreEosGivesExactlyMaxNewTokensFrames) {
  auto runner = make_stage_runner(engine_args(), {});
  runner->add_request(
      speech_request("eos", hello(7), {{"temperature", 0.0}, {"ignore_eos", true}, {"logit_bias", {{"166", 1000.0}}}}));
  const Result result = run_all(*runner)["eos"];
  EXPECT_EQ(result.frames.size(), 7u);
  EXPECT_EQ(result.finish_reason, "length");
  for (int32_t code : result.code0s) EXPECT_NE(code, kEos);
}

TEST(Qwen3TtsTalkerStage, ServesTheRandomWeightWriterCheckpoint) {
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
  const auto tokenizer = text::Tokenizer::load(dir.path());
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

namespace omni::runtime {
namespace {

// In-context cloning on the tiny Base checkpoint, greedy: the reference's x-vector, its codec
// frames (tests/data/tiny_qwen3_tts_speech_encoder/codes.npy) and a transcript. The frames are the
// same run alone, again, or batched with other requests; they differ from the x-vector-only clone
// and from a clone with another transcript; a request without ref_text is refused naming it.
TEST(Qwen3TtsTalkerStage, InContextCloneIsDeterministicAndConditionedOnTheReference) {
  const fs::path base = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base";
  const tensor::Tensor xv = tensor::load_npy(base / "reference_xvector.npy");
  const std::vector<float> xvector(xv.data<float>(), xv.data<float>() + xv.numel());
  const tensor::Tensor codes =
      tensor::load_npy(fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_speech_encoder/codes.npy");  // [16, F]
  const int64_t frames = codes.dim(1);
  std::vector<int32_t> ref_code(static_cast<size_t>(frames * 16));
  for (int64_t q = 0; q < 16; ++q) {
    for (int64_t f = 0; f < frames; ++f) ref_code[f * 16 + q] = codes.data<int32_t>()[q * frames + f];
  }
  const Json greedy = {{"temperature", 0.0}};
  const Json icl = {{"text", "Nice day."},
                    {"language", "English"},
                    {"speaker_embedding", xvector},
                    {"ref_code", ref_code},
                    {"ref_text", "Hello there, a test."},
                    {"max_new_tokens", 6}};
  auto runner = make_stage_runner(engine_args({{"model", base.string()}}), {});
  runner->add_request(speech_request("alone", icl, greedy));
  const std::vector<std::vector<int32_t>> alone = run_all(*runner)["alone"].frames;
  ASSERT_FALSE(alone.empty());
  Json xvector_only = icl;
  xvector_only.erase("ref_code");
  xvector_only.erase("ref_text");
  Json other_text = icl;
  other_text["ref_text"] = "Something else.";
  runner->add_request(speech_request("again", icl, greedy));
  runner->add_request(speech_request("xvector", xvector_only, greedy));
  runner->add_request(speech_request("other", other_text, greedy));
  std::map<std::string, Result> batched = run_all(*runner);
  EXPECT_EQ(batched["again"].frames, alone);
  EXPECT_NE(batched["xvector"].frames, alone);
  EXPECT_NE(batched["other"].frames, alone);
  Json no_text = icl;
  no_text.erase("ref_text");
  expect_rejected(*runner, speech_request("r", no_text, greedy), ErrorCode::kInvalidArgument, {"ref_text"});
}

}  // namespace
}  // namespace omni::runtime
