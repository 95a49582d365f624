#include "model/vision_processor.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/image_resample.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;
using tensor::DType;
using tensor::Tensor;

template <typename T>
void read_number(const Json& c, const char* key, T& out, const std::string& source) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return;
  if (!it->is_number() || it->get<double>() <= 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: '{}' must be a positive number, got {}", source, key, it->dump());
  }
  out = it->get<T>();
}

void read_bool(const Json& c, const char* key, bool& out, const std::string& source) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return;
  if (!it->is_boolean()) throw_error(ErrorCode::kLoadFailed, "{}: '{}' must be true or false", source, key);
  out = it->get<bool>();
}

void read_triple(const Json& c, const char* key, std::array<double, 3>& out, const std::string& source) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return;
  if (it->is_number()) {
    out.fill(it->get<double>());
    return;
  }
  if (!it->is_array() || it->size() != 3 || !(*it)[0].is_number() || !(*it)[1].is_number() || !(*it)[2].is_number()) {
    throw_error(ErrorCode::kLoadFailed, "{}: '{}' must be 3 numbers, got {}", source, key, it->dump());
  }
  for (int i = 0; i < 3; ++i) out[i] = (*it)[i].get<double>();
}

// min/max pixels of one processor's fields: min_pixels/max_pixels, else size.shortest_edge/longest_edge.
void read_size(const Json& c, int64_t& min_pixels, int64_t& max_pixels, const std::string& source) {
  if (auto size = c.find("size"); size != c.end() && size->is_object()) {
    read_number(*size, "shortest_edge", min_pixels, source + ": size");
    read_number(*size, "longest_edge", max_pixels, source + ": size");
  }
  read_number(c, "min_pixels", min_pixels, source);
  read_number(c, "max_pixels", max_pixels, source);
}

void read_video_fields(const Json& c, VisionProcessorConfig& v, const std::string& source) {
  read_size(c, v.video_min_pixels, v.video_max_pixels, source);
  read_number(c, "fps", v.fps, source);
  read_number(c, "min_frames", v.min_frames, source);
  read_number(c, "max_frames", v.max_frames, source);
}

}  // namespace

std::array<int64_t, 2> VisionProcessorConfig::video_pixel_range() const {
  const int64_t block = static_cast<int64_t>(patch_size) * merge_size;
  return {video_min_pixels > 0 ? video_min_pixels : 128 * block * block,
          video_max_pixels > 0 ? video_max_pixels : 768 * block * block};
}

VisionProcessorConfig parse_vision_processor_config(const Json& c, const std::string& source) {
  if (!c.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: must be a JSON object", source);
  VisionProcessorConfig v;
  read_number(c, "patch_size", v.patch_size, source);
  read_number(c, "temporal_patch_size", v.temporal_patch_size, source);
  read_number(c, "merge_size", v.merge_size, source);
  read_size(c, v.min_pixels, v.max_pixels, source);
  read_number(c, "rescale_factor", v.rescale_factor, source);
  read_triple(c, "image_mean", v.image_mean, source);
  read_triple(c, "image_std", v.image_std, source);
  read_bool(c, "do_resize", v.do_resize, source);
  read_bool(c, "do_rescale", v.do_rescale, source);
  read_bool(c, "do_normalize", v.do_normalize, source);
  if (v.min_pixels > v.max_pixels) {
    throw_error(ErrorCode::kLoadFailed, "{}: min_pixels {} exceeds max_pixels {}", source, v.min_pixels, v.max_pixels);
  }
  return v;
}

VisionProcessorConfig load_vision_processor_config(const fs::path& dir) {
  VisionProcessorConfig v;
  const fs::path flat = dir / "preprocessor_config.json", nested = dir / "processor_config.json";
  if (fs::exists(flat)) {
    v = parse_vision_processor_config(read_json_file(flat), flat.string());
  } else if (fs::exists(nested)) {
    const Json processor = read_json_file(nested);
    auto image = processor.find("image_processor");
    if (image == processor.end())
      throw_error(ErrorCode::kLoadFailed, "{}: missing field 'image_processor'", nested.string());
    v = parse_vision_processor_config(*image, nested.string() + ": image_processor");
    if (auto video = processor.find("video_processor"); video != processor.end() && video->is_object()) {
      read_video_fields(*video, v, nested.string() + ": video_processor");
    }
  } else {
    throw_error(ErrorCode::kLoadFailed, "{}: no preprocessor_config.json or processor_config.json (the image settings)",
                dir.string());
  }
  if (const fs::path video = dir / "video_preprocessor_config.json"; fs::exists(video)) {
    read_video_fields(read_json_file(video), v, video.string());
  }
  return v;
}

std::array<int64_t, 2> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                    int64_t max_pixels) {
  if (height < factor || width < factor) {
    throw_error(ErrorCode::kInvalidArgument, "the picture is {} x {} pixels; each side must be at least {}", width,
                height, factor);
  }
  if (static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width)) > 200.0) {
    throw_error(ErrorCode::kInvalidArgument, "the picture is {} x {} pixels; its aspect ratio must not exceed 200",
                width, height);
  }
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  int64_t hb = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t wb = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    hb = static_cast<int64_t>(std::floor(h / beta / f)) * factor;
    wb = static_cast<int64_t>(std::floor(w / beta / f)) * factor;
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {hb, wb};
}

