// A random-weight Qwen3-Omni checkpoint in the released layout, for demos and tests that need one
// without downloading 70 GB: config.json with thinker_config (text_config, audio_config,
// vision_config), talker_config and code2wav_config; the thinker's text model under
// `thinker.model.` / `thinker.lm_head.weight` with its experts stored per expert, as released;
// preprocessor_config.json; the Qwen3 tokenizer with Qwen3-Omni's added tokens (<|audio_start|>
// … <|audio_pad|>, ids 151669-151675) and a chat template that places each content part's
// placeholder tokens; the audio tower of audio_config under `thinker.audio_tower.` (so the demo
// reads chat audio), the vision encoder under `thinker.visual.`; with audio output, the talker
// (`talker.`: a MoE stack with a shared expert, the projections and the code predictor) and
// code2wav (`code2wav.`), small stacks over the released codec vocabularies.
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/hf_config.h"
#include "tensor/dtype.h"

namespace omni::model::qwen3_omni {

// A small thinker (hidden 64, 2 MoE layers of 8 experts, top 2, GQA 2, head_dim 32 with an
// interleaved M-RoPE section [6, 5, 5]) over Qwen3-Omni's real vocabulary (152064).
TextModelConfig demo_thinker_shapes();

// Writes the checkpoint into `dir` (created; files overwritten). `qwen3_tokenizer_dir` holds Qwen3's
// tokenizer.json and tokenizer_config.json. `audio_output`: enable_audio_output (true: the Instruct
// layout, whose pipeline has talker and code2wav stages; false: Thinking/Captioner, thinker only).
// Errors: kNotFound / kLoadFailed naming a tokenizer file, kInternal naming a file it cannot write.
void write_random_checkpoint(const std::filesystem::path& dir, const TextModelConfig& thinker, uint64_t seed,
                             tensor::DType dtype, const std::filesystem::path& qwen3_tokenizer_dir, bool audio_output);

}  // namespace omni::model::qwen3_omni
