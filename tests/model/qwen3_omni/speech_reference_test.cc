// The Qwen3-Omni speech path against transformers 5.17 (tests/data/tiny_qwen3_omni_speech, written
// by scripts/reference/qwen3_omni_speech_reference.py on the GPU machine's CPU in float32: a tiny
// random checkpoint in the released layout, transformers' greedy generate with speaker Ethan), for
// two chats: "text" (a user turn "Hi") and "image" (a system turn, then a user turn with one image
// of grid 1 x 4 x 4 and "Hi", the reference's patches fed to our vision encoder):
//   - the thinker's rows for its prompt and reply (the capture of accept_hidden_layer) make the
//     talker prompt transformers fed (inputs_embeds of the talker's first call), rel <= 1e-4, at
//     the positions transformers gave it (the image chat's are 3-D and skip the system turn);
//   - the talker's logits at the prompt's last row, and (text chat) the code predictor's logits
//     of frame 0;
//   - the talker stage model on the engine, fed the thinker's payloads as the thinker stage sends
//     them (one per token, as with async_chunk), draws transformers' greedy codes exactly
//     (transformers' generate with talker_max_new_tokens N returns N - 1 frames: its last code 0
//     never reaches the code predictor; the reference's frame count is the talker's max_tokens),
//     and code2wav turns them into generate's waveform (max error <= 1e-4 of the peak);
//   - on a CUDA device (skipped without one), the talker in float32 gives the same prompt rows,
//     prefill and code predictor logits (rel <= 1e-4) and greedy codes, and in bfloat16 prefill
//     logits near them and codes in the ranges the sampler allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <vector>

#include "base/json.h"
#include "engine/ar_engine.h"
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_omni/talker_config.h"
#include "model/qwen3_omni/talker_prompt.h"
#include "model/qwen3_omni/talker_stage_model.h"
#include "model/qwen3_omni/thinker.h"
#include "model/qwen3_omni/thinker_prompt.h"
#include "model/qwen3_omni/thinker_vision.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/talker.h"
#include "model/safetensors.h"
#include "support/waveform_error.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_omni {
namespace {

namespace fs = std::filesystem;
using tensor::DType;
using tensor::Tensor;

const fs::path kFixture = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni_speech";
const fs::path kCheckpoint = kFixture / "per_expert";

// The worst |a - b| relative to the largest |b| of the rows compared.
double relative_error(std::span<const float> got, std::span<const float> want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  return worst / std::max(scale, 1e-30);
}

std::span<const float> floats(const Tensor& t) { return {t.data<float>(), static_cast<size_t>(t.numel())}; }

// One chat of the fixture: its reference entry, files and, for the image chat, the thinker's
// multimodal rows and positions made from the reference's patches.
struct Chat {
  fs::path dir;
  Json json;
  std::vector<int32_t> prompt, reply;
  std::optional<MultimodalPrompt> media;

  // The positions the thinker ran: the prompt and every reply token but the last.
  std::vector<int32_t> fed() const {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), reply.begin(), reply.end() - 1);
    return ids;
  }
  std::vector<float> prompt_positions() const { return media ? media->mrope_positions : std::vector<float>{}; }
};

Chat text_chat() {
  Chat c{kFixture, read_json_file(kFixture / "reference.json")};
  c.prompt = c.json["prompt"].get<std::vector<int32_t>>();
  c.reply = c.json["reply"].get<std::vector<int32_t>>();
  return c;
}

