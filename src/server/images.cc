// POST /v1/images/generations: OpenAI's image generation API in front of a pipeline whose final
// stage produces images (a diffusion stage). The n images of a request are n backend requests
// (seeds seed, seed + 1, ...; random when no seed is given), which the stage may batch; the reply
// comes when all are done: {"created", "data": [{"b64_json"}...], "output_format", "size",
// "metrics"}. "metrics" is vLLM-Omni's: {"stage_durations", "peak_memory_mb"}; stage_durations is
// null unless the stage runs with enable_diffusion_pipeline_profiler, then the phases' seconds
// added up over the n images; peak_memory_mb is null (the stages do not measure it).
#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "base/base64.h"
#include "server/generation.h"
#include "server/image_request.h"
#include "server/openai_error.h"
#include "server/openai_format.h"
#include "server/request_fields.h"
#include "server/routes.h"

namespace omni::server {
namespace {

struct Images {
  std::shared_ptr<Responder> responder;
  std::shared_ptr<GenerationRun> run;
  ImageGenerationRequest request;
  std::vector<std::optional<runtime::GeneratedImage>> images;
  std::optional<Error> error;
  bool aborted = false;

  void on_event(size_t index, const runtime::ResponseEvent& event) {
    if (event.error) {
      if (!error) error = event.error;
      return;
    }
    if (event.finish_reason == "abort") aborted = true;
    if (event.image) images[index] = event.image;
  }

  void on_finished() {
    if (!error && aborted)
      error = Error(ErrorCode::kUnavailable, "the request was aborted before its images were done");
    for (size_t i = 0; !error && i < images.size(); ++i) {
      if (!images[i]) error = Error(ErrorCode::kInternal, fmt::format("image {} of the request never arrived", i));
    }
    if (error) return responder->respond(error_response(*error));
    Json data = Json::array();
    int width = 0, height = 0;
    Json stage_durations;
    for (const auto& image : images) {
      if (image->stage_durations.is_object()) {
        if (!stage_durations.is_object()) stage_durations = Json::object();
        for (const auto& [phase, seconds] : image->stage_durations.items()) {
          stage_durations[phase] = stage_durations.value(phase, 0.0) + seconds.get<double>();
        }
      }
      const std::string bytes = media::encode_image(image->rgb, image->width, image->height, request.output_format);
      data.push_back({{"b64_json", base64_encode(bytes)}});
      width = image->width;
      height = image->height;
    }
    const auto created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    responder->respond(
        json_response({{"created", created},
                       {"data", std::move(data)},
                       {"output_format", media::image_format_name(request.output_format)},
                       {"size", fmt::format("{}x{}", width, height)},
                       {"metrics", {{"stage_durations", stage_durations}, {"peak_memory_mb", nullptr}}}}));
  }
};

void handle_image_generation(const ServingContext& context, HttpRequest& http,
                             const std::shared_ptr<Responder>& responder) {
  Json body = parse_request_body(http.body);
  context.resolve_model(body);
  auto images = std::make_shared<Images>();
  images->responder = responder;
  images->request = parse_image_generation_request(body);
  images->images.resize(static_cast<size_t>(images->request.n));
  const std::string id = random_request_id("img-");
  const uint64_t seed = images->request.seed ? *images->request.seed : std::random_device{}() & 0x7FFFFFFFu;
  std::vector<runtime::GenerationRequest> requests;
  for (int i = 0; i < images->request.n; ++i) {
    requests.push_back(
        image_generation_request(images->request, fmt::format("{}-{}", id, i), seed + static_cast<uint64_t>(i)));
  }
  images->run = GenerationRun::start(
      context, responder, std::move(requests),
      {[images](size_t index, const runtime::ResponseEvent& event) { images->on_event(index, event); },
       [images] {
         images->on_finished();
         images->run.reset();  // breaks the cycle images -> run -> callbacks -> images
       }},
      http.received_at);
}

}  // namespace

void add_image_routes(Router& router, const ServingContext& context) {
  router.add("POST", "/v1/images/generations", [&context](HttpRequest& request, std::shared_ptr<Responder> responder) {
    handle_image_generation(context, request, responder);
  });
}

}  // namespace omni::server
