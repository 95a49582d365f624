// Random-weight Qwen3-TTS speech-tokenizer encoders (speech_encoder.h) in the released layout, for
// demo Base checkpoints (`omnistage demo-model --arch qwen3_tts --task base`), which clone voices in
// context with them, and tests.
#pragma once

#include <cstdint>

#include "base/json.h"
#include "model/qwen3_tts/speech_encoder_config.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen3_tts {

// Small widths with the released geometry (strides 4, 5, 6, 8 and 2: 1920 samples per frame, 16
// kept codebooks of `codebook_size` codes); encodes fast on a CPU.
SpeechEncoderConfig small_speech_encoder_shapes(int codebook_size);

// Adds the encoder.* tensors of `shapes` (transformers' Mimi names) to `writer`, drawn from `seed`
// (deterministic on every platform), scaled so that activations stay O(1).
void add_random_speech_encoder(SafetensorsWriter& writer, const SpeechEncoderConfig& shapes, uint64_t seed);

// The speech_tokenizer/config.json `encoder_config` object that describes `shapes`.
OrderedJson speech_encoder_config_json(const SpeechEncoderConfig& shapes);

}  // namespace omni::model::qwen3_tts