Chat image_chat() {
  Chat c{kFixture / "image", read_json_file(kFixture / "reference.json")["image"]};
  c.prompt = c.json["prompt"].get<std::vector<int32_t>>();
  c.reply = c.json["reply"].get<std::vector<int32_t>>();
  const Json config = read_json_file(kCheckpoint / "config.json");
  ThinkerTokenIds ids = parse_thinker_token_ids(config, "config.json");
  read_end_token_ids(kCheckpoint, ids);
  const std::vector<int64_t> g = c.json["grid"].get<std::vector<int64_t>>();
  const VisionRows rows =
      ThinkerVision(kCheckpoint, config, Checkpoint::open(kCheckpoint), {})
          .encoder()
          .encode(tensor::load_npy(c.dir / "pixel_values.npy"), std::vector<VisionGrid>{{g[0], g[1], g[2]}});
  MultimodalPrompt media;
  media.token_ids = c.prompt;
  media.rows = placeholder_rows(c.prompt, ids.image_token);
  media.values.assign(rows.rows.data<float>(), rows.rows.data<float>() + rows.rows.numel());
  for (const Tensor& d : rows.deepstack) media.deepstack.emplace_back(d.data<float>(), d.data<float>() + d.numel());
  const VisionSegment image{.t = g[0], .h = g[1], .w = g[2]};
  ThinkerPositions positions = thinker_positions(c.prompt, ids, std::span(&image, 1));
  media.mrope_positions = std::move(positions.streams);
  media.rope_delta = positions.rope_delta;
  c.media = std::move(media);
  return c;
}

std::unique_ptr<Thinker> load_thinker() {
  const Json config = read_json_file(kCheckpoint / "config.json");
  return std::make_unique<Thinker>(kCheckpoint, config, CausalLmLoadOptions{.dtype = DType::kF32});
}

// The thinker's rows of the chat's fed positions (one prefill, with the capture a downstream stage
// asks for; the image rows and 3-D positions of its media).
struct CapturedRows {
  std::vector<float> embeddings, hidden;
};

CapturedRows run_thinker(Thinker& thinker, const Chat& chat) {
  const std::vector<int32_t> ids = chat.fed();
  const auto n = static_cast<int32_t>(ids.size());
  thinker.init_kv_cache(8);
  ForwardBatch batch;
  batch.token_ids = ids;
  batch.positions.resize(ids.size());
  std::iota(batch.positions.begin(), batch.positions.end(), 0);
  batch.seqs = {SequenceSlice{0, n, 0, {0, 1, 2, 3}, true}};
  if (chat.media) {
    const size_t p = chat.prompt.size();
    for (int k = 0; k < 3; ++k) {
      const float* stream = chat.media->mrope_positions.data() + k * p;
      batch.mrope_positions.insert(batch.mrope_positions.end(), stream, stream + p);
      for (size_t i = p; i < ids.size(); ++i)
        batch.mrope_positions.push_back(static_cast<float>(i) + chat.media->rope_delta);
    }
    batch.input_rows = chat.media->rows;
    batch.input_row_values = chat.media->values;
    batch.input_row_deepstack = chat.media->deepstack;
  }
  ForwardBatch::HiddenCapture capture;
  capture.layer = *thinker.downstream_layer();
  batch.capture = &capture;
  std::vector<float> logits;
  thinker.forward(batch, logits);
  return {std::move(capture.embeddings), std::move(capture.hidden)};
}

// The payloads the thinker stage sends for the chat: the prompt with the first token, then one
// row per token.
std::vector<std::vector<uint8_t>> thinker_payloads(const Thinker& thinker, const Chat& chat,
                                                   const CapturedRows& captured) {
  const std::vector<int32_t> ids = chat.fed();
  const std::vector<float> positions = chat.prompt_positions();
  const int width = thinker.config().hidden_size;
  const int prompt_length = static_cast<int>(chat.prompt.size());
  std::vector<std::vector<uint8_t>> payloads;
  for (int first = 0; first < static_cast<int>(ids.size());) {
    const int count = first == 0 ? prompt_length : 1;
    DownstreamRows rows;
    rows.token_ids = std::span<const int32_t>(ids).subspan(first, count);
    rows.first_position = first;
    rows.prompt_length = prompt_length;
    rows.hidden_size = width;
    rows.embeddings = std::span<const float>(captured.embeddings).subspan(size_t(first) * width, size_t(count) * width);
    rows.hidden = std::span<const float>(captured.hidden).subspan(size_t(first) * width, size_t(count) * width);
    if (first == 0) rows.prompt_positions = positions;
    payloads.push_back(thinker.encode_downstream_rows(rows));
    first += count;
  }
  return payloads;
}

