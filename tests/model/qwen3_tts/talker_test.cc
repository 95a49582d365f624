// The Qwen3-TTS talker against the clean-room reference of tests/data/tiny_qwen3_tts (made by
// scripts/reference/make_tiny_qwen3_tts.py with transformers' Qwen3Model as the stacks): the
// talker stack's hidden states and codec logits, the code predictor's logits of every codebook,
// and the prefill rows of every prompt layout, each within 1e-4 relative error (the streaming text
// layout derived from the reference's non-streaming rows); plus the config reader and the request
// validation.
#include "model/qwen3_tts/talker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/prompt.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_tts {
namespace {

namespace fs = std::filesystem;
using tensor::Tensor;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts";
// The fixture's talker hidden size, codec vocabulary and codes per codebook.
constexpr int64_t kHidden = 32, kVocab = 1088, kCodebook = 64;

// max |got - want| / max |want|.
double relative_error(const float* got, const float* want, size_t n) {
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::abs(static_cast<double>(want[i])));
  }
  return err / mag;
}

// The reference checkpoint, loaded once for all tests (the talker's KV caches are per test).
struct TinyCheckpoint {
  Json reference = read_json_file(kDir / "reference.json");
  Talker talker{kDir, read_talker_config(kDir)};
  std::unique_ptr<text::Tokenizer> tokenizer = text::Tokenizer::load(kDir);
};

TinyCheckpoint& tiny() {
  static TinyCheckpoint* checkpoint = new TinyCheckpoint;
  return *checkpoint;
}

const Json& prompt_entry(const std::string& name) {
  for (const Json& e : tiny().reference["prompts"]) {
    if (e["name"] == name) return e;
  }
  throw std::runtime_error("no reference prompt " + name);
}

SpeechRequest request_of(const Json& e) {
  SpeechRequest r;
  r.text = e["text"];
  r.voice = e["voice"];
  r.language = e["language"];
  r.instructions = e["instructions"];
  return r;
}

TEST(TinyTalker, ConfigReadsIdsSpeakersAndLanguages) {
  const TalkerConfig& c = tiny().talker.config();
  EXPECT_EQ(c.model_type, TtsModelType::kCustomVoice);
  EXPECT_EQ(c.model_size, "1b7");
  EXPECT_EQ(c.talker.vocab_size, 1088);
  EXPECT_EQ(c.code_predictor.vocab_size, 64);
  EXPECT_EQ(c.num_code_groups, 16);
  EXPECT_EQ(c.codec_eos_id, 2150 - 1984);
  EXPECT_EQ(c.codec_pad_id, 2148 - 1984);
  EXPECT_EQ(c.codec_think_eos_id, 2157 - 1984);
  EXPECT_EQ(c.speaker_id("AIDEN"), c.speaker_id("aiden"));
  EXPECT_EQ(*c.speaker_id("Eric"), 2875 - 1984);
  EXPECT_FALSE(c.speaker_id("ethan"));
  EXPECT_EQ(*c.language_id("ENGLISH"), 2050 - 1984);
  EXPECT_FALSE(c.language_id("auto"));
  EXPECT_EQ(c.speaker_dialects.at("eric"), "sichuan_dialect");
  EXPECT_EQ(c.speaker_dialects.count("aiden"), 0u);
  EXPECT_EQ(c.speaker_names(), (std::vector<std::string>{"aiden", "dylan", "eric", "vivian"}));
  EXPECT_EQ(c.assistant_token_id, 263);
  EXPECT_EQ(c.tts_pad_token_id, 267);

  const TalkerGenerationDefaults d = read_talker_generation_defaults(kDir);
  EXPECT_EQ(d.top_k, 50);
  EXPECT_FLOAT_EQ(*d.temperature, 0.9f);
  EXPECT_FLOAT_EQ(*d.repetition_penalty, 1.05f);
  EXPECT_EQ(d.subtalker_do_sample, true);
  EXPECT_EQ(d.subtalker_top_k, 50);
  EXPECT_EQ(d.max_new_tokens, 8192);
}

TEST(TinyTalker, ConfigErrorsNameTheField) {
  Json config = read_json_file(kDir / "config.json");
  config["talker_config"]["codec_bos_id"] = 5000;
  try {
    parse_talker_config(config, "cfg.json");
    FAIL() << "an out-of-vocabulary codec id was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("codec id 5000"), std::string::npos) << e.what();
  }
  config = read_json_file(kDir / "config.json");
  config["talker_config"]["spk_is_dialect"]["aiden"] = "klingon";
  EXPECT_THROW(parse_talker_config(config, "cfg.json"), Error);
  config = read_json_file(kDir / "config.json");
  config["tts_model_type"] = "clone";
  EXPECT_THROW(parse_talker_config(config, "cfg.json"), Error);
}

