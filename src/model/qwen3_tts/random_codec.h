// Random-weight Qwen3-TTS speech tokenizers (the codec decoder part) in the released layout,
// for demo checkpoints (`omnistage demo-model --arch qwen3_tts`), benchmarks and tests.
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/qwen3_tts/codec_config.h"
#include "model/qwen3_tts/speech_encoder_config.h"

namespace omni::model::qwen3_tts {

// Small decoder dims that keep the real frame geometry (16 codebooks of 2048 codes,
// upsample_rates [8, 5, 4, 3], upsampling_ratios [2, 2]: 1920 samples per frame) and the real
// sliding window of 72; decodes fast on a CPU. A default-constructed CodecDecoderConfig has the
// released dims.
CodecDecoderConfig small_codec_shapes();

// Writes `dir`/config.json and `dir`/model.safetensors (F32, the decoder.* tensors of the
// released files with `shapes`; no encoder) with weights drawn from `seed`, scaled so that
// activations stay O(1) and the audio mostly stays inside (-1, 1). `dir` is the checkpoint's
// speech_tokenizer/ folder; it is created, existing files are overwritten. Deterministic for a
// seed on every platform. Errors: kInternal naming the file that cannot be written.
// With `encoder`, the speech-tokenizer encoder (random_speech_encoder.h) is written too: its
// encoder.* tensors (from seed + 1) and its encoder_config.
void write_random_codec_checkpoint(const std::filesystem::path& dir, const CodecDecoderConfig& shapes, uint64_t seed,
                                   const SpeechEncoderConfig* encoder = nullptr);

}  // namespace omni::model::qwen3_tts
