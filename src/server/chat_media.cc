#include "server/chat_media.h"

#include <algorithm>
#include <bit>
#include <fstream>
#include <iterator>
#include <string_view>

#include "base/base64.h"
#include "base/error.h"
#include "server/media_fetch.h"
#include "server/openai_error.h"

namespace omni::server {
namespace {

namespace fs = std::filesystem;

// vLLM's default --limit-mm-per-prompt for a modality it is not given.
constexpr int kDefaultLimit = 999;

// The modality of a media content part type; empty for text and unknown types.
std::string modality_of(const std::string& type) {
  if (type == "input_audio" || type == "audio_url" || type == "audio") return "audio";
  if (type == "image_url" || type == "image" || type == "image_embeds") return "image";
  if (type == "video_url" || type == "video") return "video";
  return "";
}

// The encoded bytes of an audio part.
std::string audio_part_bytes(const Json& part, const std::string& type, const ChatMediaOptions& options,
                             const std::string& field) {
  if (type == "input_audio") {
    auto body = part.find("input_audio");
    if (body == part.end() || !body->is_object() || !body->contains("data") || !(*body)["data"].is_string()) {
      throw_invalid_field(field + ".input_audio", "'{}.input_audio' must be an object with base64 'data' and 'format'",
                          field);
    }
    if (auto format = body->find("format"); format != body->end() && !format->is_null() && !format->is_string()) {
      throw_invalid_field(field + ".input_audio.format", "'{}.input_audio.format' must be a string", field);
    }
    try {
      return base64_decode((*body)["data"].get<std::string>());
    } catch (const Error& e) {
      throw_invalid_field(field + ".input_audio.data", "'{}.input_audio.data' is not base64: {}", field, e.what());
    }
  }
  if (type != "audio_url") {
    throw_invalid_field(field, "'{}': a '{}' part is not read; send input_audio or audio_url", field, type);
  }
  auto body = part.find("audio_url");
  std::string url;
  if (body != part.end() && body->is_string()) url = body->get<std::string>();
  if (body != part.end() && body->is_object() && body->contains("url") && (*body)["url"].is_string())
    url = (*body)["url"];
  if (url.empty()) throw_invalid_field(field + ".audio_url", "'{}.audio_url' must be an object with a 'url'", field);
  if (url.rfind("data:", 0) == 0 || media_reference_is_url(url)) {
    return fetch_media(url, field + ".audio_url",
                       {options.allowed_local_media_path, options.audio_limits.max_bytes, options.fetch_timeout});
  }
  throw_invalid_field(field + ".audio_url", "'{}.audio_url': the URL must be data:, http(s):// or file://", field);
}

// The encoded bytes of an image_url or video_url part.
std::string visual_part_bytes(const Json& part, const std::string& type, const ChatMediaOptions& options,
                              const std::string& field) {
  const std::string key = type == "image_url" || type == "image" ? "image_url" : "video_url";
  if (type != "image_url" && type != "video_url") {
    throw_invalid_field(field, "'{}': a '{}' part is not read; send {}", field, type,
                        key == "image_url" ? "image_url" : "video_url");
  }
  auto body = part.find(key);
  std::string url;
  if (body != part.end() && body->is_string()) url = body->get<std::string>();
  if (body != part.end() && body->is_object() && body->contains("url") && (*body)["url"].is_string())
    url = (*body)["url"];
  if (url.empty()) throw_invalid_field(field + "." + key, "'{}.{}' must be an object with a 'url'", field, key);
  if (url.rfind("data:", 0) == 0 || media_reference_is_url(url)) {
    return fetch_media(url, field + "." + key,
                       {options.allowed_local_media_path, options.visual_limits.max_bytes, options.fetch_timeout});
  }
  throw_invalid_field(field + "." + key, "'{}.{}': the URL must be data:, http(s):// or file://", field, key);
}

std::string little_endian_f32(const std::vector<float>& samples) {
  static_assert(std::endian::native == std::endian::little, "samples travel as little-endian float32");
  return std::string(reinterpret_cast<const char*>(samples.data()), samples.size() * sizeof(float));
}

}  // namespace

std::map<std::string, int> parse_limit_mm_per_prompt(const std::string& json) {
  Json parsed;
  try {
    parsed = Json::parse(json);
  } catch (const std::exception& e) {
    throw_error(ErrorCode::kInvalidConfig, "--limit-mm-per-prompt: not JSON ({}): {}", e.what(), json);
  }
  if (!parsed.is_object()) throw_error(ErrorCode::kInvalidConfig, "--limit-mm-per-prompt must be a JSON object");
  std::map<std::string, int> limits;
  for (const auto& [modality, value] : parsed.items()) {
    if (modality != "audio" && modality != "image" && modality != "video") {
      throw_error(ErrorCode::kInvalidConfig, "--limit-mm-per-prompt: '{}' is not a modality (audio, image, video)",
                  modality);
    }
    const Json* count = &value;
    if (value.is_object() && value.contains("count")) count = &value["count"];
    if (!count->is_number_integer() || count->get<int64_t>() < 0) {
      throw_error(ErrorCode::kInvalidConfig, "--limit-mm-per-prompt: '{}' must be a count >= 0, got {}", modality,
                  value.dump());
    }
    limits[modality] = count->get<int>();
  }
  return limits;
}

std::vector<std::string> readable_media(const ChatMediaOptions& options) {
  std::vector<std::string> kinds;
  if (options.audio_sample_rate > 0) kinds.push_back("audio");
  if (options.images) kinds.push_back("image");
  if (options.videos) kinds.push_back("video");
  return kinds;
}

Json collect_chat_media(const Json& messages, const ChatMediaOptions& options) {
  Json media = Json::object();
  std::map<std::string, int> counts;
  double seconds_so_far = 0.0;
  for (size_t i = 0; messages.is_array() && i < messages.size(); ++i) {
    auto content = messages[i].find("content");
    if (content == messages[i].end() || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      const Json& part = (*content)[j];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) continue;
      const std::string type = part["type"];
      const std::string modality = modality_of(type);
      if (modality.empty()) continue;
      const std::string field = fmt::format("messages[{}].content[{}]", i, j);
      const auto limit = options.limit_per_prompt.find(modality);
      const int most = limit == options.limit_per_prompt.end() ? kDefaultLimit : limit->second;
      if (++counts[modality] > most) {
        throw_invalid_field(field, "'{}': at most {} {} part(s) may be provided in one prompt (--limit-mm-per-prompt)",
                            field, most, modality);
      }
      const bool readable = (modality == "audio" && options.audio_sample_rate > 0) ||
                            (modality == "image" && options.images) || (modality == "video" && options.videos);
      if (!readable) {
        throw_invalid_field(field, "'{}' is a {} part, but the served model does not read {} input", field, type,
                            modality);
      }
      if (modality == "image") {
        const std::string bytes = visual_part_bytes(part, type, options, field);
        media::DecodedImage image;
        try {
          image = media::decode_image(bytes, options.visual_limits);
        } catch (const Error& e) {
          throw_invalid_field(field, "'{}': {}", field, e.what());
        }
        media["image"].push_back(Json{{"data", base64_encode(std::string_view(
                                                   reinterpret_cast<const char*>(image.rgb.data()), image.rgb.size()))},
                                      {"width", image.width},
                                      {"height", image.height},
                                      {"source", field}});
        continue;
      }
      if (modality == "video") {
        const std::string bytes = visual_part_bytes(part, type, options, field);
        media::DecodedVideo video;
        try {
          video = media::decode_video(bytes, options.video_sampling, options.visual_limits);
        } catch (const Error& e) {
          throw_invalid_field(field, "'{}': {}", field, e.what());
        }
        std::string rgb;
        for (const auto& frame : video.frames) rgb.append(reinterpret_cast<const char*>(frame.data()), frame.size());
        Json entry{{"data", base64_encode(rgb)},
                   {"width", video.width},
                   {"height", video.height},
                   {"frames", video.frames.size()},
                   {"fps", video.sampled_fps},
                   {"source", field}};
        if (options.use_audio_in_video) {
          // The whole track, as an audio part of the same bytes would be decoded.
          media::AudioDecodeLimits limits = options.audio_limits;
          limits.max_seconds -= seconds_so_far;
          std::vector<float> samples;
          try {
            samples = media::decode_audio_at(bytes, options.audio_sample_rate, limits);
          } catch (const Error& e) {
            throw_invalid_field(field, "'{}': its audio track (mm_processor_kwargs.use_audio_in_video): {}", field,
                                e.what());
          }
          if (samples.empty()) {
            throw_invalid_field(field, "'{}': the video's audio track has no samples (mm_processor_kwargs."
                                "use_audio_in_video)", field);
          }
          seconds_so_far += static_cast<double>(samples.size()) / options.audio_sample_rate;
          entry["audio"] = Json{{"data", base64_encode(little_endian_f32(samples))},
                                {"sample_rate", options.audio_sample_rate}};
        }
        media["video"].push_back(std::move(entry));
        continue;
      }
      const std::string bytes = audio_part_bytes(part, type, options, field);
      std::vector<float> samples;
      // The duration limit holds for the request's audio in all, not for each part alone.
      media::AudioDecodeLimits limits = options.audio_limits;
      limits.max_seconds -= seconds_so_far;
      try {
        samples = media::decode_audio_at(bytes, options.audio_sample_rate, limits);
      } catch (const Error& e) {
        throw_invalid_field(field, "'{}': {}{}", field, e.what(),
                            seconds_so_far > 0 ? fmt::format(" (after {:.1f} s of audio in earlier parts; the limit "
                                                             "is for all of them)",
                                                             seconds_so_far)
                                               : std::string());
      }
      if (samples.empty()) throw_invalid_field(field, "'{}': the audio has no samples", field);
      seconds_so_far += static_cast<double>(samples.size()) / options.audio_sample_rate;
      media["audio"].push_back(Json{{"data", base64_encode(little_endian_f32(samples))},
                                    {"sample_rate", options.audio_sample_rate},
                                    {"source", field}});
    }
  }
  return media;
}

}  // namespace omni::server
