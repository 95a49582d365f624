// The model-layer interface of a diffusion stage: what engine::DiffusionEngine drives. A request
// starts (its prompt encoded, its latents drawn from its seed or given), advances one denoising step
// at a time, and is decoded into an image once its last step is done. Families implement it in
// src/model/<family>/ and register it as a diffusion stage model (model/stage_model_registry.h).
//
// Batched = alone: step() over several jobs gives each job the bits it would get stepping alone
// (the CPU kernels' products are one fixed-order fma chain per element, tensor/cpu/gemm.h).
// Every job keeps the durations of its phases (model/stage_durations.h): step() and decode() time
// "diffuse" and "vae.decode" for every caller; a family's start() times its text encoder.
// Threading: one thread at a time per model (the stage's engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/stage_durations.h"
#include "tensor/tensor.h"

namespace omni::model {

// One image to generate. Unset fields take the model's defaults (DiffusionDefaults).
struct ImageRequest {
  std::string prompt;
  std::optional<std::string> negative_prompt;
  int height = 0;  // 0: default
  int width = 0;
  int num_inference_steps = 0;
  std::optional<float> guidance_scale;
  int max_sequence_length = 0;
  uint64_t seed = 0;
  // The starting latents instead of noise from `seed`: float32 host, the shape latent_shape() gives
  // (with or without a leading batch dimension of 1).
  tensor::Tensor latents;
};

struct DiffusionDefaults {
  int height = 1024;
  int width = 1024;
  int num_inference_steps = 8;
  float guidance_scale = 0.0f;
  int max_sequence_length = 512;
  int size_multiple = 16;  // image sides must be multiples of this
  // The largest side the model can place (its position tables); 0: no limit.
  int max_side = 0;
  // The pipeline class vLLM-Omni runs (ZImagePipeline): the prefix of its stage duration names.
  std::string pipeline_class;
};

// An RGB image, 8 bits per channel, rows top to bottom, pixels interleaved.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

// One request's denoising state, owned by the caller; only the model that started it reads it.
class DenoiseJob {
 public:
  virtual ~DenoiseJob() = default;
  int steps_done() const { return steps_done_; }
  int total_steps() const { return total_steps_; }
  bool finished() const { return steps_done_ >= total_steps_; }
  StageDurations& durations() { return durations_; }
  const StageDurations& durations() const { return durations_; }

 protected:
  int steps_done_ = 0;
  int total_steps_ = 0;
  StageDurations durations_;
};

class DiffusionModel {
 public:
  virtual ~DiffusionModel() = default;
  virtual const DiffusionDefaults& defaults() const = 0;
  // The latents of one image of that size ([channels, h, w]).
  virtual std::vector<int64_t> latent_shape(int height, int width) const = 0;
  // Fills the request's defaults, checks it (kInvalidArgument naming the field: a size that is not a
  // multiple of size_multiple or too large, steps < 1, latents of the wrong shape or dtype, naming
  // the expected shape), encodes the prompt(s) (timed as the job's "text_encoder.forward") and
  // prepares the latents.
  virtual std::unique_ptr<DenoiseJob> start(const ImageRequest& request) = 0;
  // One denoising step of each unfinished job; the step's time is added to each one's "diffuse".
  void step(std::span<DenoiseJob* const> jobs);
  // The job's current latents, [channels, h, w] float32 host (a copy).
  virtual tensor::Tensor latents(const DenoiseJob& job) const = 0;
  // The image of a finished job (kInvalidArgument when it is not finished); the time is added to
  // the job's "vae.decode".
  RgbImage decode(DenoiseJob& job);

 protected:
  // What step() and decode() do; a family implements them.
  virtual void step_jobs(std::span<DenoiseJob* const> jobs) = 0;
  virtual RgbImage decode_job(const DenoiseJob& job) = 0;
};

}  // namespace omni::model
