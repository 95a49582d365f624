// Z-Image as a DiffusionModel (diffusers' ZImagePipeline): the prompt (and with classifier-free
// guidance, guidance_scale > 0, the negative prompt, "" by default) through the text encoder; the
// latents from the request's seed or given; each step runs the transformer on the latents (once, or
// for the prompt and the negative prompt), combines pred = cond + g * (cond - uncond), negates it
// into the velocity and takes the Euler step of the schedule; the last latents go through the VAE
// decoder, clamp to [-1, 1] and become 8-bit RGB as round(255 * (x + 1) / 2).
#pragma once

#include <filesystem>
#include <memory>

#include "model/diffusion_model.h"
#include "model/z_image/config.h"
#include "model/z_image/schedule.h"
#include "model/z_image/text_encoder.h"
#include "model/z_image/transformer.h"
#include "model/z_image/vae_decoder.h"

namespace omni::model::z_image {

class ImageModel : public DiffusionModel {
 public:
  // Loads every component of the checkpoint in `dir` onto `placement` (the CPU in float32, or a
  // CUDA device in float32, bfloat16 or float16); the latents and the scheduler stay on the host in
  // float32. With `vae_use_tiling` the VAE decodes large latents tile by tile (vae_tiling.h). Throws
  // omni::Error as the component loaders do.
  explicit ImageModel(const std::filesystem::path& dir, const Placement& placement = {}, bool vae_use_tiling = false);

  const DiffusionDefaults& defaults() const override { return defaults_; }
  std::vector<int64_t> latent_shape(int height, int width) const override;
  std::unique_ptr<DenoiseJob> start(const ImageRequest& request) override;
  tensor::Tensor latents(const DenoiseJob& job) const override;

  const ZImageConfig& config() const { return config_; }
  const Placement& placement() const { return placement_; }
  TextEncoder& text_encoder() { return *text_encoder_; }
  const Transformer& transformer() const { return *transformer_; }
  const VaeDecoder& vae() const { return *vae_; }
  // Whether the transformer's steps on a CUDA placement replay CUDA graphs (the default; false is
  // vLLM's enforce_eager). Transformer::set_cuda_graphs.
  void set_cuda_graphs(bool on) { transformer_->set_cuda_graphs(on); }
  // The decoder's output as 8-bit RGB: clamp to [-1, 1], round(255 * (x + 1) / 2).
  static RgbImage to_rgb(const tensor::Tensor& decoded);

 protected:
  void step_jobs(std::span<DenoiseJob* const> jobs) override;
  RgbImage decode_job(const DenoiseJob& job) override;

 private:
  ZImageConfig config_;
  Placement placement_;
  DiffusionDefaults defaults_;
  std::unique_ptr<TextEncoder> text_encoder_;
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<VaeDecoder> vae_;
};

// Standard-normal latents of `shape` from `seed`: element i is a Box-Muller normal of the Philox
// stream (seed, i / 2), so the same seed gives the same latents whatever else runs.
tensor::Tensor seeded_latents(const std::vector<int64_t>& shape, uint64_t seed);

}  // namespace omni::model::z_image
