#include "cli/generate_image.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "config/pipeline_registry.h"
#include "media/image_encoder.h"
#include "model/model_dtype.h"
#include "model/pipelines.h"
#include "model/stage_model_registry.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::cli {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// out.png with K > 1 becomes out-0.png, out-1.png, ...
std::string image_path(const std::string& base, int index, int count) {
  if (count == 1) return base;
  const fs::path p(base);
  return (p.parent_path() / (p.stem().string() + "-" + std::to_string(index) + p.extension().string())).string();
}

media::ImageFormat format_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  if (!ext.empty()) ext = ext.substr(1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const auto format = media::parse_image_format(ext);
  if (!format) {
    throw_error(ErrorCode::kInvalidArgument, "--output-image {}: the extension must be .png, .jpg, .jpeg or .webp",
                path);
  }
  return *format;
}

}  // namespace

bool is_diffusion_checkpoint(const std::string& model_dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(model_dir) / "model_index.json", ec);
}

int run_generate_image(const ImageGenerateOptions& options) {
  if (options.prompt.empty()) throw_error(ErrorCode::kInvalidArgument, "--prompt is required for an image model");
  if (options.output_image.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--output-image FILE.png|.jpg|.webp is required for an image model");
  }
  if (options.num_images < 1) {
    throw_error(ErrorCode::kInvalidArgument, "--num-images must be >= 1, got {}", options.num_images);
  }
  if (options.output != "text" && options.output != "json") {
    throw_error(ErrorCode::kInvalidArgument, "--output must be text or json, got '{}'", options.output);
  }
  if (!options.latents.empty() && options.seed) {
    throw_error(ErrorCode::kInvalidArgument, "give --seed or --latents, not both");
  }
  const media::ImageFormat format = format_of(options.output_image);
  const tensor::Device device = tensor::resolve_device(options.device, "--device");
  const std::optional<tensor::DType> dtype = model::parse_model_dtype(options.dtype, "--dtype");

  config::PipelineRegistry registry;
  model::register_all_pipelines(registry);
  const config::PipelineResolution resolution =
      config::resolve_pipeline(registry, options.model, "", options.model_class_name);
  const config::StagePipelineConfig* stage = nullptr;
  for (const auto& s : resolution.pipeline->stages) {
    if (s.execution_type == config::ExecutionType::kDiffusion) stage = &s;
  }
  if (stage == nullptr) {
    throw_error(ErrorCode::kInvalidArgument, "--model {}: pipeline '{}' ({}) has no diffusion stage", options.model,
                resolution.pipeline->model_type, resolution.reason);
  }

  const auto load_start = std::chrono::steady_clock::now();
  model::StageModelArgs args;
  args.model_dir = options.model;
  args.device = device;
  args.dtype = dtype;
  args.engine_args["vae_use_tiling"] = options.vae_use_tiling;
  args.engine_args["enforce_eager"] = options.enforce_eager;
  std::unique_ptr<model::DiffusionModel> model =
      model::builtin_stage_models().create_diffusion(stage->stage_model, args);
  const double load_s = seconds_since(load_start);
  spdlog::info("loaded {} ({}, {}) in {:.2f} s", options.model, resolution.pipeline->model_type, resolution.reason,
               load_s);

  model::ImageRequest base;
  base.prompt = options.prompt;
  base.negative_prompt = options.negative_prompt;
  base.height = options.height;
  base.width = options.width;
  base.num_inference_steps = options.num_inference_steps;
  base.guidance_scale = options.guidance_scale;
  base.max_sequence_length = options.max_sequence_length;
  const int height = options.height > 0 ? options.height : model->defaults().height;
  const int width = options.width > 0 ? options.width : model->defaults().width;

  tensor::Tensor given;
  if (!options.latents.empty()) {
    given = tensor::load_npy(options.latents);
    const std::vector<int64_t> one = model->latent_shape(height, width);
    const tensor::Shape want{options.num_images, one[0], one[1], one[2]};
    if (given.dtype() != tensor::DType::kF32 || given.shape() != want) {
      throw_error(ErrorCode::kInvalidArgument, "--latents {}: expected float32 {} for {} {}x{} image(s), got {} {}",
                  options.latents, tensor::shape_to_string(want), options.num_images, width, height,
                  tensor::dtype_name(given.dtype()), tensor::shape_to_string(given.shape()));
    }
  }
  const uint64_t seed = options.seed ? *options.seed : std::random_device{}();

  double encode_s = 0, denoise_s = 0, decode_s = 0, write_s = 0;
  Json images = Json::array();
  std::vector<tensor::Tensor> final_latents;
  for (int k = 0; k < options.num_images; ++k) {
    model::ImageRequest request = base;
    request.seed = seed + static_cast<uint64_t>(k);
    if (given.defined()) {
      request.latents = given.slice_rows(k, k + 1);
    }
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<model::DenoiseJob> job = model->start(request);
    const double image_encode_s = seconds_since(t0);
    encode_s += image_encode_s;
    model::DenoiseJob* jobs[] = {job.get()};
    while (!job->finished()) {
      model->step(jobs);
      spdlog::debug("image {}: step {}/{}", k, job->steps_done(), job->total_steps());
    }
    if (!options.dump_latents.empty()) final_latents.push_back(model->latents(*job));
    const model::RgbImage image = model->decode(*job);
    // The phases as the model timed them, the durations the serve command reports too.
    const model::StageDurations& phases = job->durations();
    const double image_denoise_s = phases.seconds(model::kDiffusePhase);
    const double image_decode_s = phases.seconds(model::kVaeDecodePhase);
    denoise_s += image_denoise_s;
    decode_s += image_decode_s;
    t0 = std::chrono::steady_clock::now();
    const std::string path = image_path(options.output_image, k, options.num_images);
    const std::string bytes = media::encode_image(image.pixels, image.width, image.height, format);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw_error(ErrorCode::kInternal, "--output-image: cannot write {}", path);
    write_s += seconds_since(t0);
    Json entry = {
        {"path", path},
        {"width", image.width},
        {"height", image.height},
        {"steps", job->total_steps()},
        {"format", media::image_format_name(format)},
        {"bytes", bytes.size()},
        {"durations_s",
         {{"text_encoder_and_latents", image_encode_s}, {"denoise", image_denoise_s}, {"vae_decode", image_decode_s}}},
        {"stage_durations", phases.to_json(model->defaults().pipeline_class)}};
    if (given.defined()) {
      entry["latents"] = options.latents;
    } else {
      entry["seed"] = request.seed;
    }
    images.push_back(entry);
    if (options.output == "text") std::printf("%s\n", path.c_str());
  }
  if (!options.dump_latents.empty()) {
    const tensor::Shape one = final_latents.front().shape();
    tensor::Tensor all = tensor::Tensor::empty({options.num_images, one[0], one[1], one[2]}, tensor::DType::kF32);
    for (int k = 0; k < options.num_images; ++k) {
      std::copy_n(final_latents[k].data<float>(), final_latents[k].numel(),
                  all.data<float>() + k * final_latents[k].numel());
    }
    tensor::save_npy(options.dump_latents, all);
  }
  if (options.output == "json") {
    const Json report = {{"model", options.model},
                         {"pipeline", resolution.pipeline->model_type},
                         {"images", images},
                         {"dumped_latents", options.dump_latents.empty() ? Json() : Json(options.dump_latents)},
                         {"stage_durations_s",
                          {{"load", load_s},
                           {"text_encoder_and_latents", encode_s},
                           {"denoise", denoise_s},
                           {"vae_decode", decode_s},
                           {"image_encode", write_s}}}};
    std::printf("%s\n", report.dump(1).c_str());
  }
  return 0;
}

}  // namespace omni::cli
