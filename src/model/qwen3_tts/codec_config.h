// The Qwen3-TTS 12 Hz speech tokenizer's decoder configuration: `decoder_config` and the sample
// rates of speech_tokenizer/config.json (model_type qwen3_tts_tokenizer_12hz). The defaults are
// the released checkpoints' values (docs/models/qwen3_tts.md, "The codec decoder").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"

namespace omni::model::qwen3_tts {

struct CodecDecoderConfig {
  int codebook_size = 2048;
  int codebook_dim = 512;  // width after the RVQ output projections; codebook entries are half of it
  int latent_dim = 1024;
  int hidden_size = 512;
  int intermediate_size = 1024;
  int num_hidden_layers = 8;
  int num_attention_heads = 16;
  int num_key_value_heads = 16;
  int head_dim = 64;
  int sliding_window = 72;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  int num_quantizers = 16;
  std::vector<int> upsample_rates = {8, 5, 4, 3};  // the decoder blocks
  std::vector<int> upsampling_ratios = {2, 2};     // the ConvNeXt upsamplers after the transformer
  int decoder_dim = 1536;
  int output_sample_rate = 24000;

  // Samples of audio per codec frame: the product of all rates (1920 for the real checkpoints).
  int samples_per_frame() const;
  // Channels after decoder block i (0-based): decoder_dim / 2^(i+1).
  int block_channels(int block) const { return decoder_dim >> (block + 1); }
};

// The decoder fields of `decoder` (speech_tokenizer/config.json's decoder_config, or a config of
// the same fields) over `defaults`, checked; `file` and `prefix` ("decoder_config.") name a field
// in errors (kLoadFailed, as below).
CodecDecoderConfig parse_codec_decoder_config(const Json& decoder, CodecDecoderConfig defaults,
                                              const std::string& file, const std::string& prefix);

// Reads `dir`/config.json (dir = a checkpoint's speech_tokenizer/). Errors: kNotFound for a
// missing file, kLoadFailed naming the file and the field that is missing, mistyped or
// inconsistent (decode_upsample_rate that differs from the product of the rates, heads that do
// not divide, a decoder_dim that does not halve once per block).
CodecDecoderConfig read_codec_decoder_config(const std::filesystem::path& dir);

// The speech_tokenizer/config.json that describes `config` (the layout of the released files).
OrderedJson codec_config_json(const CodecDecoderConfig& config);

}  // namespace omni::model::qwen3_tts
