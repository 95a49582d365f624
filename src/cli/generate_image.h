// `omnistage generate` for a diffusion pipeline (a diffusers checkpoint with model_index.json): the
// offline counterpart of POST /v1/images/generations, with the option to start from given latents
// (--latents FILE.npy, the layout diffusers' pipeline takes as latents=) and to write the final
// latents (--dump-latents). docs/diffusion.md shows the commands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace omni::cli {

struct ImageGenerateOptions {
  std::string model;  // a local checkpoint directory
  std::string model_class_name;
  std::string prompt;
  std::optional<std::string> negative_prompt;
  int height = 0;  // 0: the pipeline's default
  int width = 0;
  int num_inference_steps = 0;
  std::optional<float> guidance_scale;
  int max_sequence_length = 0;
  std::optional<uint64_t> seed;
  std::string latents;  // .npy path
  int num_images = 1;
  std::string output_image;     // FILE.png | .jpg | .jpeg | .webp
  std::string dump_latents;     // .npy path
  bool vae_use_tiling = false;  // the stage engine argument vae_use_tiling
  std::string device = "cpu";
  std::string dtype = "auto";   // --dtype: auto (bfloat16 on CUDA, float32 on the CPU) or a dtype
  std::string output = "text";  // text | json
  bool enforce_eager = false;   // --enforce-eager: no CUDA graphs for the denoising steps
};

// Whether `model_dir` is a diffusers checkpoint (has model_index.json).
bool is_diffusion_checkpoint(const std::string& model_dir);

// Runs it; throws omni::Error(kInvalidArgument) naming the flag at fault. Returns the exit code.
int run_generate_image(const ImageGenerateOptions& options);

}  // namespace omni::cli
