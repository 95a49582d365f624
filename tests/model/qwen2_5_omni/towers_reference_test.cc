// The Qwen2.5-Omni thinker towers against Hugging Face transformers 5.17 (WhisperFeatureExtractor,
// Qwen2VLImageProcessor, Qwen2VLVideoProcessor, Qwen2_5OmniAudioEncoder, Qwen2_5OmniVisionEncoder on
// the CPU in float32), on the tiny checkpoint and the references that
// scripts/reference/qwen2_5_omni_towers_reference.py writes to tests/data/tiny_qwen2_5_omni/towers:
// the log-mel features and valid frames, the audio tower's rows, the image and video patches and
// grids, and the vision encoder's rows, each within 1e-4 relative (CPU float32). Skips while the
// files are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/qwen2_5_omni/audio_encoder.h"
#include "model/qwen2_5_omni/audio_processor.h"
#include "model/qwen2_5_omni/vision_encoder.h"
#include "model/safetensors.h"
#include "model/vision_processor.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::model::qwen2_5_omni {
namespace {

namespace fs = std::filesystem;
using tensor::Tensor;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen2_5_omni/towers";
const fs::path kCheckpoint = kDir / "checkpoint";
constexpr double kMaxRelativeError = 1e-4;

bool cuda_visible() {
  return tensor::compiled_backends().find("cuda") != std::string::npos && tensor::cuda_device_count() > 0;
}
const Placement kCudaF32{tensor::Device::cuda(0), tensor::DType::kF32};

// max |got - want| / max |want| over n values.
double relative_error(const float* got, const float* want, int64_t n) {
  double err = 0.0, mag = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::abs(static_cast<double>(want[i])));
  }
  return mag > 0.0 ? err / mag : err;
}

// Every row of `got` within kMaxRelativeError of `want`'s.
void expect_rows_match(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  const int64_t width = want.dim(1);
  for (int64_t r = 0; r < want.dim(0); ++r) {
    EXPECT_LE(relative_error(got.data<float>() + r * width, want.data<float>() + r * width, width), kMaxRelativeError)
        << "row " << r;
  }
}

class TowersReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kDir / "reference.json")) {
      GTEST_SKIP()
          << "no " << kDir.string()
          << ": run scripts/reference/qwen2_5_omni_towers_reference.py --out tests/data/tiny_qwen2_5_omni/towers "
             "on the GPU machine";
    }
    ref_ = read_json_file(kDir / "reference.json");
    config_ = read_json_file(kCheckpoint / "config.json");
  }
  AudioEncoder audio_encoder(const Checkpoint& ckpt, Placement placement = {}) const {
    return AudioEncoder(ckpt, thinker_audio_config(config_, "config.json"), "thinker.audio_tower.", placement);
  }
  VisionEncoder vision_encoder(const Checkpoint& ckpt, Placement placement = {}) const {
    return VisionEncoder(ckpt, thinker_vision_config(config_, "config.json"), "thinker.visual.", placement);
  }
  std::vector<Tensor> waveforms() const {
    std::vector<Tensor> out;
    for (size_t k = 0; k < ref_.at("audio_samples").size(); ++k) {
      out.push_back(tensor::load_npy(kDir / ("waveform_" + std::to_string(k) + ".npy")));
    }
    return out;
  }
  Json ref_, config_;
};

TEST_F(TowersReferenceTest, LogMelFeaturesAndValidFramesMatchTheProcessor) {
  const AudioProcessor processor = AudioProcessor::load(kCheckpoint);
  const std::vector<Tensor> waves = waveforms();
  std::vector<std::span<const float>> audios;
  for (const Tensor& w : waves) audios.emplace_back(w.data<float>(), static_cast<size_t>(w.numel()));
  const std::vector<LogMelFeatures> got = processor.extract(audios);
  const auto valid = ref_.at("audio_valid_frames").get<std::vector<int64_t>>();
  ASSERT_EQ(got.size(), valid.size());
  for (size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE("audio " + std::to_string(k));
    ASSERT_EQ(got[k].valid_frames, valid[k]);
    const Tensor want = tensor::load_npy(kDir / ("input_features_" + std::to_string(k) + ".npy"));
    ASSERT_EQ(want.shape(), (tensor::Shape{got[k].mel_bins, valid[k]}));
    std::vector<float> mine(static_cast<size_t>(want.numel()));
    for (int64_t m = 0; m < want.dim(0); ++m)
      for (int64_t t = 0; t < want.dim(1); ++t) mine[m * want.dim(1) + t] = got[k].values[m * got[k].frames + t];
    EXPECT_LE(relative_error(mine.data(), want.data<float>(), want.numel()), kMaxRelativeError);
  }
}

TEST_F(TowersReferenceTest, AudioTowerRowsMatchTransformers) {
  const Checkpoint ckpt = Checkpoint::open(kCheckpoint);
  const AudioEncoder enc = audio_encoder(ckpt);
  const auto counts = ref_.at("audio_rows_per_audio").get<std::vector<int64_t>>();
  // On the reference's own features, so that the tower's error is measured alone.
  std::vector<Tensor> features;
  std::vector<AudioFeatures> inputs;
  for (size_t k = 0; k < counts.size(); ++k) {
    features.push_back(tensor::load_npy(kDir / ("input_features_" + std::to_string(k) + ".npy")));
    inputs.push_back({features.back().data<float>(), features.back().dim(1), features.back().dim(1)});
    EXPECT_EQ(audio_output_length(features.back().dim(1)), counts[k]) << "audio " << k;
  }
  const Tensor want = tensor::load_npy(kDir / "audio_rows.npy");
  expect_rows_match(enc.encode(inputs), want);

  // End to end from the waveforms through our features.
  const std::vector<Tensor> waves = waveforms();
  std::vector<std::span<const float>> audios;
  for (const Tensor& w : waves) audios.emplace_back(w.data<float>(), static_cast<size_t>(w.numel()));
  const std::vector<LogMelFeatures> mel = AudioProcessor::load(kCheckpoint).extract(audios);
  std::vector<AudioFeatures> ours;
  for (const LogMelFeatures& f : mel) ours.push_back({f.values.data(), f.valid_frames, f.frames});
  expect_rows_match(enc.encode(ours), want);
}

