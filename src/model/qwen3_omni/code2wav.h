// The Qwen3-Omni code2wav (Qwen3OmniMoeCode2Wav; docs/models/qwen3_omni.md, "Speech output:
// code2wav"): codec frames of 16 codes at 12.5 Hz -> 24 kHz audio. It is the Qwen3-TTS codec
// decoder's variant (model/qwen3_tts/codec_decoder.h, CodecDecoderLayout): the mean of one code
// embedding per codebook, a sliding-window transformer as wide as the latent, and decoder blocks
// whose transposed convolutions are trimmed on both sides, so F frames give 1920 F - 555 samples
// with the released rates. It streams exactly, batches streams, and runs on the CPU or CUDA.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "base/json.h"
#include "model/qwen3_tts/codec_decoder.h"
#include "tensor/device.h"

namespace omni::model::qwen3_omni {

// The llm_generation stage model of the Qwen3-Omni pipeline's code2wav stage.
inline constexpr std::string_view kCode2WavStageModel = "qwen3_omni_code2wav";

// config.json's code2wav_config as the decoder's configuration: absent fields take the released
// values, head_dim is hidden_size / num_attention_heads, rope_theta is read from rope_parameters
// (transformers 5) or rope_theta (4). kLoadFailed naming `file` and the field.
qwen3_tts::CodecDecoderConfig parse_code2wav_config(const Json& config, const std::string& file);

// The code2wav of the checkpoint in `dir` (config.json and the code2wav.* tensors of its
// model.safetensors or shards, BF16 as released or F32), on `device`. Errors: kNotFound, kLoadFailed
// naming the file and the tensor or field, as CodecDecoder::load. `random_weights`: random
// code2wav.* tensors instead (Checkpoint::random, load_format dummy); only config.json is read.
std::unique_ptr<qwen3_tts::CodecDecoder> load_code2wav(const std::filesystem::path& dir,
                                                       tensor::Device device = tensor::Device::cpu(),
                                                       bool random_weights = false);

}  // namespace omni::model::qwen3_omni