ProcessedVision VisionProcessor::image(const RgbFrames& image) const {
  if (image.frames.size() != 1)
    throw_error(ErrorCode::kInvalidArgument, "an image has one frame, got {}", image.frames.size());
  return process(image, config_.min_pixels, config_.max_pixels);
}

ProcessedVision VisionProcessor::video(const RgbFrames& frames) const {
  if (frames.frames.empty()) throw_error(ErrorCode::kInvalidArgument, "the video has no frames");
  const auto [min_pixels, max_pixels] = config_.video_pixel_range();
  return process(frames, min_pixels, max_pixels);
}

ProcessedVision VisionProcessor::process(const RgbFrames& in, int64_t min_pixels, int64_t max_pixels) const {
  const int64_t patch = config_.patch_size, tps = config_.temporal_patch_size, merge = config_.merge_size;
  for (const auto& f : in.frames) {
    if (static_cast<int64_t>(f.size()) != in.height * in.width * 3) {
      throw_error(ErrorCode::kInvalidArgument, "a frame of {} bytes is not {} x {} RGB pixels", f.size(), in.width,
                  in.height);
    }
  }
  int64_t height = in.height, width = in.width;
  if (config_.do_resize) {
    const auto size = smart_resize(in.height, in.width, patch * merge, min_pixels, max_pixels);
    height = size[0];
    width = size[1];
  } else if (height % (patch * merge) != 0 || width % (patch * merge) != 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "the picture is {} x {} pixels, not a multiple of {} (and do_resize is off)", in.width, in.height,
                patch * merge);
  }
  // The normalisation fused with the rescale, in float32 as the processors compute it.
  std::array<float, 3> mean{}, std{};
  for (int c = 0; c < 3; ++c) {
    const float scale = config_.do_rescale ? static_cast<float>(1.0 / config_.rescale_factor) : 1.0f;
    mean[c] = config_.do_normalize ? static_cast<float>(config_.image_mean[c]) * scale : 0.0f;
    std[c] = config_.do_normalize ? static_cast<float>(config_.image_std[c]) * scale : scale;
  }
  // Frames, [t][c][y][x] float32, padded to a multiple of the temporal patch with the last frame.
  const int64_t frames = static_cast<int64_t>(in.frames.size());
  const int64_t padded = frames == 1 ? tps : (frames + tps - 1) / tps * tps;
  const int64_t plane = height * width;
  std::vector<float> values(static_cast<size_t>(frames * 3 * plane));
  for (int64_t t = 0; t < frames; ++t) {
    std::vector<uint8_t> resized;
    std::span<const uint8_t> px = in.frames[t];
    if (height != in.height || width != in.width) {
      resized = resize_bicubic_antialias(px, in.height, in.width, 3, height, width);
      px = resized;
    }
    float* dst = values.data() + t * 3 * plane;
    for (int64_t i = 0; i < plane; ++i) {
      for (int c = 0; c < 3; ++c) dst[c * plane + i] = (static_cast<float>(px[i * 3 + c]) - mean[c]) / std[c];
    }
  }
  const int64_t gt = padded / tps, gh = height / patch, gw = width / patch;
  const int64_t row_values = 3 * tps * patch * patch;
  ProcessedVision out;
  out.grid = {gt, gh, gw};
  out.patches = Tensor::empty({gt * gh * gw, row_values}, DType::kF32);
  float* o = out.patches.data<float>();
  for (int64_t t = 0; t < gt; ++t) {
    for (int64_t bh = 0; bh < gh / merge; ++bh) {
      for (int64_t bw = 0; bw < gw / merge; ++bw) {
        for (int64_t mh = 0; mh < merge; ++mh) {
          for (int64_t mw = 0; mw < merge; ++mw) {
            const int64_t y0 = (bh * merge + mh) * patch, x0 = (bw * merge + mw) * patch;
            for (int64_t c = 0; c < 3; ++c) {
              for (int64_t k = 0; k < tps; ++k) {
                const int64_t frame = std::min(t * tps + k, frames - 1);
                const float* src = values.data() + (frame * 3 + c) * plane;
                for (int64_t y = 0; y < patch; ++y) {
                  const float* row = src + (y0 + y) * width + x0;
                  o = std::copy(row, row + patch, o);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace omni::model