TEST(TinyTalker, TalkerStackMatchesTransformers) {
  const Tensor inputs = tensor::load_npy(kDir / "talker_inputs.npy");
  const Tensor want_hidden = tensor::load_npy(kDir / "talker_hidden.npy");
  const Tensor want_logits = tensor::load_npy(kDir / "talker_logits.npy");
  const int64_t rows = inputs.shape()[0];
  // Two sequences in one batch: the first 8 rows prefilled earlier, then the rest as a chunk,
  // next to an unrelated sequence, so that the paged cache and batching are exercised.
  tiny().talker.init_kv_cache(8);
  ForwardBatch first;
  first.all_logits = true;
  for (int i = 0; i < 8; ++i) first.positions.push_back(i);
  first.seqs.push_back({0, 8, 0, {0, 1}, true});
  Tensor first_rows = Tensor::empty({8, inputs.shape()[1]}, tensor::DType::kF32);
  std::copy_n(inputs.data<float>(), 8 * kHidden, first_rows.data<float>());
  std::vector<float> logits;
  Tensor hidden;
  tiny().talker.forward(first, first_rows, logits, hidden);
  ASSERT_EQ(hidden.shape()[0], 8);
  EXPECT_LT(relative_error(hidden.data<float>(), want_hidden.data<float>(), 8 * kHidden), 1e-4);
  EXPECT_LT(relative_error(logits.data(), want_logits.data<float>(), 8 * kVocab), 1e-4);

  ForwardBatch rest;
  rest.all_logits = true;
  const int64_t n = rows - 8;
  for (int64_t i = 0; i < n; ++i) rest.positions.push_back(static_cast<int32_t>(8 + i));
  for (int64_t i = 0; i < 3; ++i) rest.positions.push_back(static_cast<int32_t>(i));
  rest.seqs.push_back({0, static_cast<int32_t>(n), 8, {0, 1}, true});
  rest.seqs.push_back({static_cast<int32_t>(n), 3, 0, {5}, true});
  Tensor rest_rows = Tensor::empty({n + 3, 32}, tensor::DType::kF32);
  std::copy_n(inputs.data<float>() + 8 * kHidden, n * kHidden, rest_rows.data<float>());
  std::copy_n(inputs.data<float>(), 3 * kHidden, rest_rows.data<float>() + n * kHidden);
  tiny().talker.forward(rest, rest_rows, logits, hidden);
  ASSERT_EQ(hidden.shape()[0], n + 3);
  EXPECT_LT(relative_error(hidden.data<float>(), want_hidden.data<float>() + 8 * kHidden, n * kHidden), 1e-4);
  EXPECT_LT(relative_error(logits.data(), want_logits.data<float>() + 8 * kVocab, n * kVocab), 1e-4);
  EXPECT_LT(relative_error(logits.data() + n * kVocab, want_logits.data<float>(), 3 * kVocab), 1e-4);
}

TEST(TinyTalker, CodePredictorMatchesTransformers) {
  const Tensor past = tensor::load_npy(kDir / "predictor_past_hidden.npy");
  const Tensor want = tensor::load_npy(kDir / "predictor_logits.npy");
  const std::vector<int32_t> codes = tiny().reference["predictor"]["codes"].get<std::vector<int32_t>>();
  tiny().talker.init_predictor_cache(3);
  // Slot 2 runs the reference frame; slot 0 runs a different frame in the same batches.
  Tensor hidden = Tensor::zeros({2, 32}, tensor::DType::kF32);
  std::copy_n(past.data<float>(), 32, hidden.data<float>() + 32);
  const std::vector<int32_t> slots{0, 2};
  std::vector<float> logits;
  tiny().talker.predictor_prefill(slots, hidden, std::vector<int32_t>{7, codes[0]}, logits);
  ASSERT_EQ(logits.size(), 2u * 64);
  EXPECT_LT(relative_error(logits.data() + 64, want.data<float>(), 64), 1e-4) << "codebook 1";
  for (int g = 2; g < 16; ++g) {
    tiny().talker.predictor_step(g, slots, std::vector<int32_t>{3, codes[g - 1]}, logits);
    EXPECT_LT(relative_error(logits.data() + 64, want.data<float>() + (g - 1) * kCodebook, 64), 1e-4)
        << "codebook " << g;
  }
  // A new frame in the slot starts from an empty cache: the same inputs give the same logits.
  tiny().talker.predictor_prefill(std::vector<int32_t>{2},
                                  Tensor::borrow(const_cast<float*>(past.data<float>()), {1, 32}, tensor::DType::kF32),
                                  std::vector<int32_t>{codes[0]}, logits);
  EXPECT_LT(relative_error(logits.data(), want.data<float>(), 64), 1e-4);
}

