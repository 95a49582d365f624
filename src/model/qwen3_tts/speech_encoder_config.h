// The Qwen3-TTS 12 Hz speech tokenizer's *encoder* configuration: `encoder_config` (a Mimi codec's
// configuration) and the top-level encoder fields of speech_tokenizer/config.json. The defaults
// are the released checkpoint's values (docs/models/qwen3_tts.md, "The speech-tokenizer encoder").
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

namespace omni::model::qwen3_tts {

struct SpeechEncoderConfig {
  int sample_rate = 24000;  // input_sample_rate (and encoder_config.sampling_rate)
  // SEANet convolutional encoder.
  int num_filters = 64;
  int kernel_size = 7;
  int last_kernel_size = 3;
  int residual_kernel_size = 3;
  int num_residual_layers = 1;
  int dilation_growth_rate = 2;
  int compress = 2;
  std::vector<int> upsampling_ratios = {8, 6, 5, 4};  // the encoder's strides, applied in reverse
  int hidden_size = 512;
  // Encoder transformer.
  int num_hidden_layers = 8;
  int num_attention_heads = 8;
  int num_key_value_heads = 8;
  int head_dim = 64;
  int intermediate_size = 2048;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int sliding_window = 250;
  // Downsampling to the frame rate, then the split residual vector quantizer.
  double frame_rate = 12.5;
  int codebook_size = 2048;
  int codebook_dim = 256;  // vector_quantization_hidden_dimension: the quantizers' width
  int num_quantizers = 32;
  int num_semantic_quantizers = 1;
  int valid_quantizers = 16;  // encoder_valid_num_quantizers: the codebooks kept per frame

  // Samples per transformer step (the product of the strides: 960 released).
  int hop() const;
  // Transformer steps per frame (2 released): the downsampling stride.
  int downsample_stride() const;
  // Samples per frame (1920 released).
  int samples_per_frame() const { return hop() * downsample_stride(); }
};

// Reads `dir`/config.json (dir = a checkpoint's speech_tokenizer/); nullopt when it has no
// encoder_config (a decoder-only tokenizer). Errors: kNotFound for a missing file, kLoadFailed
// naming the file and the field that is mistyped or unsupported (not mono, non-causal convolutions,
// conv shortcuts, an activation other than gelu, a frame rate that is not the SEANet rate over a
// whole number, encode_downsample_rate inconsistent with the strides, more kept codebooks than
// quantizers).
std::optional<SpeechEncoderConfig> read_speech_encoder_config(const std::filesystem::path& dir);

}  // namespace omni::model::qwen3_tts
