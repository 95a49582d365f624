#include "model/z_image/image_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "model/seeded_normal.h"

namespace omni::model::z_image {

using tensor::DType;
using tensor::Tensor;

namespace {

struct Job : DenoiseJob {
  Schedule schedule;
  float guidance = 0.0f;
  bool cfg = false;
  Tensor cond, uncond;  // caption features [L, cap_feat_dim]; uncond only with CFG
  Tensor latents;       // [C, h, w]
  int height = 0, width = 0;

  void advance() { ++steps_done_; }
  void set_total(int n) { total_steps_ = n; }
};

Job& job_of(DenoiseJob* j) { return *static_cast<Job*>(j); }
const Job& job_of(const DenoiseJob& j) { return static_cast<const Job&>(j); }

Tensor copy(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(out.raw(), t.raw(), t.nbytes());
  return out;
}

}  // namespace

Tensor seeded_latents(const std::vector<int64_t>& shape, uint64_t seed) {
  return seeded_standard_normal(tensor::Shape(shape.begin(), shape.end()), seed);
}

ImageModel::ImageModel(const std::filesystem::path& dir, const Placement& placement, bool vae_use_tiling)
    : config_(read_config(dir)), placement_(placement) {
  text_encoder_ = std::make_unique<TextEncoder>(dir, placement);
  if (text_encoder_->hidden_size() != config_.transformer.cap_feat_dim) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: the text encoder's hidden size {} is not the transformer's cap_feat_dim {}", dir.string(),
                text_encoder_->hidden_size(), config_.transformer.cap_feat_dim);
  }
  transformer_ = std::make_unique<Transformer>(dir, config_.transformer, placement);
  vae_ = std::make_unique<VaeDecoder>(dir, config_.vae, placement, vae_use_tiling);
  // ZImagePipeline.__call__'s defaults.
  defaults_.height = 1024;
  defaults_.width = 1024;
  defaults_.num_inference_steps = 50;
  defaults_.guidance_scale = 5.0f;
  defaults_.max_sequence_length = 512;
  defaults_.size_multiple = config_.size_multiple();
  defaults_.pipeline_class = "ZImagePipeline";
  defaults_.max_side =
      std::min(config_.transformer.axes_lens[1], config_.transformer.axes_lens[2]) * config_.size_multiple();
}

std::vector<int64_t> ImageModel::latent_shape(int height, int width) const {
  return {config_.transformer.in_channels, config_.latent_side(height), config_.latent_side(width)};
}

