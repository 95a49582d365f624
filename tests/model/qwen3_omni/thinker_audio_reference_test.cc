// The Qwen3-Omni thinker on prompts with audio against Hugging Face transformers 5.17
// (Qwen3OmniMoeProcessor and Qwen3OmniMoeForConditionalGeneration on the CPU in float32), on the
// tiny checkpoint of tests/data/tiny_qwen3_omni and the references of
// scripts/reference/qwen3_omni_audio_reference.py (tests/data/tiny_qwen3_omni/audio): the log-mel
// features (1e-4), the valid frames, the token ids after placeholder expansion, the 3-D positions,
// the audio tower's rows (1e-4 relative), the thinker's logits at every prompt position (1e-4
// relative) and the greedy continuation decoded through the paged KV cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "logit_checks.h"
#include "model/model_registry.h"
#include "model/qwen3_omni/thinker.h"
#include "model/qwen3_omni/thinker_audio.h"
#include "model/qwen3_omni/thinker_prompt.h"
#include "model/safetensors.h"
#include "model/stage_model_registry.h"
#include "tensor/backend.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_omni {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni";
const fs::path kAudioDir = kDataDir / "audio";
constexpr double kMaxRelativeError = 1e-4;
constexpr double kMaxFeatureError = 1e-4;

struct Case {
  fs::path dir;
  Json ref;
  std::vector<tensor::Tensor> waveforms;
  std::vector<std::span<const float>> audios;
};

Case load_case(size_t c) {
  Case out;
  const Json all = read_json_file(kAudioDir / "reference.json");
  out.ref = all.at("cases").at(c);
  out.dir = kAudioDir / ("case_" + std::to_string(c));
  for (size_t k = 0; k < out.ref.at("samples").size(); ++k) {
    out.waveforms.push_back(tensor::load_npy(out.dir / ("waveform_" + std::to_string(k) + ".npy")));
  }
  for (const auto& w : out.waveforms) out.audios.emplace_back(w.data<float>(), static_cast<size_t>(w.numel()));
  return out;
}

class ThinkerAudioReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path ckpt = kDataDir / "per_expert";
    config_ = new Json(read_json_file(ckpt / "config.json"));
    audio_ = new ThinkerAudio(ckpt, *config_, Checkpoint::open(ckpt), {});
  }
  static void TearDownTestSuite() {
    delete audio_;
    delete config_;
  }

  size_t num_cases() const { return read_json_file(kAudioDir / "reference.json").at("cases").size(); }

  static Json* config_;
  static ThinkerAudio* audio_;
};

Json* ThinkerAudioReferenceTest::config_ = nullptr;
ThinkerAudio* ThinkerAudioReferenceTest::audio_ = nullptr;

TEST_F(ThinkerAudioReferenceTest, LogMelFeaturesAndValidFramesMatchTheProcessor) {
  for (size_t c = 0; c < num_cases(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Case k = load_case(c);
    const tensor::Tensor want = tensor::load_npy(k.dir / "input_features.npy");  // [audios, mels, frames]
    const std::vector<LogMelFeatures> got = audio_->features().extract(k.audios);
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.dim(0));
    const auto lengths = k.ref.at("feature_lengths").get<std::vector<int64_t>>();
    for (size_t a = 0; a < got.size(); ++a) {
      ASSERT_EQ(got[a].mel_bins, want.dim(1));
      ASSERT_EQ(got[a].frames, want.dim(2));
      EXPECT_EQ(got[a].valid_frames, lengths[a]) << "audio " << a;
      const float* w = want.data<float>() + a * want.dim(1) * want.dim(2);
      double err = 0.0;
      for (size_t i = 0; i < got[a].values.size(); ++i) err = std::max(err, std::abs(double(got[a].values[i]) - w[i]));
      EXPECT_LE(err, kMaxFeatureError) << "audio " << a;
    }
  }
}

// The tower's rows of every case from `audio`, each row within `tolerance` of transformers'.
void expect_reference_rows(const ThinkerAudio& audio, double tolerance) {
  for (size_t c = 0; c < read_json_file(kAudioDir / "reference.json").at("cases").size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Case k = load_case(c);
    const EncodedAudio got = audio.encode(k.audios);
    EXPECT_EQ(got.rows_per_audio, k.ref.at("audio_token_counts").get<std::vector<int64_t>>());
    const tensor::Tensor want = tensor::load_npy(k.dir / "audio_features.npy");
    ASSERT_EQ(got.rows.shape(), want.shape());
    for (int64_t r = 0; r < want.dim(0); ++r) {
      EXPECT_LE(relative_error(got.rows.data<float>() + r * want.dim(1), want.data<float>() + r * want.dim(1),
                               static_cast<size_t>(want.dim(1))),
                tolerance)
          << "row " << r;
    }
  }
}