// The talker prompt of the chat, its positions checked against transformers', and the talker's
// prefill logits (its last row) against transformers'; the rows and the logits within `tolerance`
// (relative). Leaves the talker's KV cache and the hidden state of the last row (where forward()
// leaves it) for the code predictor.
Tensor check_talker_prompt(const Chat& chat, const Thinker& thinker, const CapturedRows& captured,
                           const TalkerConfig& config, qwen3_tts::Talker& talker, double tolerance = 1e-4) {
  const std::vector<int32_t> ids = chat.fed();
  const int64_t width = config.talker.text_hidden_size, n = static_cast<int64_t>(ids.size());
  ThinkerRows rows;
  rows.ids = ids;
  rows.prompt_length = chat.prompt.size();
  rows.embeddings = Tensor::borrow(const_cast<float*>(captured.embeddings.data()), {n, width}, DType::kF32);
  rows.accepted_hidden = Tensor::borrow(const_cast<float*>(captured.hidden.data()), {n, width}, DType::kF32);
  std::vector<float> specials = thinker.embed_on_host(std::vector<int32_t>{
      config.talker.tts_bos_token_id, config.talker.tts_eos_token_id, config.talker.tts_pad_token_id});
  rows.special_embeddings = Tensor::borrow(specials.data(), {3, width}, DType::kF32);
  const qwen3_tts::TalkerPrompt prompt = build_talker_prompt(talker, config, rows, *config.talker.speaker_id("ethan"));

  const Tensor want_rows = tensor::load_npy(chat.dir / "talker_prefill_embeds.npy");
  EXPECT_EQ(prompt.rows.shape(), want_rows.shape());
  EXPECT_EQ(prompt.rows.dim(0), chat.json["talker_prefill_rows"].get<int64_t>());
  if (prompt.rows.shape() != want_rows.shape()) return Tensor();
  EXPECT_LE(relative_error(floats(prompt.rows), floats(want_rows)), tolerance);

  const int64_t rows_in = prompt.rows.dim(0);
  const TalkerPositions positions = talker_positions(config, chat.prompt, chat.prompt_positions());
  if (fs::exists(chat.dir / "talker_positions.npy")) {
    const Tensor want = tensor::load_npy(chat.dir / "talker_positions.npy");  // [3, rows]
    EXPECT_EQ(static_cast<int64_t>(positions.streams.size()), want.numel());
    for (size_t i = 0; i < positions.streams.size() && static_cast<int64_t>(i) < want.numel(); ++i)
      EXPECT_EQ(positions.streams[i], want.data<float>()[i]) << "stream " << i / rows_in << ", row " << i % rows_in;
  } else {
    EXPECT_TRUE(positions.streams.empty());
  }

  talker.init_kv_cache(8);
  talker.init_predictor_cache(1);
  ForwardBatch batch;
  batch.positions.resize(static_cast<size_t>(rows_in));
  std::iota(batch.positions.begin(), batch.positions.end(), 0);
  batch.seqs = {SequenceSlice{0, static_cast<int32_t>(rows_in), 0, {0, 1}, true}};
  batch.mrope_positions = positions.streams;
  std::vector<float> logits;
  Tensor hidden;
  talker.forward(batch, prompt.rows, logits, hidden);
  const Tensor want_logits = tensor::load_npy(chat.dir / "talker_prefill_logits.npy");
  const int64_t vocab = want_logits.dim(1);
  EXPECT_EQ(static_cast<int64_t>(logits.size()), vocab);
  EXPECT_LE(relative_error(logits, {want_logits.data<float>() + (rows_in - 1) * vocab, static_cast<size_t>(vocab)}),
            tolerance);
  return hidden;
}

