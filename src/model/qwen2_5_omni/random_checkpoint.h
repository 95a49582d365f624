// Random-weight Qwen2.5-Omni token2wav checkpoints in the released layout, for tests and demos
// that need one without downloading the 7B model: config.json with token2wav_config (dit_config,
// bigvgan_config; the thinker and talker configs are not written) and model.safetensors holding
// the token2wav.code2wav_dit_model.* and token2wav.code2wav_bigvgan_model.* weights in float32.
// spk_dict.pt is not written (make one with scripts/reference/make_torch_pickle_fixture.py).
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/qwen2_5_omni/token2wav_config.h"

namespace omni::model::qwen2_5_omni {

// Small but structurally faithful shapes: 4 DiT blocks of 4 heads whose width (64) differs from the
// hidden size (32), a look-ahead and two look-backward layers over blocks of 4 frames, an ECAPA of
// 4 layers, a BigVGAN of 3 upsampling stages (hop 30) with 2 AMP blocks each.
Token2WavConfig tiny_token2wav_config();

// Writes the checkpoint of `config` with weights drawn from `seed` (uniform, scaled by
// 1/sqrt(fan_in) so activations stay O(1)) into `dir` (created; files overwritten). Errors:
// kInternal naming a file it cannot write.
void write_random_token2wav_checkpoint(const std::filesystem::path& dir, const Token2WavConfig& config, uint64_t seed);

}  // namespace omni::model::qwen2_5_omni
