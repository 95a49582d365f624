// The Qwen2-VL image and video processors (transformers' Qwen2VLImageProcessor and
// Qwen2VLVideoProcessor), which the Qwen omni models' processors call (Qwen2_5OmniProcessor,
// Qwen3OmniMoeProcessor): decoded RGB pixels in, the vision encoder's flattened patches and their
// grid out.
//
//   1. smart resize: each side rounded (half to even) to a multiple of patch_size * merge_size; if
//      the area then exceeds max_pixels (or falls below min_pixels) both sides are scaled by
//      sqrt(area / max_pixels) (or sqrt(min_pixels / area)) first and floored (or ceiled) to the
//      multiple; every frame of a video takes its first frame's size;
//   2. bicubic antialiased resampling of the uint8 pixels (model/image_resample.h);
//   3. x * rescale_factor normalised by image_mean / image_std, fused as (x - mean / rescale) /
//      (std / rescale) in float32;
//   4. an image is one frame repeated to temporal_patch_size; a video's frame count is padded to a
//      multiple of it by repeating its last frame;
//   5. patches of [channels, temporal_patch, patch, patch] values, ordered by temporal patch, then
//      by 2 x 2 merge block (row-major), then within the block (row-major).
//
// Video frames come sampled (media/visual_decoder.h's sample_video_frames, with this config's fps,
// min_frames and max_frames); the request says at which rate.
//
// Immutable; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "tensor/tensor.h"

namespace omni::model {

// A medium's grid of patches: t temporal patches of h x w patches (h and w multiples of the merge).
using VisionGrid = std::array<int64_t, 3>;

// The image processor's class defaults (Qwen2VLImageProcessor).
struct VisionProcessorConfig {
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  // The omni processors (Qwen2_5OmniProcessor, Qwen3OmniMoeProcessor) pass their own size to the
  // video processor unless a request sets one: 128 to 768 merge blocks of (patch_size *
  // merge_size)^2 pixels. 0 here means that (parse_vision_processor_config and
  // load_vision_processor_config resolve it; video_pixel_range() reads it).
  int64_t video_min_pixels = 0;
  int64_t video_max_pixels = 0;
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  // Frame sampling of videos (qwen-vl-utils' defaults).
  double fps = 2.0;
  int min_frames = 4;
  int max_frames = 768;

  // The video pixel budget: video_min_pixels/video_max_pixels, or the omni processors' 128 and 768
  // merge blocks where they are 0.
  std::array<int64_t, 2> video_pixel_range() const;
};

// The image processor's fields of a preprocessor_config.json object (`source` names it in errors):
// min_pixels/max_pixels (or size.shortest_edge/longest_edge), patch_size, temporal_patch_size,
// merge_size, image_mean, image_std, rescale_factor, do_resize/do_rescale/do_normalize.
// kLoadFailed naming a field of the wrong type.
VisionProcessorConfig parse_vision_processor_config(const Json& config, const std::string& source);
// The config of a checkpoint folder: preprocessor_config.json, else processor_config.json's
// image_processor; a video_preprocessor_config.json (or processor_config.json's video_processor)
// sets the video fields (its size, fps, min_frames, max_frames). kLoadFailed when there is none.
VisionProcessorConfig load_vision_processor_config(const std::filesystem::path& dir);

// The target size of a height x width picture. kInvalidArgument when a side is shorter than
// `factor` or the aspect ratio exceeds 200.
std::array<int64_t, 2> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                    int64_t max_pixels);

// Decoded RGB frames of one medium, each [height, width, 3] uint8 row-major, all of one size.
struct RgbFrames {
  int64_t height = 0;
  int64_t width = 0;
  std::vector<std::span<const uint8_t>> frames;
};

struct ProcessedVision {
  tensor::Tensor patches;  // [t * h * w, 3 * temporal_patch * patch * patch] float32
  VisionGrid grid{};       // t, h, w in patches
};

class VisionProcessor {
 public:
  explicit VisionProcessor(const VisionProcessorConfig& config) : config_(config) {}
  const VisionProcessorConfig& config() const { return config_; }

  // An image (one frame). kInvalidArgument naming the problem (too small, too thin).
  ProcessedVision image(const RgbFrames& image) const;
  // A video's sampled frames.
  ProcessedVision video(const RgbFrames& frames) const;

 private:
  ProcessedVision process(const RgbFrames& frames, int64_t min_pixels, int64_t max_pixels) const;
  VisionProcessorConfig config_;
};

}  // namespace omni::model