std::unique_ptr<DenoiseJob> ImageModel::start(const ImageRequest& request) {
  auto job = std::make_unique<Job>();
  job->height = request.height > 0 ? request.height : defaults_.height;
  job->width = request.width > 0 ? request.width : defaults_.width;
  const int multiple = defaults_.size_multiple;
  for (const auto& [name, side] : {std::pair{"height", job->height}, std::pair{"width", job->width}}) {
    if (side % multiple != 0) {
      throw_error(ErrorCode::kInvalidArgument, "{} must be a multiple of {} for this model, got {}", name, multiple,
                  side);
    }
    if (defaults_.max_side > 0 && side > defaults_.max_side) {
      throw_error(ErrorCode::kInvalidArgument, "{} {} is larger than this model places (at most {})", name, side,
                  defaults_.max_side);
    }
  }
  const int steps = request.num_inference_steps > 0 ? request.num_inference_steps : defaults_.num_inference_steps;
  if (request.num_inference_steps < 0) {
    throw_error(ErrorCode::kInvalidArgument, "num_inference_steps must be at least 1, got {}",
                request.num_inference_steps);
  }
  job->schedule = make_schedule(config_.scheduler, steps);
  job->set_total(steps);
  job->guidance = request.guidance_scale.value_or(defaults_.guidance_scale);
  if (!std::isfinite(job->guidance) || job->guidance < 0.0f) {
    throw_error(ErrorCode::kInvalidArgument, "guidance_scale must be a finite number >= 0, got {}", job->guidance);
  }
  job->cfg = job->guidance > 0.0f;  // as ZImagePipeline: any positive guidance runs the negative prompt
  const int max_len = request.max_sequence_length > 0 ? request.max_sequence_length : defaults_.max_sequence_length;
  const int longest = config_.transformer.axes_lens[0] - kSequenceMultiple - 1;
  if (max_len > longest) {
    throw_error(ErrorCode::kInvalidArgument, "max_sequence_length {} is more than this model places (at most {})",
                max_len, longest);
  }

  const std::vector<int64_t> shape = latent_shape(job->height, job->width);
  if (request.latents.defined()) {
    const Tensor& given = request.latents;
    const bool batched = given.rank() == 4 && given.dim(0) == 1;
    const tensor::Shape got = batched ? tensor::Shape(given.shape().begin() + 1, given.shape().end()) : given.shape();
    if (given.dtype() != DType::kF32 || got != tensor::Shape(shape.begin(), shape.end())) {
      throw_error(ErrorCode::kInvalidArgument, "latents must be float32 [1, {}, {}, {}] for a {}x{} image, got {} {}",
                  shape[0], shape[1], shape[2], job->width, job->height, tensor::dtype_name(given.dtype()),
                  tensor::shape_to_string(given.shape()));
    }
    job->latents = copy(given).reshape(tensor::Shape(shape.begin(), shape.end()));
  } else {
    job->latents = seeded_latents(shape, request.seed);
  }
  {
    // vLLM-Omni times text_encoder.forward: the passes, not the tokenizer.
    const std::vector<int32_t> cond_ids = text_encoder_->tokenize(request.prompt, max_len);
    std::vector<int32_t> uncond_ids;
    if (job->cfg) uncond_ids = text_encoder_->tokenize(request.negative_prompt.value_or(""), max_len);
    const PhaseTimer timer(job->durations(), kTextEncoderPhase);
    job->cond = text_encoder_->encode(cond_ids);
    if (job->cfg) job->uncond = text_encoder_->encode(uncond_ids);
  }
  return job;
}

void ImageModel::step_jobs(std::span<DenoiseJob* const> jobs) {
  for (DenoiseJob* j : jobs) {
    Job& job = job_of(j);
    if (job.finished()) continue;
    const int i = job.steps_done();
    const float t = job.schedule.model_time(i);
    const Tensor cond = transformer_->forward(job.latents, t, job.cond);
    float* x = job.latents.data<float>();
    const float* pos = cond.data<float>();
    const int64_t n = job.latents.numel();
    const float dt = job.schedule.sigmas[i + 1] - job.schedule.sigmas[i];
    if (job.cfg) {
      const Tensor uncond = transformer_->forward(job.latents, t, job.uncond);
      const float* neg = uncond.data<float>();
      for (int64_t e = 0; e < n; ++e) {
        const float pred = pos[e] + job.guidance * (pos[e] - neg[e]);
        x[e] = x[e] + dt * -pred;
      }
    } else {
      for (int64_t e = 0; e < n; ++e) x[e] = x[e] + dt * -pos[e];
    }
    job.advance();
  }
}

Tensor ImageModel::latents(const DenoiseJob& job) const { return copy(job_of(job).latents); }

RgbImage ImageModel::to_rgb(const Tensor& decoded) {
  RgbImage image;
  image.height = static_cast<int>(decoded.dim(0));
  image.width = static_cast<int>(decoded.dim(1));
  if (decoded.dim(2) != 3) throw_error(ErrorCode::kInvalidArgument, "to_rgb: {} channels, not 3", decoded.dim(2));
  const int64_t n = decoded.numel();
  image.pixels.resize(static_cast<size_t>(n));
  const float* src = decoded.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp(src[i] * 0.5f + 0.5f, 0.0f, 1.0f);
    image.pixels[static_cast<size_t>(i)] = static_cast<uint8_t>(std::nearbyint(v * 255.0f));
  }
  return image;
}

RgbImage ImageModel::decode_job(const DenoiseJob& job) {
  if (!job.finished()) {
    throw_error(ErrorCode::kInvalidArgument, "decode: the job has done {} of its {} steps", job.steps_done(),
                job.total_steps());
  }
  return to_rgb(vae_->decode(job_of(job).latents));
}

}  // namespace omni::model::z_image
