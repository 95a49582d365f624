// The body of POST /v1/images/generations (OpenAI's images API with vLLM-Omni's extras), parsed
// and checked as a pure function of the JSON, so it can be tested and fuzzed alone. Errors are
// InvalidField (HTTP 400) naming the field. Whether the size suits the model (its multiple, the
// largest image the stage allows) is checked by the stage, which answers 400 the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "media/image_encoder.h"
#include "runtime/serving_backend.h"

namespace omni::server {

inline constexpr int kMaxImagesPerRequest = 10;  // OpenAI's limit on n

struct ImageGenerationRequest {
  std::string prompt;
  std::optional<std::string> negative_prompt;
  int n = 1;
  int width = 0;  // 0 (size absent or "auto"): the stage's default
  int height = 0;
  media::ImageFormat output_format = media::ImageFormat::kPng;
  std::optional<int64_t> num_inference_steps;
  std::optional<double> guidance_scale;
  std::optional<double> true_cfg_scale;
  std::optional<int64_t> max_sequence_length;
  std::optional<uint64_t> seed;  // image i takes seed + i
};

// Fields: prompt (required), n (1..10), size ("WxH" or "auto"), response_format ("b64_json"; "url"
// is refused: images are returned inline), output_format (png, jpeg, webp), negative_prompt,
// num_inference_steps, guidance_scale, true_cfg_scale, max_sequence_length, seed. OpenAI's
// quality, style, background, moderation, output_compression and user are accepted and ignored,
// as is model (the route resolves it).
ImageGenerationRequest parse_image_generation_request(const Json& body);

// The backend request of one image of the request, with its own id and seed.
runtime::GenerationRequest image_generation_request(const ImageGenerationRequest& request, std::string request_id,
                                                    uint64_t seed);

}  // namespace omni::server
