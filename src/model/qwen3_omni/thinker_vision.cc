#include "model/qwen3_omni/thinker_vision.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "model/safetensors.h"

namespace omni::model::qwen3_omni {
namespace {

using tensor::DType;
using tensor::Tensor;

VisionEncoderConfig vision_config_of(const std::filesystem::path& dir, const Json& config) {
  const std::string source = (dir / "config.json").string();
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object() || !thinker->contains("vision_config")) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config.vision_config'", source);
  }
  return parse_vision_encoder_config((*thinker)["vision_config"], source + ": thinker_config.vision_config");
}

// Rows [begin, end) of a host float32 matrix as a new tensor.
Tensor rows_of(const Tensor& m, int64_t begin, int64_t end) {
  const int64_t width = m.dim(1);
  Tensor out = Tensor::empty({end - begin, width}, DType::kF32);
  std::copy(m.data<float>() + begin * width, m.data<float>() + end * width, out.data<float>());
  return out;
}

}  // namespace

ThinkerVision::ThinkerVision(const std::filesystem::path& dir, const Json& config, const Checkpoint& ckpt,
                             Placement placement)
    : processor_(load_vision_processor_config(dir)) {
  const VisionEncoderConfig vision = vision_config_of(dir, config);
  const VisionProcessorConfig& p = processor_.config();
  if (p.patch_size != vision.patch_size || p.temporal_patch_size != vision.temporal_patch_size ||
      p.merge_size != vision.spatial_merge_size) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: the image processor's patches ({} pixels, temporal {}, merge {}) are not the vision encoder's "
                "({}, {}, {})",
                dir.string(), p.patch_size, p.temporal_patch_size, p.merge_size, vision.patch_size,
                vision.temporal_patch_size, vision.spatial_merge_size);
  }
  encoder_ = std::make_unique<VisionEncoder>(ckpt, vision, "thinker.visual.", placement);
}

EncodedVision ThinkerVision::encode(std::span<const VisionInput> inputs, std::span<const std::string> sources,
                                    const VisionPixelBudget& budget) const {
  EncodedVision out;
  if (inputs.empty()) return out;
  VisionProcessorConfig config = processor_.config();
  if (budget.min_pixels > 0 && budget.max_pixels > 0) {
    config.min_pixels = config.video_min_pixels = budget.min_pixels;
    config.max_pixels = config.video_max_pixels = budget.max_pixels;
  }
  const VisionProcessor processor(config);
  std::vector<ProcessedVision> processed;
  std::vector<VisionGrid> grids;
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    try {
      processed.push_back(inputs[i].video ? processor.video(inputs[i].frames) : processor.image(inputs[i].frames));
    } catch (const Error& e) {
      const std::string name =
          i < sources.size() ? sources[i] : std::string(inputs[i].video ? "video " : "image ") + std::to_string(i);
      throw_error(ErrorCode::kInvalidArgument, "{}: {}", name, e.what());
    }
    grids.push_back(processed.back().grid);
    total += processed.back().patches.dim(0);
  }
  const int64_t width = processed.front().patches.dim(1);
  Tensor patches = Tensor::empty({total, width}, DType::kF32);
  float* dst = patches.data<float>();
  for (const ProcessedVision& p : processed)
    dst = std::copy(p.patches.data<float>(), p.patches.data<float>() + p.patches.numel(), dst);
  const VisionRows rows = encoder_->encode(patches, grids);
  const int merge = encoder_->config().spatial_merge_size, tps = encoder_->config().temporal_patch_size;
  int64_t begin = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    VisionSegment seg;
    seg.t = grids[i][0];
    seg.h = grids[i][1];
    seg.w = grids[i][2];
    seg.merge = merge;
    // An image: t is 1 and its step never counts. A video: a temporal patch spans tps / fps seconds.
    seg.second_per_grid = inputs[i].video ? static_cast<double>(tps) / inputs[i].fps : 1.0;
    const int64_t end = begin + seg.rows();
    out.segments.push_back(seg);
    out.rows.push_back(rows_of(rows.rows, begin, end));
    out.deepstack.emplace_back();
    for (const Tensor& d : rows.deepstack) out.deepstack.back().push_back(rows_of(d, begin, end));
    begin = end;
  }
  return out;
}

}  // namespace omni::model::qwen3_omni
