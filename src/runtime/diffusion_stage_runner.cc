#include "runtime/diffusion_stage_runner.h"

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "engine/diffusion_engine.h"
#include "model/stage_model_registry.h"
#include "runtime/engine_args.h"

namespace omni::runtime {

namespace {

constexpr int64_t kDefaultMaxImagePixels = 33177600;  // 7680 x 4320

class DiffusionStageRunner final : public StageRunner {
 public:
  DiffusionStageRunner(const Json& engine_args, const StageRunnerContext& context) : stage_id_(context.stage_id) {
    const EngineArgs args(engine_args, context.stage_id);
    engine::DiffusionEngineConfig config;
    config.max_num_seqs = args.value_or<int>("max_num_seqs", 1);
    config.request_batch_max_wait_ms = args.value_or<double>("request_batch_max_wait_ms", 0.0);
    config.step_execution = args.value_or<bool>("step_execution", false);
    profile_ = args.value_or<bool>("enable_diffusion_pipeline_profiler", false);
    max_pixels_ = args.value_or<int64_t>("max_generated_image_size", kDefaultMaxImagePixels);
    if (config.max_num_seqs < 1 || max_pixels_ < 1) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: max_num_seqs and max_generated_image_size must be >= 1",
                  stage_id_);
    }
    model_ = model::builtin_stage_models().create_diffusion(args.stage_model(), args.stage_model_args());
    engine_ = std::make_unique<engine::DiffusionEngine>(*model_, config);
  }

  ~DiffusionStageRunner() override { engine_.reset(); }

  void add_request(StageRequest request) override {
    const model::ImageRequest image = image_request(request);
    engine_->add_request(request.request_id, image);
    started_[request.request_id] = std::chrono::steady_clock::now();
  }

  void abort(const std::string& request_id) override {
    engine_->abort(request_id);
    started_.erase(request_id);
  }

  size_t running_requests() const override { return engine_->num_requests(); }

  // Each denoising step of the running batch ("denoise_step") and each image's decode ("vae_decode"),
  // for omnistage:stage_step_seconds.
  std::vector<StepTiming> take_step_timings() override {
    std::vector<StepTiming> timings;
    for (engine::EnginePartTime& t : engine_->take_part_times()) timings.push_back({std::move(t.part), t.seconds});
    return timings;
  }
  bool can_step() const override { return engine_->has_ready_work(); }

  std::vector<StageOutput> step() override {
    std::vector<StageOutput> outputs;
    for (engine::ImageOutput& out : engine_->step()) {
      StageOutput o;
      o.request_id = out.request_id;
      if (out.error) {
        o.error = Error(out.error->code(), fmt::format("stage {}: {}", stage_id_, out.error->what()));
      } else {
        GeneratedImage image;
        image.width = out.image->width;
        image.height = out.image->height;
        image.rgb = std::move(out.image->pixels);
        image.steps = out.steps_done;
        if (auto it = started_.find(out.request_id); it != started_.end()) {
          image.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
        }
        if (profile_) {
          const std::string& prefix = model_->defaults().pipeline_class;
          for (const auto& [phase, seconds] : out.durations.entries()) {
            spdlog::info("[DiffusionPipelineProfiler] stage {} request {}: {}{}{} took {:.6f}s", stage_id_,
                         out.request_id, prefix, prefix.empty() ? "" : ".", phase, seconds);
          }
          image.stage_durations = out.durations.to_json(prefix);
        }
        o.image = std::move(image);
      }
      o.finish_reason = "stop";
      started_.erase(out.request_id);
      outputs.push_back(std::move(o));
    }
    return outputs;
  }

 private:
  model::ImageRequest image_request(const StageRequest& request) const {
    const std::string where = fmt::format("stage {} request {}", stage_id_, request.request_id);
    const Json& info = request.additional_information;
    const Json& params = request.sampling_params;
    model::ImageRequest r;
    auto text = [&](const Json& object, const char* key) -> std::optional<std::string> {
      return optional_field<std::string>(object, key, [&](const Json& v) {
        throw_error(ErrorCode::kInvalidArgument, "{}: {} must be a string, got {}", where, key, v.dump());
      });
    };
    auto number = [&](const char* key) -> std::optional<double> {
      return optional_field<double>(params, key, [&](const Json& v) {
        throw_error(ErrorCode::kInvalidArgument, "{}: {} must be a number, got {}", where, key, v.dump());
      });
    };
    auto integer = [&](const char* key) -> std::optional<int64_t> {
      const std::optional<double> v = number(key);
      if (!v) return std::nullopt;
      if (*v != static_cast<double>(static_cast<int64_t>(*v))) {
        throw_error(ErrorCode::kInvalidArgument, "{}: {} must be an integer, got {}", where, key, *v);
      }
      return static_cast<int64_t>(*v);
    };
    r.prompt = text(info, "prompt").value_or("");
    if (r.prompt.empty()) throw_error(ErrorCode::kInvalidArgument, "{}: the prompt is empty", where);
    r.negative_prompt = text(info, "negative_prompt");
    if (!r.negative_prompt) r.negative_prompt = text(params, "negative_prompt");
    r.height = static_cast<int>(integer("height").value_or(0));
    r.width = static_cast<int>(integer("width").value_or(0));
    r.num_inference_steps = static_cast<int>(integer("num_inference_steps").value_or(0));
    if (auto g = number("guidance_scale")) r.guidance_scale = static_cast<float>(*g);
    // vLLM-Omni's true_cfg_scale: the CFG scale of pipelines that separate it; Z-Image has one scale.
    if (auto g = number("true_cfg_scale"); g && !r.guidance_scale) r.guidance_scale = static_cast<float>(*g);
    r.max_sequence_length = static_cast<int>(integer("max_sequence_length").value_or(0));
    r.seed = static_cast<uint64_t>(integer("seed").value_or(0));
    if (r.height < 0 || r.width < 0 || r.num_inference_steps < 0) {
      throw_error(ErrorCode::kInvalidArgument, "{}: height, width and num_inference_steps must be positive", where);
    }
    const int64_t h = r.height > 0 ? r.height : model_->defaults().height;
    const int64_t w = r.width > 0 ? r.width : model_->defaults().width;
    if (h * w > max_pixels_) {
      throw_error(ErrorCode::kInvalidArgument, "{}: a {}x{} image has {} pixels, more than max_generated_image_size {}",
                  where, w, h, h * w, max_pixels_);
    }
    return r;
  }

  int stage_id_;
  int64_t max_pixels_ = kDefaultMaxImagePixels;
  bool profile_ = false;  // enable_diffusion_pipeline_profiler
  std::unique_ptr<model::DiffusionModel> model_;
  std::unique_ptr<engine::DiffusionEngine> engine_;
  std::map<std::string, std::chrono::steady_clock::time_point> started_;
};

}  // namespace

std::unique_ptr<StageRunner> make_diffusion_stage_runner(const Json& engine_args, const StageRunnerContext& context) {
  return std::make_unique<DiffusionStageRunner>(engine_args, context);
}

}  // namespace omni::runtime
