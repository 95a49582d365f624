// The Qwen3-Omni thinker on prompts with images and video against Hugging Face transformers 5.17
// (Qwen3OmniMoeProcessor and Qwen3OmniMoeForConditionalGeneration on the CPU in float32), on the
// tiny checkpoint of tests/data/tiny_qwen3_omni and the references of
// scripts/reference/qwen3_omni_vision_reference.py (tests/data/tiny_qwen3_omni/vision): the
// processor's grids and patches, the ids after placeholder expansion, the 3-D positions and rope
// delta, the vision encoder's rows and DeepStack rows (1e-4 relative), the thinker's logits at every
// prompt position (1e-4 relative) and the greedy continuation decoded through the paged KV cache
// with the rope delta.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/base64.h"
#include "base/error.h"
#include "base/json.h"
#include "logit_checks.h"
#include "model/image_resample.h"
#include "model/model_registry.h"
#include "model/qwen3_omni/thinker.h"
#include "model/qwen3_omni/thinker_prompt.h"
#include "model/qwen3_omni/thinker_vision.h"
#include "model/safetensors.h"
#include "tensor/backend.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_omni {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni";
const fs::path kVisionDir = kDataDir / "vision";
constexpr double kMaxRelativeError = 1e-4;

// A uint8 .npy file (numpy's '|u1' arrays, which tensor::load_npy does not take): its shape and bytes.
struct U8Array {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

U8Array load_u8_npy(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < 10 || data.compare(1, 5, "NUMPY") != 0) throw std::runtime_error(path.string() + ": not .npy");
  const size_t header_len = data[6] == 1
                                ? static_cast<uint8_t>(data[8]) | static_cast<uint8_t>(data[9]) << 8
                                : static_cast<uint8_t>(data[8]) | static_cast<uint8_t>(data[9]) << 8 |
                                      static_cast<uint8_t>(data[10]) << 16 | static_cast<uint8_t>(data[11]) << 24;
  const size_t start = (data[6] == 1 ? 10 : 12);
  const std::string header = data.substr(start, header_len);
  if (header.find("'|u1'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos) {
    throw std::runtime_error(path.string() + ": not a C-order uint8 array: " + header);
  }
  U8Array out;
  const size_t open = header.find("'shape': (") + 10, close = header.find(')', open);
  std::stringstream dims(header.substr(open, close - open));
  for (std::string d; std::getline(dims, d, ',');) {
    if (d.find_first_not_of(' ') != std::string::npos) out.shape.push_back(std::stoll(d));
  }
  out.bytes.assign(data.begin() + static_cast<int64_t>(start + header_len), data.end());
  return out;
}

// One reference case: its media as VisionInputs over the stored uint8 pixels.
struct Case {
  fs::path dir;
  Json ref;
  std::vector<U8Array> pixels;  // kept alive for the spans
  std::vector<VisionInput> inputs;
  bool video = false;
};

Case load_case(size_t c) {
  Case out;
  const Json all = read_json_file(kVisionDir / "reference.json");
  out.ref = all.at("cases").at(c);
  out.dir = kVisionDir / ("case_" + std::to_string(c));
  out.video = out.ref.contains("fps");
  if (out.video) {
    out.pixels.push_back(load_u8_npy(out.dir / "frames.npy"));  // [t, h, w, 3] uint8
    const U8Array& f = out.pixels.back();
    VisionInput in;
    in.video = true;
    in.fps = out.ref.at("fps").get<double>();
    in.frames.height = f.shape[1];
    in.frames.width = f.shape[2];
    const auto bytes = static_cast<size_t>(f.shape[1] * f.shape[2] * 3);
    for (int64_t t = 0; t < f.shape[0]; ++t) in.frames.frames.emplace_back(f.bytes.data() + t * bytes, bytes);
    out.inputs.push_back(in);
  } else {
    for (size_t k = 0; k < out.ref.at("grids").size(); ++k) {
      out.pixels.push_back(load_u8_npy(out.dir / ("image_" + std::to_string(k) + ".npy")));  // [h, w, 3]
      const U8Array& img = out.pixels.back();
      VisionInput in;
      in.frames.height = img.shape[0];
      in.frames.width = img.shape[1];
      in.frames.frames.emplace_back(img.bytes.data(), img.bytes.size());
      out.inputs.push_back(in);
    }
  }
  return out;
}

size_t num_cases() { return read_json_file(kVisionDir / "reference.json").at("cases").size(); }

// The processor as the reference script configured it (its min/max pixels for videos too), with a
// case's flat min_pixels / max_pixels processor kwargs (which replace both budgets) when it has them.
VisionProcessorConfig reference_processor_config(const Json& ref = Json::object()) {
  VisionProcessorConfig c = load_vision_processor_config(kDataDir / "per_expert");
  const Json all = read_json_file(kVisionDir / "reference.json");
  c.video_min_pixels = all.at("min_pixels").get<int64_t>();
  c.video_max_pixels = all.at("max_pixels").get<int64_t>();
  if (ref.contains("mm_processor_kwargs")) {
    c.min_pixels = c.video_min_pixels = ref["mm_processor_kwargs"].at("min_pixels").get<int64_t>();
    c.max_pixels = c.video_max_pixels = ref["mm_processor_kwargs"].at("max_pixels").get<int64_t>();
  }
  return c;
}

// The request's processor kwargs that give the reference's budgets through prepare_multimodal_prompt:
// the case's own, or for a video the reference's (the image processor's) min/max pixels.
Json reference_processor_kwargs(const Json& ref, bool video) {
  if (ref.contains("mm_processor_kwargs")) return ref["mm_processor_kwargs"];
  if (!video) return Json::object();
  const Json all = read_json_file(kVisionDir / "reference.json");
  return {{"min_pixels", all.at("min_pixels")}, {"max_pixels", all.at("max_pixels")}};
}

TEST(ThinkerVisionReference, ProcessorGridsAndPatchesMatchTransformers) {
  for (size_t c = 0; c < num_cases(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Case k = load_case(c);
    const VisionProcessor processor(reference_processor_config(k.ref));
    const tensor::Tensor want = tensor::load_npy(k.dir / "pixel_values.npy");
    int64_t row = 0;
    for (size_t m = 0; m < k.inputs.size(); ++m) {
      const ProcessedVision got = k.video ? processor.video(k.inputs[m].frames) : processor.image(k.inputs[m].frames);
      const auto grid = k.ref.at("grids").at(m).get<std::vector<int64_t>>();
      EXPECT_EQ(std::vector<int64_t>(got.grid.begin(), got.grid.end()), grid);
      ASSERT_EQ(got.patches.dim(1), want.dim(1));
      ASSERT_LE(row + got.patches.dim(0), want.dim(0));
      // The resampled pixels are equal, so the patches are equal to float32 rounding of the
      // normalisation (a pixel one level off would show as 2/255).
      double err = 0.0;
      const float* w = want.data<float>() + row * want.dim(1);
      for (int64_t i = 0; i < got.patches.numel(); ++i)
        err = std::max(err, std::abs(double(got.patches.data<float>()[i]) - w[i]));
      EXPECT_LE(err, 1e-6) << "medium " << m;
      row += got.patches.dim(0);
    }
    EXPECT_EQ(row, want.dim(0));
  }
}

// The rows and DeepStack rows of every case from the encoder on `placement`, each within `tolerance`.
void expect_vision_rows(Placement placement, double tolerance) {
  const fs::path ckpt = kDataDir / "per_expert";
  const Json config = read_json_file(ckpt / "config.json");
  ThinkerVision vision(ckpt, config, Checkpoint::open(ckpt), placement);
  for (size_t c = 0; c < num_cases(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Case k = load_case(c);
    const tensor::Tensor patches = tensor::load_npy(k.dir / "pixel_values.npy");
    std::vector<VisionGrid> grids;
    for (const Json& g : k.ref.at("grids"))
      grids.push_back({g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()});
    const VisionRows got = vision.encoder().encode(patches, grids);
    const tensor::Tensor want = tensor::load_npy(k.dir / "visual_embeds.npy");
    const tensor::Tensor deep = tensor::load_npy(k.dir / "deepstack.npy");  // [layers, rows, hidden]
    ASSERT_EQ(got.rows.shape(), want.shape());
    ASSERT_EQ(static_cast<int64_t>(got.deepstack.size()), deep.dim(0));
    const int64_t hidden = want.dim(1);
    for (int64_t r = 0; r < want.dim(0); ++r) {
      EXPECT_LE(relative_error(got.rows.data<float>() + r * hidden, want.data<float>() + r * hidden, hidden), tolerance)
          << "row " << r;
      for (int64_t d = 0; d < deep.dim(0); ++d) {
        EXPECT_LE(relative_error(got.deepstack[d].data<float>() + r * hidden,
                                 deep.data<float>() + (d * want.dim(0) + r) * hidden, hidden),
                  tolerance)
            << "deepstack " << d << " row " << r;
      }
    }
  }
}

TEST(ThinkerVisionReference, VisionRowsAndDeepStackRowsMatchTransformers) { expect_vision_rows({}, kMaxRelativeError); }

// The encoder on a CUDA device: in float32 as close as on the CPU, in bfloat16 within 2e-2.
TEST(ThinkerVisionReference, VisionRowsOnCudaMatchTransformers) {
  if (!cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  expect_vision_rows({tensor::Device::cuda(0), tensor::DType::kF32}, kMaxRelativeError);
  expect_vision_rows({tensor::Device::cuda(0), tensor::DType::kBF16}, kBfloat16Tolerance);
}

// The thinker loaded by `options` (its vision encoder with it): expanded ids, positions, prompt
// logits within `tolerance` and, when `greedy`, the greedy tokens of every case.
void expect_vision_prompts(const CausalLmLoadOptions& options, PositionErrors errors, bool greedy) {
  const fs::path ckpt = kDataDir / "per_expert";
  const Json config = read_json_file(ckpt / "config.json");
  const auto tokenizer = text::Tokenizer::load(ckpt);
  const ThinkerTokenIds ids = parse_thinker_token_ids(config, "config.json");
  Thinker model(ckpt, config, options);
  const int vocab = model.info().vocab_size;
  for (size_t c = 0; c < num_cases(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Case k = load_case(c);
    // The media as a request carries them (multi_modal_data entries of RGB bytes; a video's audio
    // track with it for use_audio_in_video), with the processor kwargs that give the reference's
    // pixel budget.
    Json entries = Json::array();
    for (const VisionInput& in : k.inputs) {
      std::string bytes;
      for (auto f : in.frames.frames) bytes.append(reinterpret_cast<const char*>(f.data()), f.size());
      Json e = {{"data", base64_encode(bytes)}, {"width", in.frames.width}, {"height", in.frames.height}};
      if (in.video) {
        e["frames"] = in.frames.frames.size();
        e["fps"] = in.fps;
      }
      if (in.video && k.ref.value("use_audio_in_video", false)) {
        const tensor::Tensor wave = tensor::load_npy(k.dir / "waveform.npy");
        e["audio"] = {{"data", base64_encode(std::string_view(reinterpret_cast<const char*>(wave.data<float>()),
                                                              static_cast<size_t>(wave.numel()) * sizeof(float)))},
                      {"sample_rate", 16000}};
      }
      entries.push_back(e);
    }
    const std::vector<int32_t> prompt = tokenizer->encode(k.ref.at("text").get<std::string>());
    const auto want_ids = k.ref.at("input_ids").get<std::vector<int32_t>>();
    const Json info = {{kMultiModalData, {{k.video ? "video" : "image", entries}}},
                       {kMmProcessorKwargs, reference_processor_kwargs(k.ref, k.video)}};
    const std::optional<MultimodalPrompt> media = model.prepare_multimodal_prompt(prompt, info);
    ASSERT_TRUE(media.has_value());
    ASSERT_EQ(media->token_ids, want_ids);
    const tensor::Tensor want_positions = tensor::load_npy(k.dir / "position_ids.npy");  // [3, n]
    ASSERT_EQ(want_positions.numel(), static_cast<int64_t>(media->mrope_positions.size()));
    for (size_t i = 0; i < media->mrope_positions.size(); ++i) {
      // int32 in the first references (whole positions), float32 since.
      const double want = want_positions.dtype() == tensor::DType::kI32 ? want_positions.data<int32_t>()[i]
                                                                        : want_positions.data<float>()[i];
      ASSERT_NEAR(media->mrope_positions[i], want, 1e-4 * std::max(1.0, std::abs(want))) << "stream entry " << i;
    }
    EXPECT_NEAR(media->rope_delta, k.ref.at("rope_delta").get<double>(), 1e-4);

    const int n = static_cast<int>(media->token_ids.size());
    const int blocks = (n + 32) / kKvBlockSize + 1;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    model.init_kv_cache(blocks);
    ForwardBatch batch{media->token_ids, {}, {SequenceSlice{0, n, 0, table, true}}, /*all_logits=*/true};
    batch.positions.resize(n);
    std::iota(batch.positions.begin(), batch.positions.end(), 0);
    batch.mrope_positions = media->mrope_positions;
    batch.input_rows = media->rows;
    batch.input_row_values = media->values;
    batch.input_row_deepstack = media->deepstack;
    std::vector<float> logits;
    model.forward(batch, logits);
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
      const int32_t index = n + static_cast<int32_t>(i);
      const float pos = static_cast<float>(index) + media->rope_delta;
      ForwardBatch decode{{next}, {index}, {SequenceSlice{0, 1, index, table, true}}, false};
      decode.mrope_positions = {pos, pos, pos};
      model.forward(decode, step);
      next = static_cast<int32_t>(std::max_element(step.begin(), step.end()) - step.begin());
    }
    EXPECT_EQ(generated, continuation);
  }
  errors.check();
}

TEST(ThinkerVisionReference, ExpandedIdsPositionsLogitsAndGreedyTokensMatchTransformers) {
  expect_vision_prompts(CausalLmLoadOptions{}, PositionErrors::float32(kMaxRelativeError), true);
}

// On a CUDA device with the encoder there: float32 as on the CPU; in bfloat16 as close to the
// references as transformers' own bfloat16 run, or within 2e-2, away from routing near-ties
// (logit_checks.h).
TEST(ThinkerVisionReference, OnCudaMatchesTransformers) {
  if (!cuda_visible()) GTEST_SKIP() << "no CUDA backend or device";
  expect_vision_prompts(CausalLmLoadOptions{.device = tensor::Device::cuda(0), .dtype = tensor::DType::kF32},
                        PositionErrors::float32(kMaxRelativeError), true);
  expect_vision_prompts(CausalLmLoadOptions{.device = tensor::Device::cuda(0), .dtype = tensor::DType::kBF16},
                        PositionErrors::bfloat16(), false);
}

TEST(ThinkerVisionPrompt, SmartResizeRoundsToTheFactorWithinThePixelBudget) {
  EXPECT_EQ(smart_resize(90, 150, 32, 3136, 12845056), (std::array<int64_t, 2>{96, 160}));
  EXPECT_EQ(smart_resize(100, 70, 32, 3136, 12845056), (std::array<int64_t, 2>{96, 64}));
  // Python's round: 48 / 32 = 1.5 rounds to 2 (even), 80 / 32 = 2.5 to 2.
  EXPECT_EQ(smart_resize(48, 80, 32, 1, 1 << 30), (std::array<int64_t, 2>{64, 64}));
  // Over the budget: scaled down by sqrt(area / max) and floored.
  EXPECT_EQ(smart_resize(1000, 1000, 32, 3136, 256 * 256), (std::array<int64_t, 2>{256, 256}));
  // Under it: scaled up and ceiled.
  EXPECT_EQ(smart_resize(40, 40, 32, 128 * 128, 1 << 30), (std::array<int64_t, 2>{128, 128}));
  EXPECT_THROW(smart_resize(20, 100, 32, 3136, 1 << 30), Error);
  EXPECT_THROW(smart_resize(32, 32 * 201, 32, 1, 1 << 30), Error);
}

std::vector<float> stream_of(const ThinkerPositions& p, size_t n, int s) {
  return std::vector<float>(p.streams.begin() + static_cast<int64_t>(s * n),
                            p.streams.begin() + static_cast<int64_t>((s + 1) * n));
}

TEST(ThinkerVisionPrompt, ImageAndVideoSegmentsTakeGridPositionsAndTextResumesAfterTheLargest) {
  ThinkerTokenIds ids;
  ids.image_token = 9;
  ids.video_token = 8;
  ids.vision_start_token = 7;
  ids.position_id_per_seconds = 13.0;
  // text, <vs>, a 1 x 4 x 6 image (2 x 3 blocks: 6 rows), <ve>, text
  std::vector<int32_t> prompt{1, 7, 9, 9, 9, 9, 9, 9, 6, 2};
  const VisionSegment image[1] = {{1, 4, 6, 2, 1.0}};
  const ThinkerPositions p = thinker_positions(prompt, ids, image);
  const size_t n = prompt.size();
  EXPECT_EQ(stream_of(p, n, 0), (std::vector<float>{0, 1, 2, 2, 2, 2, 2, 2, 5, 6}));
  EXPECT_EQ(stream_of(p, n, 1), (std::vector<float>{0, 1, 2, 2, 2, 3, 3, 3, 5, 6}));
  EXPECT_EQ(stream_of(p, n, 2), (std::vector<float>{0, 1, 2, 3, 4, 2, 3, 4, 5, 6}));
  EXPECT_EQ(p.rope_delta, 7 - 10);
  // A video of 2 temporal patches 1 s apart at 13 positions per second: t = s, s + 13.
  std::vector<int32_t> video{7, 8, 8, 6};
  const VisionSegment clip[1] = {{2, 2, 2, 2, 1.0}};
  const ThinkerPositions v = thinker_positions(video, ids, {}, clip);
  EXPECT_EQ(stream_of(v, 4, 0), (std::vector<float>{0, 1, 14, 15}));
  EXPECT_EQ(v.rope_delta, 16 - 4);
  // A mismatch is refused.
  EXPECT_THROW(thinker_positions(prompt, ids), Error);
}

// At 1.5 frames per second a temporal patch spans 2 / 1.5 s: 17.33 positions at 13 per second.
// transformers keeps them fractional (float32: k * float(2 / 1.5), times 13, plus the start), and
// the text after the segment resumes at the largest + 1, fractional too.
TEST(ThinkerVisionPrompt, AVideoAtOnePointFiveFpsTakesFractionalTemporalPositions) {
  ThinkerTokenIds ids;
  ids.video_token = 8;
  ids.vision_start_token = 7;
  ids.position_id_per_seconds = 13.0;
  // <vs>, 3 temporal patches of 4 x 2 patches (2 x 1 blocks: 2 rows each), <ve>, text
  const std::vector<int32_t> prompt{7, 8, 8, 8, 8, 8, 8, 6, 2};
  const VisionSegment clip[1] = {{3, 4, 2, 2, 2.0 / 1.5}};
  const ThinkerPositions p = thinker_positions(prompt, ids, {}, clip);
  const auto spg = static_cast<float>(2.0 / 1.5);
  const float t1 = 1.0f * spg * 13.0f + 1.0f, t2 = 2.0f * spg * 13.0f + 1.0f;
  EXPECT_FLOAT_EQ(t1, 18.333334f);
  const size_t n = prompt.size();
  EXPECT_EQ(stream_of(p, n, 0), (std::vector<float>{0, 1, 1, t1, t1, t2, t2, t2 + 1, t2 + 2}));
  EXPECT_EQ(stream_of(p, n, 1), (std::vector<float>{0, 1, 2, 1, 2, 1, 2, t2 + 1, t2 + 2}));
  EXPECT_EQ(stream_of(p, n, 2), (std::vector<float>{0, 1, 1, 1, 1, 1, 1, t2 + 1, t2 + 2}));
  EXPECT_FLOAT_EQ(p.rope_delta, t2 + 3 - 9);
}

// use_audio_in_video: the processor interleaves the video's rows (temporal patch k at k x 1 s x 13)
// with its audio's rows (row a at a), video first on a tie; get_rope_index numbers the audio rows
// on from the segment's start and ends the segment after the tail of whichever outlasts the other.
TEST(ThinkerVisionPrompt, AVideoWithItsAudioInterleavesTheirRowsByTime) {
  ThinkerTokenIds ids;
  ids.video_token = 8;
  ids.audio_token = 5;
  ids.vision_start_token = 7;
  ids.vision_end_token = 6;
  ids.audio_start_token = 3;
  ids.audio_end_token = 4;
  ids.position_id_per_seconds = 13.0;
  VisionSegment clip{3, 2, 2, 2, 1.0, 30};  // one row per temporal patch, 30 audio rows
  const std::vector<bool> order = interleave_video_audio(clip, ids.position_id_per_seconds);
  std::vector<bool> want(1, true);
  want.insert(want.end(), 13, false);  // audio 0..12 come before time 13
  want.push_back(true);                // the second patch (13 <= 13)
  want.insert(want.end(), 13, false);  // audio 13..25
  want.push_back(true);                // the third (26)
  want.insert(want.end(), 4, false);   // audio 26..29, the tail
  EXPECT_EQ(order, want);

  const std::vector<int32_t> prompt{1, 7, 8, 6, 2};
  const VisionSegment segs[1] = {clip};
  const std::vector<int32_t> expanded = expand_vision_placeholders(prompt, ids, ids.video_token, segs, "video");
  ASSERT_EQ(expanded.size(), 39u);  // 4 of the prompt, <as>, 3 + 30 rows, <ae>
  EXPECT_EQ(expanded[2], ids.audio_start_token);
  EXPECT_EQ(expanded[3], ids.video_token);
  EXPECT_EQ(expanded[4], ids.audio_token);
  EXPECT_EQ(expanded[expanded.size() - 3], ids.audio_end_token);
  const ThinkerPositions p = thinker_positions(expanded, ids, {}, segs);
  const size_t n = expanded.size();
  const std::vector<float> t = stream_of(p, n, 0);
  // text 0, <vs> 1, <as> 2; rows from s = 3: the first patch (3), audio 3..15, the second patch at
  // 3 + 13 = 16, audio 16..28, the third at 29, audio 29..32; <ae> 33, <ve> 34, text 35.
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[1], 1);
  EXPECT_EQ(t[2], 2);
  EXPECT_EQ(t[3], 3);
  EXPECT_EQ(t[4], 3);
  EXPECT_EQ(t[16], 15);
  EXPECT_EQ(t[17], 16);
  EXPECT_EQ(t[18], 16);
  EXPECT_EQ(t[31], 29);
  EXPECT_EQ(t[32], 29);
  EXPECT_EQ(t[35], 32);
  EXPECT_EQ(t[36], 33);
  EXPECT_EQ(t[37], 34);
  EXPECT_EQ(t[38], 35);
  EXPECT_EQ(p.rope_delta, 36 - 39);

  // The video outlasting its audio (10 rows): the tail is the video's last two patches, whose
  // largest position (the third patch at 3 + 26) ends the segment.
  clip.audio_rows = 10;
  const VisionSegment short_audio[1] = {clip};
  const std::vector<int32_t> e2 = expand_vision_placeholders(prompt, ids, ids.video_token, short_audio, "video");
  const ThinkerPositions q = thinker_positions(e2, ids, {}, short_audio);
  const std::vector<float> t2 = stream_of(q, e2.size(), 0);
  ASSERT_EQ(e2.size(), 19u);  // 4 of the prompt, <as>, 3 + 10 rows, <ae>
  EXPECT_EQ(t2[14], 16);      // second patch
  EXPECT_EQ(t2[15], 29);      // third patch
  EXPECT_EQ(t2[16], 30);      // <ae>
  EXPECT_EQ(t2[17], 31);      // <ve>

  // Its placeholder must sit between <|vision_start|> and <|vision_end|>.
  const std::vector<int32_t> bare{1, 8, 2};
  EXPECT_THROW(expand_vision_placeholders(bare, ids, ids.video_token, segs, "video"), Error);
  // Interleaved rows the segments do not describe are refused.
  EXPECT_THROW(thinker_positions(expanded, ids, {}, short_audio), Error);
}

TEST(ImageResample, SameSizeIsUnchangedAndAFlatImageStaysFlat) {
  std::vector<uint8_t> px(5 * 7 * 3);
  std::iota(px.begin(), px.end(), 0);
  EXPECT_EQ(resize_bicubic_antialias(px, 5, 7, 3, 5, 7), px);
  const std::vector<uint8_t> flat(40 * 30 * 3, 77);
  const std::vector<uint8_t> up = resize_bicubic_antialias(flat, 40, 30, 3, 64, 96);
  ASSERT_EQ(up.size(), 64u * 96u * 3u);
  EXPECT_TRUE(std::all_of(up.begin(), up.end(), [](uint8_t x) { return x == 77; }));
  const std::vector<uint8_t> down = resize_bicubic_antialias(flat, 40, 30, 3, 13, 9);
  EXPECT_TRUE(std::all_of(down.begin(), down.end(), [](uint8_t x) { return x == 77; }));
}

}  // namespace
}  // namespace omni::model::qwen3_omni
