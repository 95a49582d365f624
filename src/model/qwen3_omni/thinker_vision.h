// The thinker's image and video input, from decoded RGB frames to the rows that replace a prompt's
// `<|image_pad|>`/`<|video_pad|>` placeholders and their DeepStack rows: the checkpoint's image and
// video processors (preprocessor_config.json, model/vision_processor.h) and its vision encoder
// (thinker.visual.*, thinker_config.vision_config), as Qwen3OmniMoeProcessor and the thinker's
// get_image_features / get_video_features compute them.
//
// Immutable after loading; encode() may be called from any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/qwen3_omni/thinker_prompt.h"
#include "model/qwen3_omni/vision_encoder.h"
#include "model/vision_processor.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_omni {

// One image (one frame) or one video's sampled frames; `fps` is the rate of the sampled frames (a
// video's temporal patch spans temporal_patch_size / fps seconds).
struct VisionInput {
  RgbFrames frames;
  bool video = false;
  double fps = 2.0;
};

// A request's pixel budget (mm_processor_kwargs min_pixels and max_pixels, given together: as
// transformers' Qwen2-VL processors take them, they replace the image processor's and the video
// processor's [min, max] both). Zero: the checkpoint's.
struct VisionPixelBudget {
  int64_t min_pixels = 0;
  int64_t max_pixels = 0;
};

struct EncodedVision {
  std::vector<VisionSegment> segments;                 // per input, in order
  std::vector<tensor::Tensor> rows;                    // per input: [segments[i].rows(), hidden] host float32
  std::vector<std::vector<tensor::Tensor>> deepstack;  // per input: one like rows per DeepStack layer
};

class ThinkerVision {
 public:
  // Loads the processor settings of `dir` (config: its config.json) and the vision encoder from
  // `ckpt` onto `placement`. kLoadFailed naming the file, field or tensor at fault.
  ThinkerVision(const std::filesystem::path& dir, const Json& config, const Checkpoint& ckpt, Placement placement);

  const VisionProcessor& processor() const { return processor_; }
  const VisionEncoder& encoder() const { return *encoder_; }
  // DeepStack layers the rows come with.
  size_t deepstack_layers() const { return encoder_->config().deepstack_visual_indexes.size(); }
  // The rows of `inputs` (processed one by one, encoded together) and their segments (a video's
  // second_per_grid = temporal_patch_size / its fps). kInvalidArgument naming the input the
  // processor refuses: sources[i] when given, else its kind and index.
  EncodedVision encode(std::span<const VisionInput> inputs, std::span<const std::string> sources = {},
                       const VisionPixelBudget& budget = {}) const;

 private:
  VisionProcessor processor_;
  std::unique_ptr<VisionEncoder> encoder_;
};

// Whether the checkpoint of `dir` reads images and video: it has a preprocessor config and a vision
// encoder (thinker.visual.* in its weights; in a folder without weight files, which serves with
// random weights, thinker_config.vision_config in config.json). Defined in thinker.cc.
bool has_vision_input(const std::filesystem::path& dir);

}  // namespace omni::model::qwen3_omni
