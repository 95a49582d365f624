// A small random-weight Z-Image checkpoint in the diffusers layout (model_index.json, scheduler/,
// text_encoder/ with a 3-layer Qwen3 over the real vocabulary, tokenizer/ copied from a Qwen3
// tokenizer, transformer/ and vae/ with the released block structure at small widths), for
// `omnistage demo-model --arch z_image`: it serves on a CPU in seconds and draws noise.
#pragma once

#include <cstdint>
#include <filesystem>

namespace omni::model::z_image {

// Writes the checkpoint into `dir` (created; files overwritten). `qwen3_tokenizer_dir` holds the
// Qwen3 tokenizer.json and tokenizer_config.json (with its chat template). kInternal naming a file
// that cannot be written, kNotFound for a missing tokenizer file.
void write_random_checkpoint(const std::filesystem::path& dir, uint64_t seed,
                             const std::filesystem::path& qwen3_tokenizer_dir);

}  // namespace omni::model::z_image
