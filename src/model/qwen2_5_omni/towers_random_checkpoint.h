// Random-weight Qwen2.5-Omni thinker towers in the released layout, for tests that need them
// without the 7B model: config.json with thinker_config.audio_config and vision_config (the text
// model's config is not written), model.safetensors holding thinker.audio_tower.* and
// thinker.visual.* in float32, and a flat preprocessor_config.json with the released processor
// settings (WhisperFeatureExtractor with 128 mel bins and 300 s chunks, Qwen2VLImageProcessor with
// 14-pixel patches).
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/qwen2_5_omni/audio_encoder.h"
#include "model/qwen2_5_omni/vision_encoder.h"

namespace omni::model::qwen2_5_omni {

struct TowerShapes {
  AudioEncoderConfig audio;
  VisionEncoderConfig vision;
};

// Small but structurally faithful shapes: an audio tower of 2 layers (d_model 32, 4 heads) over
// the real 128 mel bins with chunks of 16 frames (n_window 8), so that short audios span several
// chunks; a vision encoder of 3 blocks (hidden 32, 2 heads of 16) with 2 x 2 block windows
// (window_size 56) and full attention in block 1. Both project to 48.
TowerShapes tiny_tower_shapes();

// Writes the checkpoint of `shapes` with weights drawn from `seed` (uniform, scaled by
// 1/sqrt(fan_in) so activations stay O(1)) into `dir` (created; files overwritten). kInternal
// naming a file it cannot write.
void write_random_towers_checkpoint(const std::filesystem::path& dir, const TowerShapes& shapes, uint64_t seed);

}  // namespace omni::model::qwen2_5_omni