// The uint8 pixels of an npy [..., height, width, 3] (load_npy widens them to int32): frame `f`.
std::vector<uint8_t> pixels(const Tensor& t, int64_t f, int64_t plane) {
  std::vector<uint8_t> out(static_cast<size_t>(plane));
  for (int64_t i = 0; i < plane; ++i) out[i] = static_cast<uint8_t>(t.data<int32_t>()[f * plane + i]);
  return out;
}

// The processor's patches of each medium one after another, checked against `want_patches`; the
// grids returned.
std::vector<VisionGrid> expect_patches_match(const std::vector<ProcessedVision>& got, const Tensor& want_patches,
                                             const Json& want_grids) {
  std::vector<VisionGrid> grids;
  int64_t first = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const VisionGrid want = want_grids.at(k).get<VisionGrid>();
    EXPECT_EQ(got[k].grid, want) << "medium " << k;
    grids.push_back(want);
    const int64_t n = got[k].patches.numel();
    if (first + n > want_patches.numel()) {
      ADD_FAILURE() << "medium " << k << ": more patches than the reference";
      break;
    }
    EXPECT_LE(relative_error(got[k].patches.data<float>(), want_patches.data<float>() + first, n), kMaxRelativeError)
        << "medium " << k;
    first += n;
  }
  EXPECT_EQ(first, want_patches.numel());
  return grids;
}

TEST_F(TowersReferenceTest, ImagePatchesAndRowsMatchTransformers) {
  const VisionProcessor processor(load_vision_processor_config(kCheckpoint));
  std::vector<ProcessedVision> processed;
  for (size_t k = 0; k < ref_.at("image_sizes").size(); ++k) {
    const Tensor img = tensor::load_npy(kDir / ("image_" + std::to_string(k) + ".npy"));
    const std::vector<uint8_t> px = pixels(img, 0, img.numel());
    processed.push_back(processor.image({img.dim(0), img.dim(1), {std::span<const uint8_t>(px)}}));
  }
  const Tensor want_patches = tensor::load_npy(kDir / "image_pixel_values.npy");
  const std::vector<VisionGrid> grids = expect_patches_match(processed, want_patches, ref_.at("image_grids"));
  const Checkpoint ckpt = Checkpoint::open(kCheckpoint);
  expect_rows_match(vision_encoder(ckpt).encode(want_patches, grids), tensor::load_npy(kDir / "image_rows.npy"));
}

TEST_F(TowersReferenceTest, VideoPatchesAndRowsMatchTransformers) {
  const VisionProcessor processor(load_vision_processor_config(kCheckpoint));
  const Tensor frames = tensor::load_npy(kDir / "video_frames.npy");  // [frames, height, width, 3]
  const int64_t plane = frames.dim(1) * frames.dim(2) * 3;
  std::vector<std::vector<uint8_t>> px;
  RgbFrames in{frames.dim(1), frames.dim(2), {}};
  for (int64_t f = 0; f < frames.dim(0); ++f) px.push_back(pixels(frames, f, plane));
  for (const auto& p : px) in.frames.emplace_back(p);
  const std::vector<ProcessedVision> processed{processor.video(in)};
  const Tensor want_patches = tensor::load_npy(kDir / "video_pixel_values.npy");
  const std::vector<VisionGrid> grids =
      expect_patches_match(processed, want_patches, Json::array({ref_.at("video_grid")}));
  const Checkpoint ckpt = Checkpoint::open(kCheckpoint);
  expect_rows_match(vision_encoder(ckpt).encode(want_patches, grids), tensor::load_npy(kDir / "video_rows.npy"));
}

// The same towers on a GPU in float32 (the ops' CUDA kernels), on the reference's inputs.
TEST_F(TowersReferenceTest, TowersOnCudaMatchTransformers) {
  if (!cuda_visible()) GTEST_SKIP() << "no CUDA device";
  const Checkpoint ckpt = Checkpoint::open(kCheckpoint);
  std::vector<Tensor> features;
  std::vector<AudioFeatures> inputs;
  for (size_t k = 0; k < ref_.at("audio_samples").size(); ++k) {
    features.push_back(tensor::load_npy(kDir / ("input_features_" + std::to_string(k) + ".npy")));
    inputs.push_back({features.back().data<float>(), features.back().dim(1), features.back().dim(1)});
  }
  expect_rows_match(audio_encoder(ckpt, kCudaF32).encode(inputs), tensor::load_npy(kDir / "audio_rows.npy"));
  const VisionEncoder vision = vision_encoder(ckpt, kCudaF32);
  for (const char* medium : {"image", "video"}) {
    SCOPED_TRACE(medium);
    std::vector<VisionGrid> grids;
    if (std::string(medium) == "image") {
      grids = ref_.at("image_grids").get<std::vector<VisionGrid>>();
    } else {
      grids.push_back(ref_.at("video_grid").get<VisionGrid>());
    }
    const Tensor patches = tensor::load_npy(kDir / (std::string(medium) + "_pixel_values.npy"));
    expect_rows_match(vision.encode(patches, grids), tensor::load_npy(kDir / (std::string(medium) + "_rows.npy")));
  }
}

}  // namespace
}  // namespace omni::model::qwen2_5_omni