// The code predictor's logits of frame 0 (codebooks 1..G-1), fed transformers' codes after the
// prefill check_talker_prompt left in `talker` (`hidden`: its last row's hidden state).
void check_predictor_logits(qwen3_tts::Talker& talker, const Tensor& hidden) {
  const Tensor codes = tensor::load_npy(kFixture / "codes.npy");
  const int64_t groups = codes.dim(1);
  const Tensor want_predictor = tensor::load_npy(kFixture / "predictor_logits.npy");
  const int64_t codebook = want_predictor.dim(1);
  const std::vector<int32_t> slot = {0};
  std::vector<float> predicted;
  talker.predictor_prefill(slot, hidden, std::vector<int32_t>{codes.data<int32_t>()[0]}, predicted);
  EXPECT_LE(relative_error(predicted, {want_predictor.data<float>(), static_cast<size_t>(codebook)}), 1e-4)
      << "codebook 1";
  for (int64_t g = 2; g < groups; ++g) {
    talker.predictor_step(static_cast<int>(g), slot, std::vector<int32_t>{codes.data<int32_t>()[g - 1]}, predicted);
    EXPECT_LE(
        relative_error(predicted, {want_predictor.data<float>() + (g - 1) * codebook, static_cast<size_t>(codebook)}),
        1e-4)
        << "codebook " << g;
  }
}

// The talker stage on the engine on `device` in `dtype`, fed the chat's payloads between its steps
// as the thinker stage sends them, greedy, for the reference's frame count: the codes of its frames.
std::vector<int32_t> talker_stage_codes(const Chat& chat, const std::vector<std::vector<uint8_t>>& payloads,
                                        tensor::Device device, std::optional<DType> dtype) {
  TalkerStageModel talker(kCheckpoint, Json::object(), device, false, dtype);
  engine::ArEngine engine(talker, {.max_num_seqs = 1, .num_gpu_blocks_override = 16});
  engine::EngineRequest request;
  request.request_id = "speech";
  request.sampling_params = {
      .temperature = 0, .repetition_penalty = 1.05f, .max_tokens = static_cast<int>(chat.json["codes"].size())};
  request.additional_information = {{"voice", "Ethan"}};
  request.inputs = {payloads.front()};
  request.input_open = true;
  engine.add_request(std::move(request));
  std::vector<int32_t> frames;
  size_t next = 1;
  for (int i = 0; i < 200 && engine.has_unfinished_requests(); ++i) {
    // The thinker's next payload arrives between the talker's steps, the last one with the end.
    if (next <= payloads.size()) {
      std::vector<std::span<const uint8_t>> chunk;
      if (next < payloads.size()) chunk.push_back(payloads[next]);
      engine.add_input("speech", chunk, next == payloads.size());
      ++next;
    }
    if (!engine.can_step()) continue;
    for (const engine::RequestOutput& out : engine.step()) {
      for (const engine::CompletionOutput& c : out.completions) {
        for (const std::vector<uint8_t>& frame : c.step_outputs) {
          const std::vector<int32_t> codes = qwen3_tts::decode_codec_frames(frame, 4);
          frames.insert(frames.end(), codes.begin(), codes.end());
        }
      }
    }
  }
  return frames;
}

std::vector<int32_t> reference_codes(const Chat& chat) {
  const Tensor want = tensor::load_npy(chat.dir / "codes.npy");
  return std::vector<int32_t>(want.data<int32_t>(), want.data<int32_t>() + want.numel());
}

// The talker stage's frames on the CPU, then code2wav's waveform of them, against the reference's.
void check_codes_and_waveform(const Chat& chat, const std::vector<std::vector<uint8_t>>& payloads) {
  const std::vector<int32_t> frames = talker_stage_codes(chat, payloads, tensor::Device::cpu(), std::nullopt);
  ASSERT_EQ(frames, reference_codes(chat));

  const std::vector<float> audio = load_code2wav(kCheckpoint)->decode(frames);
  const Tensor wave = tensor::load_npy(chat.dir / "waveform.npy");
  ASSERT_EQ(static_cast<int64_t>(audio.size()), wave.numel());
  const testing::WaveformError e = testing::waveform_error(audio, floats(wave));
  EXPECT_LE(e.worst, 1e-4 * e.peak) << "sample " << e.at << " (peak " << e.peak << ")";
}

