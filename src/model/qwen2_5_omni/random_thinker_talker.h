// Random-weight Qwen2.5-Omni thinker LM + talker checkpoints in the released layout, for tests:
// config.json (thinker_config with text_config, talker_config, enable_audio_output; no towers and
// no token2wav_config) and model.safetensors with thinker.model.*, thinker.lm_head.weight and
// talker.* in float32. No tokenizer and no spk_dict.pt (give TalkerStageModel its speakers).
#pragma once

#include <cstdint>
#include <filesystem>

#include "base/json.h"

namespace omni::model::qwen2_5_omni {

// Tiny but structurally faithful shapes: a thinker of hidden 48, 2 layers of 4 query / 2 KV heads
// of 16 (mrope_section [2, 3, 3]) over a vocabulary of 160; a talker of hidden 32, 2 layers of 4 / 2
// heads of 16 (q width 64 differs from its hidden size) over 40 codecs in the thinker's width.
// Text ids: talker text bos/end/pad 150/151/152, speaker bos 153; codec pad/bos/end/mask
// 32/33/34/35; media placeholders 120..126.
OrderedJson tiny_thinker_talker_config();
inline constexpr int64_t kTinySpeakerBos = 153;

// Writes `config`'s checkpoint with weights drawn from `seed` into `dir` (created; files
// overwritten). kInternal naming a file it cannot write.
void write_random_thinker_talker_checkpoint(const std::filesystem::path& dir, const OrderedJson& config, uint64_t seed);

}  // namespace omni::model::qwen2_5_omni
