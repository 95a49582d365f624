#include "server/image_request.h"

#include <charconv>

#include "server/openai_error.h"
#include "server/request_fields.h"

namespace omni::server {

namespace {

// "WxH" with both sides positive integers.
bool parse_size(const std::string& text, int& width, int& height) {
  const size_t x = text.find('x');
  if (x == std::string::npos || x == 0 || x + 1 == text.size()) return false;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [p1, e1] = std::from_chars(begin, begin + x, width);
  auto [p2, e2] = std::from_chars(begin + x + 1, end, height);
  return e1 == std::errc() && p1 == begin + x && e2 == std::errc() && p2 == end && width > 0 && height > 0;
}

}  // namespace

ImageGenerationRequest parse_image_generation_request(const Json& body) {
  const FieldReader f(body);
  ImageGenerationRequest r;
  const std::optional<std::string> prompt = f.string("prompt");
  if (!prompt || prompt->empty()) throw InvalidField("prompt", "prompt is required and must not be empty");
  r.prompt = *prompt;
  r.negative_prompt = f.string("negative_prompt");
  r.n = static_cast<int>(f.integer("n", 1, kMaxImagesPerRequest).value_or(1));
  if (const std::optional<std::string> size = f.string("size"); size && *size != "auto") {
    if (!parse_size(*size, r.width, r.height)) {
      throw InvalidField("size", "size must be 'WIDTHxHEIGHT' with positive integers (e.g. '1024x1024') or 'auto', got " +
                                     brief(body["size"]));
    }
  }
  if (const std::optional<std::string> format = f.string("response_format"); format && *format != "b64_json") {
    if (*format == "url") {
      throw InvalidField("response_format",
                         "response_format 'url' is not supported: this server returns images inline; use 'b64_json'");
    }
    throw InvalidField("response_format", "response_format must be 'b64_json', got " + brief(body["response_format"]));
  }
  if (const std::optional<std::string> format = f.string("output_format")) {
    const std::optional<media::ImageFormat> parsed = media::parse_image_format(*format);
    if (!parsed || *format == "jpg") {
      throw InvalidField("output_format", "output_format must be png, jpeg or webp, got " + brief(body["output_format"]));
    }
    r.output_format = *parsed;
  }
  r.num_inference_steps = f.integer("num_inference_steps", 1, 1000);
  r.guidance_scale = f.number("guidance_scale", 0.0, 100.0);
  r.true_cfg_scale = f.number("true_cfg_scale", 0.0, 100.0);
  r.max_sequence_length = f.integer("max_sequence_length", 1, 1 << 20);
  if (const std::optional<int64_t> seed = f.integer("seed", 0)) r.seed = static_cast<uint64_t>(*seed);
  return r;
}

runtime::GenerationRequest image_generation_request(const ImageGenerationRequest& request, std::string request_id,
                                                    uint64_t seed) {
  runtime::GenerationRequest g;
  g.request_id = std::move(request_id);
  g.output_modalities = {"image"};
  g.additional_information = {{"prompt", request.prompt}};
  if (request.negative_prompt) g.additional_information["negative_prompt"] = *request.negative_prompt;
  Json params = Json::object();
  if (request.width > 0) {
    params["width"] = request.width;
    params["height"] = request.height;
  }
  if (request.num_inference_steps) params["num_inference_steps"] = *request.num_inference_steps;
  if (request.guidance_scale) params["guidance_scale"] = *request.guidance_scale;
  if (request.true_cfg_scale) params["true_cfg_scale"] = *request.true_cfg_scale;
  if (request.max_sequence_length) params["max_sequence_length"] = *request.max_sequence_length;
  params["seed"] = seed;
  g.sampling_params = std::move(params);
  return g;
}

}  // namespace omni::server
