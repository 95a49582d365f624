// In-context (ICL) voice-clone prompts (model/qwen3_tts/prompt.h) against the float64 rows of
// scripts/reference/qwen3_tts_icl_prompt_reference.py (tests/data/tiny_qwen3_tts_base/
// icl_reference.json): the Base reference's x-vector, its codec frames from the speech-tokenizer
// encoder (computed here from the waveform) and a transcript, in the streaming and non-streaming
// layouts, within 1e-4; a transcript shorter than the reference's frames; the request errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/prompt.h"
#include "model/qwen3_tts/speech_encoder.h"
#include "model/qwen3_tts/talker.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_tts {
namespace {

namespace fs = std::filesystem;

const fs::path kBase = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base";
const fs::path kTokenizer = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_speech_encoder/speech_tokenizer";

std::vector<float> npy(const fs::path& path) {
  const tensor::Tensor t = tensor::load_npy(path);
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double{a[i]} - b[i]));
  return d;
}

struct Fixture {
  Talker talker{kBase, read_talker_config(kBase)};
  std::unique_ptr<text::Tokenizer> tokenizer = text::Tokenizer::load(kBase);
  Json ref = read_json_file(kBase / "icl_reference.json");

  SpeechRequest request() const {
    SpeechRequest r;
    r.text = ref["text"];
    r.language = ref["language"];
    r.ref_text = ref["ref_text"];
    r.speaker_embedding = npy(kBase / "reference_xvector.npy");
    const std::unique_ptr<SpeechEncoder> encoder = SpeechEncoder::load(kTokenizer);
    r.ref_codes = encoder->encode(npy(kBase / "reference_waveform.npy"));
    return r;
  }
};

const Fixture& fixture() {
  static const Fixture* f = new Fixture;
  return *f;
}

void expect_layout(bool non_streaming, const std::string& name) {
  const Fixture& f = fixture();
  SpeechRequest request = f.request();
  EXPECT_EQ(request.ref_codes.size(), f.ref["ref_frames"].get<size_t>() * 16);
  request.non_streaming_mode = non_streaming;
  const TalkerPrompt prompt = build_talker_prompt(request, f.talker, *f.tokenizer);
  const std::vector<float> rows = npy(kBase / f.ref[name]["rows"].get<std::string>());
  const std::vector<float> trailing = npy(kBase / f.ref[name]["trailing"].get<std::string>());
  ASSERT_EQ(prompt.rows.dim(0), f.ref[name]["num_rows"].get<int64_t>());
  EXPECT_LT(max_abs_diff(std::span(prompt.rows.data<float>(), rows.size()), rows), 1e-4);
  ASSERT_EQ(prompt.trailing.dim(0), f.ref[name]["num_trailing"].get<int64_t>());
  EXPECT_LT(max_abs_diff(std::span(prompt.trailing.data<float>(), trailing.size()), trailing), 1e-4);
  EXPECT_EQ(prompt.text_ids, f.ref["text_ids"].get<std::vector<int32_t>>());
  const TalkerPromptPlan plan = plan_talker_prompt(request, f.talker, *f.tokenizer);
  EXPECT_EQ(plan.num_rows(), static_cast<size_t>(prompt.rows.dim(0)));
  EXPECT_EQ(plan.num_ref_text, f.ref["ref_text_ids"].size());
}

TEST(IclPrompt, StreamingRowsMatchTheReference) { expect_layout(false, "streaming"); }

TEST(IclPrompt, NonStreamingRowsMatchTheReference) { expect_layout(true, "non_streaming"); }

TEST(IclPrompt, BaseDefaultsToTheStreamingLayout) {
  const Fixture& f = fixture();
  const TalkerPrompt prompt = build_talker_prompt(f.request(), f.talker, *f.tokenizer);
  EXPECT_EQ(prompt.rows.dim(0), f.ref["streaming"]["num_rows"].get<int64_t>());
}

TEST(IclPrompt, ShortTranscriptPadsTheTextTrack) {
  const Fixture& f = fixture();
  SpeechRequest request = f.request();
  request.text = "Hi.";
  request.ref_text = "Ok.";
  const TalkerPrompt prompt = build_talker_prompt(request, f.talker, *f.tokenizer);
  // 3 role rows, 6 codec-prefix rows, then one row per codec-track entry (bos + 17 frames).
  EXPECT_EQ(prompt.rows.dim(0), 3 + 6 + 18);
  ASSERT_EQ(prompt.trailing.dim(0), 1);
  EXPECT_LT(max_abs_diff(std::span(prompt.trailing.data<float>(), 32), std::span(prompt.tts_pad.data<float>(), 32)),
            1e-7);
}

void expect_invalid(const SpeechRequest& request, const std::string& field) {
  const Fixture& f = fixture();
  try {
    build_talker_prompt(request, f.talker, *f.tokenizer);
    FAIL() << "accepted; expected an error naming " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(IclPrompt, BadRequestsNameTheField) {
  SpeechRequest no_text = fixture().request();
  no_text.ref_text = "  ";
  expect_invalid(no_text, "ref_text");
  SpeechRequest partial = fixture().request();
  partial.ref_codes.pop_back();
  expect_invalid(partial, "ref_code");
  SpeechRequest outside = fixture().request();
  outside.ref_codes[5] = 64;
  expect_invalid(outside, "ref_code");
}

}  // namespace
}  // namespace omni::model::qwen3_tts
