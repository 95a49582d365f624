#include "server/mm_processor_kwargs.h"

#include <algorithm>
#include <string>
#include <vector>

#include "server/openai_error.h"

namespace omni::server {
namespace {

// The keys a model with `options`' media takes, in the order the error lists them.
std::vector<std::string> allowed_keys(const ChatMediaOptions& options) {
  std::vector<std::string> keys;
  if (options.images || options.videos) keys = {"min_pixels", "max_pixels"};
  if (options.videos) {
    for (const char* k : {"fps", "min_frames", "max_frames", "use_audio_in_video"}) keys.emplace_back(k);
  }
  return keys;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

Json MmProcessorKwargs::stage_kwargs() const {
  Json out = Json::object();
  if (min_pixels) out["min_pixels"] = *min_pixels;
  if (max_pixels) out["max_pixels"] = *max_pixels;
  return out;
}

MmProcessorKwargs parse_mm_processor_kwargs(const Json* value, const ChatMediaOptions& options) {
  MmProcessorKwargs out;
  if (value == nullptr || value->is_null()) return out;
  if (!value->is_object()) {
    throw_invalid_field("mm_processor_kwargs", "'mm_processor_kwargs' must be an object, got {}", value->dump());
  }
  const std::vector<std::string> allowed = allowed_keys(options);
  for (const auto& item : value->items()) {
    // Named, not structured bindings: clang 14 (the fuzz build) cannot capture those in a lambda.
    const std::string& key = item.key();
    const Json& v = item.value();
    const std::string field = "mm_processor_kwargs." + key;
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      if (allowed.empty()) {
        throw_invalid_field(field, "'{}' is not taken: the served model reads no images or video, so it takes no "
                            "processor kwargs", field);
      }
      throw_invalid_field(field, "'{}' is not a processor kwarg of the served model; it takes {}", field,
                          joined(allowed));
    }
    if (v.is_null()) continue;
    const auto positive_integer = [&](int64_t most) {
      if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > most) {
        throw_invalid_field(field, "'{}' must be a positive integer (at most {}), got {}", field, most, v.dump());
      }
      return v.get<int64_t>();
    };
    if (key == "min_pixels") {
      out.min_pixels = positive_integer(int64_t{1} << 40);
    } else if (key == "max_pixels") {
      out.max_pixels = positive_integer(int64_t{1} << 40);
    } else if (key == "min_frames") {
      out.min_frames = static_cast<int>(positive_integer(1 << 20));
    } else if (key == "max_frames") {
      out.max_frames = static_cast<int>(positive_integer(1 << 20));
    } else if (key == "fps") {
      if (!v.is_number() || !(v.get<double>() > 0.0) || v.get<double>() > 1000.0) {
        throw_invalid_field(field, "'{}' must be a positive number of frames per second (at most 1000), got {}",
                            field, v.dump());
      }
      out.fps = v.get<double>();
    } else {  // use_audio_in_video
      if (!v.is_boolean()) throw_invalid_field(field, "'{}' must be a boolean, got {}", field, v.dump());
      out.use_audio_in_video = v.get<bool>();
      if (out.use_audio_in_video && options.audio_sample_rate <= 0) {
        throw_invalid_field(field, "'{}': the served model reads no audio, so a video's audio cannot be used", field);
      }
    }
  }
  if (out.min_pixels && out.max_pixels && *out.min_pixels > *out.max_pixels) {
    throw_invalid_field("mm_processor_kwargs.min_pixels", "'mm_processor_kwargs.min_pixels' ({}) exceeds max_pixels ({})",
                        *out.min_pixels, *out.max_pixels);
  }
  const int min_frames = out.min_frames.value_or(options.video_sampling.min_frames);
  const int max_frames = out.max_frames.value_or(options.video_sampling.max_frames);
  if ((out.min_frames || out.max_frames) && min_frames > max_frames) {
    throw_invalid_field(out.min_frames ? "mm_processor_kwargs.min_frames" : "mm_processor_kwargs.max_frames",
                        "'mm_processor_kwargs': min_frames ({}) exceeds max_frames ({})", min_frames, max_frames);
  }
  return out;
}

ChatMediaOptions with_processor_kwargs(const ChatMediaOptions& options, const MmProcessorKwargs& kwargs) {
  ChatMediaOptions out = options;
  if (kwargs.fps) out.video_sampling.fps = *kwargs.fps;
  if (kwargs.min_frames) out.video_sampling.min_frames = *kwargs.min_frames;
  if (kwargs.max_frames) out.video_sampling.max_frames = *kwargs.max_frames;
  out.use_audio_in_video = kwargs.use_audio_in_video;
  return out;
}

}  // namespace omni::server