// The fixed-size frame steps need CUDA's decode attention; on the CPU the ordinary path stays.
TEST(TinyTalker, FrameStepsAreDeclinedOnTheCpu) {
  tiny().talker.init_predictor_cache(3);
  EXPECT_FALSE(tiny().talker.prepare_frame_steps({1, 2, 4}, true));
  EXPECT_FALSE(tiny().talker.has_frame_steps());
}

// forward_frames off the GPU builds each decode row on the host: text + the frame's embedding, the
// same rows forward() gets, so the same logits and hidden states bit for bit. Its decode steps need
// CUDA and are declined on the CPU; bad frames are refused naming the row.
TEST(TinyTalker, ForwardFramesOnTheCpuIsForwardOfTheFrameRows) {
  Talker& talker = tiny().talker;
  talker.init_kv_cache(8);
  talker.init_predictor_cache(3);
  EXPECT_FALSE(talker.prepare_decode_steps({1, 2, 4}, 4, true));
  EXPECT_FALSE(talker.has_decode_steps());
  // Two sequences with 3 and 20 cached positions (whatever the cache holds there).
  auto decode_batch = [] {
    ForwardBatch batch;
    batch.positions = {3, 20};
    batch.seqs.push_back({0, 1, 3, {4}, true});
    batch.seqs.push_back({1, 1, 20, {1, 6}, true});
    return batch;
  };
  std::vector<int32_t> frames(32);
  for (int32_t i = 0; i < 32; ++i)
    frames[i] = i == 16 ? static_cast<int32_t>(kVocab - 1) : static_cast<int32_t>((i * 7) % kCodebook);
  std::vector<float> text(2 * kHidden);
  for (size_t i = 0; i < text.size(); ++i) text[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  const std::vector<const float*> text_rows{text.data(), text.data() + kHidden};

  Tensor rows = Tensor::zeros({2, kHidden}, tensor::DType::kF32);
  for (size_t i = 0; i < 2; ++i) {
    std::copy_n(text_rows[i], kHidden, rows.data<float>() + i * kHidden);
    talker.add_frame_embedding(std::span(frames).subspan(i * 16, 16), rows.data<float>() + i * kHidden);
  }
  std::vector<float> want_logits, logits;
  Tensor want_hidden, hidden;
  talker.forward(decode_batch(), rows, want_logits, want_hidden);
  talker.forward_frames(decode_batch(), std::vector<int32_t>{2, 0}, frames, text_rows, logits, hidden);
  // The same bits, compared as bytes: the cache rows nobody wrote may hold NaNs, which the two
  // paths carry through identically but which never compare equal as floats.
  ASSERT_EQ(logits.size(), want_logits.size());
  EXPECT_EQ(std::memcmp(logits.data(), want_logits.data(), logits.size() * sizeof(float)), 0);
  ASSERT_EQ(hidden.shape(), want_hidden.shape());
  EXPECT_EQ(std::memcmp(hidden.raw(), want_hidden.raw(), hidden.nbytes()), 0);

  std::vector<int32_t> bad = frames;
  bad[16 + 5] = kCodebook;
  try {
    talker.forward_frames(decode_batch(), std::vector<int32_t>{2, 0}, bad, text_rows, logits, hidden);
    FAIL() << "a code outside its codebook was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("codebook 5 in row 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(talker.forward_frames(decode_batch(), std::vector<int32_t>{2}, frames, text_rows, logits, hidden),
               Error);
}

void expect_prompt(const Talker& talker, const text::Tokenizer& tokenizer, const SpeechRequest& request,
                   const Json& entry) {
  const TalkerPrompt prompt = build_talker_prompt(request, talker, tokenizer);
  EXPECT_EQ(prompt.text_ids, entry["text_ids"].get<std::vector<int32_t>>());
  const Tensor want = tensor::load_npy(kDir / entry["rows"].get<std::string>());
  ASSERT_EQ(prompt.rows.shape(), want.shape()) << entry["name"];
  EXPECT_LT(relative_error(prompt.rows.data<float>(), want.data<float>(), want.numel()), 1e-4) << entry["name"];
  EXPECT_EQ(codec_prefix(request, talker.config()), entry["codec_prefix"].get<std::vector<int32_t>>());
}

TEST(TinyTalker, CustomVoicePromptsMatchTheReference) {
  for (const char* name : {"custom_voice_english", "dialect_auto_instructed"}) {
    expect_prompt(tiny().talker, *tiny().tokenizer, request_of(prompt_entry(name)), prompt_entry(name));
  }
}

TEST(TinyTalker, VoiceDesignAndBasePromptsMatchTheReference) {
  TalkerConfig design = read_talker_config(kDir);
  design.model_type = TtsModelType::kVoiceDesign;
  const Talker design_talker(kDir, design);
  expect_prompt(design_talker, *tiny().tokenizer, request_of(prompt_entry("voice_design")),
                prompt_entry("voice_design"));

  TalkerConfig base = read_talker_config(kDir);
  base.model_type = TtsModelType::kBase;
  const Talker base_talker(kDir, base);
  SpeechRequest request = request_of(prompt_entry("base_xvector"));
  const Tensor xvector = tensor::load_npy(kDir / "base_xvector.npy");
  request.speaker_embedding.assign(xvector.data<float>(), xvector.data<float>() + xvector.numel());
  request.non_streaming_mode = true;  // the reference's layout; Base defaults to the streaming one
  expect_prompt(base_talker, *tiny().tokenizer, request, prompt_entry("base_xvector"));
}

// codec_embedding[id] alone.
std::vector<float> codec_row(const Talker& talker, int32_t id) {
  std::vector<float> row(kHidden, 0.0f);
  talker.add_codec_embedding(id, row.data());
  return row;
}

// want[i] = a[i] - b[i] + c[i] (c may be empty).
std::vector<float> combine(const float* a, const std::vector<float>& minus, const std::vector<float>& plus) {
  std::vector<float> out(a, a + kHidden);
  for (int64_t i = 0; i < kHidden; ++i) out[i] += (plus.empty() ? 0.0f : plus[i]) - minus[i];
  return out;
}

// The streaming text layout (docs/models/qwen3_tts.md), checked against the reference's non-streaming rows, which
// hold the same text-track vectors (P(X[i]) + C(pad), tts_eos + C(pad), tts_pad + C(bos)): the
// same rows up to the codec prefix, then P(X[0]) + C(bos) as the last row, and the decode steps'
// text track P(X[1]), ..., P(X[n-1]), tts_eos.
void expect_streaming_layout(const Talker& talker, SpeechRequest request, const Json& entry) {
  SCOPED_TRACE(entry["name"].get<std::string>());
  const Tensor reference = tensor::load_npy(kDir / entry["rows"].get<std::string>());
  const auto ref_rows = static_cast<size_t>(reference.shape()[0]);
  const size_t num_text = entry["text_ids"].size();
  const size_t before_text = ref_rows - num_text - 2;  // instructions, role, codec prefix
  const std::vector<float> pad = codec_row(talker, talker.config().codec_pad_id);
  const std::vector<float> bos = codec_row(talker, talker.config().codec_bos_id);
  auto ref_row = [&](size_t i) { return reference.data<float>() + i * kHidden; };

  request.non_streaming_mode = false;
  const TalkerPrompt prompt = build_talker_prompt(request, talker, *tiny().tokenizer);
  ASSERT_EQ(prompt.rows.shape(), (std::vector<int64_t>{static_cast<int64_t>(before_text + 1), kHidden}));
  EXPECT_LT(relative_error(prompt.rows.data<float>(), reference.data<float>(), before_text * kHidden), 1e-4);
  const std::vector<float> first = combine(ref_row(before_text), pad, bos);
  EXPECT_LT(relative_error(prompt.rows.data<float>() + before_text * kHidden, first.data(), kHidden), 1e-4);

  ASSERT_EQ(prompt.trailing.shape(), (std::vector<int64_t>{static_cast<int64_t>(num_text), kHidden}));
  for (size_t k = 0; k < num_text; ++k) {
    // Step k carries text token k+1; the last step the reference's tts_eos row.
    const std::vector<float> want = combine(ref_row(before_text + 1 + k), pad, {});
    EXPECT_LT(relative_error(prompt.trailing.data<float>() + k * kHidden, want.data(), kHidden), 1e-4) << "step " << k;
  }
  const std::vector<float> tts_pad = combine(ref_row(ref_rows - 1), bos, {});
  EXPECT_LT(relative_error(prompt.tts_pad.data<float>(), tts_pad.data(), kHidden), 1e-4);
  EXPECT_EQ(prompt.text_ids, entry["text_ids"].get<std::vector<int32_t>>());

  // The non-streaming layout's decode steps carry tts_pad only.
  request.non_streaming_mode = true;
  const TalkerPrompt non_streaming = build_talker_prompt(request, talker, *tiny().tokenizer);
  ASSERT_EQ(non_streaming.trailing.shape(), (std::vector<int64_t>{1, kHidden}));
  EXPECT_LT(relative_error(non_streaming.trailing.data<float>(), tts_pad.data(), kHidden), 1e-4);
}

TEST(TinyTalker, StreamingTextLayoutMatchesTheReferenceRows) {
  for (const char* name : {"custom_voice_english", "dialect_auto_instructed"}) {
    expect_streaming_layout(tiny().talker, request_of(prompt_entry(name)), prompt_entry(name));
  }
  TalkerConfig base = read_talker_config(kDir);
  base.model_type = TtsModelType::kBase;
  const Talker base_talker(kDir, base);
  SpeechRequest request = request_of(prompt_entry("base_xvector"));
  const Tensor xvector = tensor::load_npy(kDir / "base_xvector.npy");
  request.speaker_embedding.assign(xvector.data<float>(), xvector.data<float>() + xvector.numel());
  expect_streaming_layout(base_talker, request, prompt_entry("base_xvector"));
}

// Prompts built together (one text projection, as the talker stage builds those it admits in one
// step) are the prompts built alone, and the plan knows each one's rows before any is built.
TEST(TinyTalker, PromptsBuiltTogetherEqualPromptsBuiltAlone) {
  std::vector<SpeechRequest> requests;
  for (const char* name : {"custom_voice_english", "dialect_auto_instructed"}) {
    requests.push_back(request_of(prompt_entry(name)));
  }
  requests.push_back(requests[0]);
  requests.back().non_streaming_mode = false;
  std::vector<TalkerPromptPlan> plans;
  plans.reserve(requests.size());
  for (const SpeechRequest& request : requests)
    plans.push_back(plan_talker_prompt(request, tiny().talker, *tiny().tokenizer));
  const std::vector<TalkerPrompt> together = build_talker_prompts(plans, tiny().talker);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    const TalkerPrompt alone = build_talker_prompt(requests[i], tiny().talker, *tiny().tokenizer);
    EXPECT_EQ(together[i].rows.shape()[0], static_cast<int64_t>(plans[i].num_rows()));
    for (auto [a, b] : {std::pair{&together[i].rows, &alone.rows}, std::pair{&together[i].trailing, &alone.trailing},
                        std::pair{&together[i].tts_pad, &alone.tts_pad}}) {
      ASSERT_EQ(a->shape(), b->shape());
      EXPECT_TRUE(std::equal(a->data<float>(), a->data<float>() + a->numel(), b->data<float>()));
    }
    EXPECT_EQ(together[i].text_ids, alone.text_ids);
  }
  EXPECT_TRUE(build_talker_prompts({}, tiny().talker).empty());
}

TEST(TinyTalker, TheLayoutDefaultsToStreamingForBaseOnly) {
  SpeechRequest request;
  request.text = "Hi.";
  EXPECT_TRUE(uses_non_streaming_layout(request, TtsModelType::kCustomVoice));
  EXPECT_TRUE(uses_non_streaming_layout(request, TtsModelType::kVoiceDesign));
  EXPECT_FALSE(uses_non_streaming_layout(request, TtsModelType::kBase));
  request.non_streaming_mode = true;
  EXPECT_TRUE(uses_non_streaming_layout(request, TtsModelType::kBase));
  request.non_streaming_mode = false;
  EXPECT_FALSE(uses_non_streaming_layout(request, TtsModelType::kCustomVoice));

  // Built without the field, a Base prompt ends with the first text token (one row after the
  // codec prefix), a CustomVoice one with the whole text, tts_eos and tts_pad.
  TalkerConfig base = read_talker_config(kDir);
  base.model_type = TtsModelType::kBase;
  const Talker base_talker(kDir, base);
  SpeechRequest clone;
  clone.text = "Hi.";
  clone.speaker_embedding.assign(kHidden, 0.5f);
  const TalkerPrompt streamed = build_talker_prompt(clone, base_talker, *tiny().tokenizer);
  const size_t prefix = codec_prefix(clone, base).size();  // 6: nothink, bos, eos, x-vector, pad, bos
  EXPECT_EQ(streamed.rows.shape()[0], static_cast<int64_t>(3 + prefix - 1 + 1));
  EXPECT_EQ(streamed.trailing.shape()[0], static_cast<int64_t>(streamed.text_ids.size()));
  SpeechRequest custom;
  custom.text = "Hi.";
  custom.voice = "vivian";
  const TalkerPrompt whole = build_talker_prompt(custom, tiny().talker, *tiny().tokenizer);
  EXPECT_EQ(whole.rows.shape()[0], static_cast<int64_t>(3 + codec_prefix(custom, tiny().talker.config()).size() - 1 +
                                                        whole.text_ids.size() + 2));
  EXPECT_EQ(whole.trailing.shape()[0], 1);
}

void expect_invalid(const Talker& talker, const text::Tokenizer& tokenizer, const SpeechRequest& request,
                    const std::vector<std::string>& fragments, int max_instructions = kDefaultMaxInstructionsLength) {
  try {
    build_talker_prompt(request, talker, tokenizer, max_instructions);
    ADD_FAILURE() << "accepted: " << request.text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(TinyTalker, BadRequestsNameTheField) {
  SpeechRequest ok;
  ok.text = "Hi.";
  ok.voice = "vivian";
  EXPECT_NO_THROW(build_talker_prompt(ok, tiny().talker, *tiny().tokenizer));

  SpeechRequest r = ok;
  r.text = "  \n";
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"text", "empty"});
  r = ok;
  r.voice = "ethan";
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"voice 'ethan'", "aiden, dylan, eric, vivian"});
  r = ok;
  r.voice = "";
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"voice is required", "vivian"});
  r = ok;
  r.language = "Klingon";
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"language 'Klingon'", "Auto", "english"});
  r = ok;
  r.task_type = "VoiceDesign";
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"task_type 'VoiceDesign'", "CustomVoice"});
  r = ok;
  r.task_type = "Clone";
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"task_type 'Clone'", "CustomVoice, VoiceDesign, Base"});
  r = ok;
  r.instructions = std::string(11, 'x');
  expect_invalid(tiny().talker, *tiny().tokenizer, r, {"instructions", "11 characters", "at most 10"}, 10);
  // Characters, not bytes: ten two-byte characters fit a limit of ten.
  r.instructions.clear();
  for (int i = 0; i < 10; ++i) r.instructions += "\xc3\xa9";
  EXPECT_NO_THROW(build_talker_prompt(r, tiny().talker, *tiny().tokenizer, 10));

  TalkerConfig design = read_talker_config(kDir);
  design.model_type = TtsModelType::kVoiceDesign;
  const Talker design_talker(kDir, design);
  SpeechRequest d;
  d.text = "Hi.";
  expect_invalid(design_talker, *tiny().tokenizer, d, {"instructions are required"});

  TalkerConfig base = read_talker_config(kDir);
  base.model_type = TtsModelType::kBase;
  const Talker base_talker(kDir, base);
  SpeechRequest b;
  b.text = "Hi.";
  b.speaker_embedding.assign(31, 0.0f);
  expect_invalid(base_talker, *tiny().tokenizer, b, {"speaker_embedding", "32 floats", "got 31"});
}

TEST(TinyTalker, LanguageAndDialectChooseTheCodecPrefix) {
  const TalkerConfig& c = tiny().talker.config();
  SpeechRequest r;
  r.text = "x";
  r.voice = "dylan";
  r.language = "Chinese";  // a dialect speaker speaks its dialect for Chinese...
  EXPECT_EQ(codec_prefix(r, c)[2], *c.language_id("beijing_dialect"));
  r.language = "english";  // ...but not for another language
  EXPECT_EQ(codec_prefix(r, c)[2], *c.language_id("english"));
  r.voice = "vivian";
  r.language = "";  // Auto: the nothink form without a language
  EXPECT_EQ(codec_prefix(r, c), (std::vector<int32_t>{c.codec_nothink_id, c.codec_think_bos_id, c.codec_think_eos_id,
                                                      *c.speaker_id("vivian"), c.codec_pad_id, c.codec_bos_id}));
}

}  // namespace
}  // namespace omni::model::qwen3_tts
