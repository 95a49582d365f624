// A small random-weight Z-Image checkpoint in the diffusers layout (model_index.json, scheduler/,
// text_encoder/ with a 3-layer Qwen3 over the real vocabulary, tokenizer/ copied from a Qwen3
// tokenizer, transformer/ and vae/ with the released block structure at small widths), for
// `omnistage demo-model --arch z_image`: it serves on a CPU in seconds and draws noise. With the
// released shapes instead (Qwen3-4B, the 6B S3-DiT, the FLUX.1 VAE decoder; about 20 GB of bf16),
// it is what benchmarks measure speed on.
#pragma once

#include <cstdint>
#include <filesystem>

namespace omni::model::z_image {

// Writes the checkpoint into `dir` (created; files overwritten). `qwen3_tokenizer_dir` holds the
// Qwen3 tokenizer.json and tokenizer_config.json (with its chat template). kInternal naming a file
// that cannot be written, kNotFound for a missing tokenizer file.
void write_random_checkpoint(const std::filesystem::path& dir, uint64_t seed,
                             const std::filesystem::path& qwen3_tokenizer_dir, bool released_shapes = false);

}  // namespace omni::model::z_image