TEST(Qwen3OmniSpeechReferenceTest, TalkerPromptLogitsAndPredictorMatchTransformers) {
  const Chat chat = text_chat();
  std::unique_ptr<Thinker> thinker = load_thinker();
  ASSERT_TRUE(thinker->downstream_layer().has_value());
  const CapturedRows captured = run_thinker(*thinker, chat);
  const TalkerConfig config = read_talker_config(kCheckpoint);
  qwen3_tts::Talker talker(kCheckpoint, config.talker);
  const Tensor hidden = check_talker_prompt(chat, *thinker, captured, config, talker);
  ASSERT_TRUE(hidden.defined());
  check_predictor_logits(talker, hidden);
}

TEST(Qwen3OmniSpeechReferenceTest, TheStagesGreedyCodesAndWaveformAreTransformers) {
  const Chat chat = text_chat();
  std::unique_ptr<Thinker> thinker = load_thinker();
  check_codes_and_waveform(chat, thinker_payloads(*thinker, chat, run_thinker(*thinker, chat)));
}

// The image chat: the thinker's 3-D positions reach the talker in the first payload, and the
// talker's prompt takes transformers' positions (the system turn skipped, the image rows' grid
// offsets kept), so its logits, codes and waveform are transformers' too.
TEST(Qwen3OmniSpeechReferenceTest, AnImageChatTakesTransformersPositionsCodesAndWaveform) {
  const Chat chat = image_chat();
  ASSERT_FALSE(chat.json["talker_positions_plain"].get<bool>());
  std::unique_ptr<Thinker> thinker = load_thinker();
  const CapturedRows captured = run_thinker(*thinker, chat);
  const TalkerConfig config = read_talker_config(kCheckpoint);
  qwen3_tts::Talker talker(kCheckpoint, config.talker);
  ASSERT_TRUE(check_talker_prompt(chat, *thinker, captured, config, talker).defined());
  check_codes_and_waveform(chat, thinker_payloads(*thinker, chat, captured));
}

// The CUDA cases: the thinker's rows come from the CPU (its own CUDA cases are
// thinker_reference_test.cc's), the talker runs on the device.
bool skip_without_cuda(std::string& why) {
  if (tensor::compiled_backends().find("cuda") == std::string::npos) {
    why = "this build has no CUDA backend";
  } else if (tensor::cuda_device_count() == 0) {
    why = "no CUDA device visible to this process";
  }
  return !why.empty();
}

// In float32 on the device the talker is the CPU's computation in another order: the prompt rows
// (projected on the device), the prefill and code predictor logits within the CPU's 1e-4 of
// transformers', and the stage's greedy codes exactly transformers'.
TEST(Qwen3OmniSpeechReferenceTest, TheTalkerInFloat32OnCudaMatchesTransformers) {
  std::string why;
  if (skip_without_cuda(why)) GTEST_SKIP() << why;
  const Chat chat = text_chat();
  std::unique_ptr<Thinker> thinker = load_thinker();
  const CapturedRows captured = run_thinker(*thinker, chat);
  const TalkerConfig config = read_talker_config(kCheckpoint);
  qwen3_tts::Talker talker(kCheckpoint, config.talker, tensor::Device::cuda(0), false, DType::kF32);
  ASSERT_EQ(talker.device().type, tensor::DeviceType::kCuda);
  const Tensor hidden = check_talker_prompt(chat, *thinker, captured, config, talker);
  ASSERT_TRUE(hidden.defined());
  check_predictor_logits(talker, hidden);
  EXPECT_EQ(talker_stage_codes(chat, thinker_payloads(*thinker, chat, captured), tensor::Device::cuda(0), DType::kF32),
            reference_codes(chat));
}

// The image chat's 3-D positions on the device, float32: transformers' codes.
TEST(Qwen3OmniSpeechReferenceTest, AnImageChatsTalkerInFloat32OnCudaDrawsTransformersCodes) {
  std::string why;
  if (skip_without_cuda(why)) GTEST_SKIP() << why;
  const Chat chat = image_chat();
  std::unique_ptr<Thinker> thinker = load_thinker();
  const CapturedRows captured = run_thinker(*thinker, chat);
  EXPECT_EQ(talker_stage_codes(chat, thinker_payloads(*thinker, chat, captured), tensor::Device::cuda(0), DType::kF32),
            reference_codes(chat));
}