TEST_F(ThinkerAudioReferenceTest, AudioTowerRowsMatchTransformers) {
  expect_reference_rows(*audio_, kMaxRelativeError);
}

// The tower on a CUDA device: in float32 as close as on the CPU, in bfloat16 within 2e-2.
TEST_F(ThinkerAudioReferenceTest, AudioTowerOnCudaMatchesTransformers) {
  if (!cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  const fs::path ckpt = kDataDir / "per_expert";
  const Checkpoint weights = Checkpoint::open(ckpt);
  expect_reference_rows(ThinkerAudio(ckpt, *config_, weights, {tensor::Device::cuda(0), tensor::DType::kF32}),
                        kMaxRelativeError);
  expect_reference_rows(ThinkerAudio(ckpt, *config_, weights, {tensor::Device::cuda(0), tensor::DType::kBF16}),
                        kBfloat16Tolerance);
}

// The thinker's prompt logits (within `tolerance`) and, when `greedy`, its greedy tokens of every
// case, with the model and its audio tower loaded by `options`.
void expect_reference_prompts(const CausalLmLoadOptions& options, PositionErrors errors, bool greedy);

TEST_F(ThinkerAudioReferenceTest, ExpandedIdsPositionsLogitsAndGreedyTokensMatchTransformers) {
  expect_reference_prompts(CausalLmLoadOptions{}, PositionErrors::float32(kMaxRelativeError), true);
}

// The same on a CUDA device, the tower there too: in float32 as on the CPU; in bfloat16 as close
// to the references as transformers' own bfloat16 run, or within 2e-2, away from routing near-ties
// (logit_checks.h).
TEST_F(ThinkerAudioReferenceTest, Float32OnCudaMatchesTransformers) {
  if (!cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  expect_reference_prompts(CausalLmLoadOptions{.device = tensor::Device::cuda(0), .dtype = tensor::DType::kF32},
                           PositionErrors::float32(kMaxRelativeError), true);
}

TEST_F(ThinkerAudioReferenceTest, Bfloat16OnCudaStaysWithinTransformersBfloat16Error) {
  if (!cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  expect_reference_prompts(CausalLmLoadOptions{.device = tensor::Device::cuda(0), .dtype = tensor::DType::kBF16},
                           PositionErrors::bfloat16(), false);
}

void expect_reference_prompts(const CausalLmLoadOptions& options, PositionErrors errors, bool greedy) {
  const fs::path ckpt = kDataDir / "per_expert";
  const Json config = read_json_file(ckpt / "config.json");
  const ThinkerAudio audio_input(ckpt, config, Checkpoint::open(ckpt),
                                 {options.device, options.dtype.value_or(tensor::DType::kF32)});
  const auto tokenizer = text::Tokenizer::load(ckpt);
  const ThinkerTokenIds ids = parse_thinker_token_ids(config, "config.json");
  std::unique_ptr<CausalLm> model = builtin_model_registry().create_causal_lm(ckpt, options);
  const int vocab = model->info().vocab_size;
  const Json all = read_json_file(kAudioDir / "reference.json");
  for (size_t c = 0; c < all.at("cases").size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Case k = load_case(c);
    const EncodedAudio audio = audio_input.encode(k.audios);
    const std::vector<int32_t> prompt = tokenizer->encode(k.ref.at("text").get<std::string>());
    const std::vector<int32_t> expanded = expand_audio_placeholders(prompt, ids.audio_token, audio.rows_per_audio);
    ASSERT_EQ(expanded, k.ref.at("input_ids").get<std::vector<int32_t>>());

    const ThinkerPositions positions = thinker_positions(expanded, ids);
    const tensor::Tensor want_positions = tensor::load_npy(k.dir / "position_ids.npy");  // [3, n]
    ASSERT_EQ(want_positions.numel(), static_cast<int64_t>(positions.streams.size()));
    // Stored as int32 (text and audio positions are whole).
    EXPECT_TRUE(std::equal(positions.streams.begin(), positions.streams.end(), want_positions.data<int32_t>(),
                           [](float got, int32_t want) { return got == static_cast<float>(want); }));
    EXPECT_EQ(positions.rope_delta, static_cast<float>(k.ref.at("rope_delta").get<int32_t>()));

    const int n = static_cast<int>(expanded.size());
    const int blocks = (n + 32) / kKvBlockSize + 1;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    model->init_kv_cache(blocks);
    ForwardBatch batch{expanded, {}, {SequenceSlice{0, n, 0, table, true}}, /*all_logits=*/true};
    for (int t = 0; t < n; ++t) batch.positions.push_back(static_cast<int32_t>(positions.streams[t]));
    batch.mrope_positions = positions.streams;
    batch.input_rows = audio_rows(expanded, ids.audio_token);
    batch.input_row_values.assign(audio.rows.data<float>(), audio.rows.data<float>() + audio.rows.numel());
    std::vector<float> logits;
    model->forward(batch, logits);
    const tensor::Tensor want = tensor::load_npy(k.dir / "logits.npy");
    ASSERT_EQ(logits.size(), static_cast<size_t>(want.numel()));
    errors.add_prompt(position_errors(logits.data(), want.data<float>(), n, vocab), load_bfloat16_reference(k.dir),
                      "case " + std::to_string(c));
    if (!greedy) continue;

    const auto continuation = k.ref.at("greedy_continuation").get<std::vector<int32_t>>();
    const float* last = &logits[(n - 1) * vocab];
    int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    std::vector<int32_t> generated;
    std::vector<float> step;
    for (size_t i = 0; i < continuation.size(); ++i) {
      generated.push_back(next);
      if (i + 1 == continuation.size()) break;
      const int32_t pos = n + static_cast<int32_t>(i) + static_cast<int32_t>(positions.rope_delta);
      ForwardBatch decode{{next}, {pos}, {SequenceSlice{0, 1, n + static_cast<int32_t>(i), table, true}}, false};
      model->forward(decode, step);
      next = static_cast<int32_t>(std::max_element(step.begin(), step.end()) - step.begin());
    }
    EXPECT_EQ(generated, continuation);
  }
  errors.check();
}

TEST(ThinkerPrompt, ExpandsEachPlaceholderToItsAudiosRowsAndRefusesAMismatch) {
  const std::vector<int32_t> prompt{1, 7, 9, 8, 2, 7, 9, 8};
  const std::vector<int64_t> counts{3, 1};
  EXPECT_EQ(expand_audio_placeholders(prompt, 9, counts), (std::vector<int32_t>{1, 7, 9, 9, 9, 8, 2, 7, 9, 8}));
  EXPECT_EQ(audio_rows(expand_audio_placeholders(prompt, 9, counts), 9), (std::vector<int32_t>{2, 3, 4, 8}));
  const std::vector<int64_t> three{1, 1, 1};
  try {
    expand_audio_placeholders(prompt, 9, three);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the prompt has 2 audio placeholders for 3 audios"), std::string::npos)
        << e.what();
  }
}

TEST(ThinkerPrompt, AudioOutputLengthIsTheReferenceFormula) {
  // (((L % 100 - 1) // 2 + 1 - 1) // 2 + 1 - 1) // 2 + 1 + (L // 100) * 13, Python's floor division.
  for (int64_t frames = 0; frames < 2000; ++frames) {
    const int64_t rest = frames % 100;
    const auto floor_div2 = [](int64_t x) { return x >= 0 ? x / 2 : -((-x + 1) / 2); };
    const int64_t a = floor_div2(rest - 1) + 1, b = floor_div2(a - 1) + 1,
                  want = floor_div2(b - 1) + 1 + frames / 100 * 13;
    ASSERT_EQ(audio_output_length(frames, 50), want) << frames;
  }
  EXPECT_EQ(audio_output_length(937, 50), 122);
  EXPECT_EQ(audio_output_length(1000, 50), 130);
}

}  // namespace
}  // namespace omni::model::qwen3_omni

namespace omni::model::qwen3_omni {
namespace {

// The thinker's stage model tells the server the rate of the audio it reads: the feature
// extractor's, when the checkpoint has an audio tower and a preprocessor config; none otherwise.
TEST(ThinkerAudioFacts, TheStageModelDescribesItsAudioInputRate) {
  const fs::path ckpt = kDataDir / "per_expert";
  EXPECT_TRUE(has_audio_input(ckpt));
  EXPECT_EQ(builtin_stage_models()
                .describe(config::ExecutionType::kLlmAr, std::string(kThinkerStageModel), ckpt)
                .audio_input_sample_rate,
            16000);
  EXPECT_FALSE(has_audio_input(kDataDir));  // no checkpoint files there at all
}

}  // namespace
}  // namespace omni::model::qwen3_omni