// In bfloat16 (the stage's default dtype on CUDA) the prompt rows (projected on the device) and the
// prefill logits stay near transformers' float32 ones: the rows and weights are rounded to 8 bits
// of mantissa, and a router near-tie may
// take another expert, but a wrong layout or a host read of device memory is off by the logits'
// whole scale. The greedy codes may part from float32's where two logits are that close (the
// reference's prefill margin is 3% of its scale), so they are checked for what the sampler
// allows: every frame has code 0 below the suppressed control range (the end of speech never
// leaves as a frame) and codes 1..G-1 inside the codebook, and the stage stops at the frame
// count asked for or at the end of speech.
TEST(Qwen3OmniSpeechReferenceTest, TheTalkerInBfloat16OnCudaStaysNearTransformers) {
  std::string why;
  if (skip_without_cuda(why)) GTEST_SKIP() << why;
  const Chat chat = text_chat();
  std::unique_ptr<Thinker> thinker = load_thinker();
  const CapturedRows captured = run_thinker(*thinker, chat);
  const TalkerConfig config = read_talker_config(kCheckpoint);
  {
    qwen3_tts::Talker talker(kCheckpoint, config.talker, tensor::Device::cuda(0), false, DType::kBF16);
    ASSERT_EQ(talker.talker_stack().dtype(), DType::kBF16);
    ASSERT_TRUE(check_talker_prompt(chat, *thinker, captured, config, talker, 1e-1).defined());
  }
  const std::vector<int32_t> codes =
      talker_stage_codes(chat, thinker_payloads(*thinker, chat, captured), tensor::Device::cuda(0), DType::kBF16);
  const auto groups = static_cast<size_t>(config.talker.num_code_groups);
  const int32_t controls = config.talker.talker.vocab_size - 1024, codebook = config.talker.code_predictor.vocab_size;
  ASSERT_FALSE(codes.empty());
  ASSERT_EQ(codes.size() % groups, 0u);
  EXPECT_LE(codes.size(), reference_codes(chat).size());
  for (size_t i = 0; i < codes.size(); ++i) {
    const int32_t limit = i % groups == 0 ? controls : codebook;
    EXPECT_TRUE(codes[i] >= 0 && codes[i] < limit)
        << "frame " << i / groups << ", codebook " << i % groups << ": " << codes[i] << " outside [0, " << limit << ")";
  }
}

// Positions of a talker prompt from the thinker's: a system turn's rows are dropped and the user
// turn keeps its offsets; the assistant's 9 rows follow; plain thinker positions stay plain.
TEST(Qwen3OmniTalkerPositions, SkipTheSystemTurnAndKeepTheUserTurnsOffsets) {
  const TalkerConfig config = read_talker_config(kCheckpoint);
  const int32_t s = config.talker.im_start_token_id, sys = config.system_token_id, user = config.user_token_id,
                asst = config.talker.assistant_token_id;
  // system (3 rows), user with a 2-row 3-D block (5 rows), the assistant's start (3 rows).
  const std::vector<int32_t> prompt = {s, sys, 10, s, user, 7, 7, 10, s, asst, 10};
  const std::vector<float> t = {0, 1, 2, 3, 4, 5, 5, 7, 8, 9, 10};
  const std::vector<float> h = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<float> streams = t;
  streams.insert(streams.end(), h.begin(), h.end());
  streams.insert(streams.end(), t.begin(), t.end());
  const TalkerPositions got = talker_positions(config, prompt, streams);
  const std::vector<float> user_t = {0, 1, 2, 2, 4}, user_h = {0, 1, 2, 3, 4};
  std::vector<float> want;
  for (const auto* u : {&user_t, &user_h, &user_t}) {
    want.insert(want.end(), u->begin(), u->end());
    for (int r = 0; r < 9; ++r) want.push_back(5.0f + r);
  }
  EXPECT_EQ(got.streams, want);
  EXPECT_EQ(got.rope_delta, 0.0f);  // 14 rows, largest 13
  EXPECT_TRUE(talker_positions(config, prompt, {}).streams.empty());
  EXPECT_THROW(talker_positions(config, prompt, std::vector<float>(5)), Error);
}

}  // namespace
}  // namespace omni::model::qwen3_omni
