// The Qwen2.5-Omni audio encoder (`thinker.audio_tower`, transformers' Qwen2_5OmniAudioEncoder, a
// Whisper-large-v3-like tower): log-mel features in, one row of the thinker's width per 40 ms of
// audio (two feature frames of 10 ms after a stride-2 convolution, then an average of two) out.
//
// For the audios of one request together:
//   1. each audio's valid frames are cut into chunks of 2 * n_window (200) frames, the last one
//      shorter; chunks never see each other;
//   2. per chunk: conv1 (Conv1d mel_bins -> d_model, kernel 3, padding 1) and exact GELU, the
//      frames past the chunk's end zero (as the reference masks them), conv2 (kernel 3, stride 2,
//      padding 1) and GELU: (frames - 1) / 2 + 1 rows, plus the sinusoidal position embedding
//      restarting at 0 in every chunk;
//   3. encoder_layers pre-LayerNorm layers (q/v/out projections with bias, k_proj without; GELU MLP)
//      whose attention is bidirectional within each chunk only;
//   4. per audio: AvgPool1d(2, 2) over its rows (an odd last row dropped), ln_post, proj to
//      output_dim (the thinker's hidden size).
// An audio of L valid frames gives audio_output_length(L) rows.
//
// Runs through tensor/ops.h on the device and in the dtype of its Placement (the CPU in float32, or
// a CUDA device in float32/bfloat16/float16; the weights converted from the checkpoint's dtype):
// each convolution is ops::unfold_rows over the time-major chunk [frames, channels] and one
// ops::linear with the kernel in tap-major layout (reordered at loading); the average pool is
// ops::gather_weighted_sum. The inputs and the output rows are host float32. Immutable after
// loading; encode() may be called from any thread of a CPU placement, and from one thread at a time
// on a GPU (its stream).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/placement.h"
#include "model/whisper_layers.h"
#include "tensor/tensor.h"

namespace omni::model {
class Checkpoint;
}

namespace omni::model::qwen2_5_omni {

struct AudioEncoderConfig {
  int num_mel_bins = 128;
  int d_model = 1280;
  int encoder_layers = 32;
  int encoder_attention_heads = 20;
  int encoder_ffn_dim = 5120;
  int output_dim = 3584;
  int n_window = 100;
  int max_source_positions = 1500;
};

// thinker_config.audio_config of a Qwen2.5-Omni config.json (`source` names it in errors):
// kLoadFailed naming a field of the wrong type or range; kUnsupported for an activation other than
// GELU or scale_embedding true (which the reference's forward never applies, so no checkpoint
// could rely on it either way).
AudioEncoderConfig parse_audio_encoder_config(const Json& audio_config, const std::string& source);
// The same from a whole Qwen2.5-Omni config.json (`source`: its path): kLoadFailed naming
// 'thinker_config.audio_config' when it is missing.
AudioEncoderConfig thinker_audio_config(const Json& config, const std::string& source);

// Rows after conv2 of an audio of `frames` valid feature frames: (frames - 1) / 2 + 1, the sum over
// its chunks (every chunk but the last has an even length, so chunking does not change it).
int64_t audio_conv_length(int64_t frames);
// The rows the encoder gives such an audio (the processor's placeholder count): the average pool's
// (audio_conv_length - 2) / 2 + 1, floored as Python floors.
int64_t audio_output_length(int64_t frames);

// One audio's input: its valid feature frames, [mel_bins, frames] row-major (a view of a longer
// row stride is allowed: `row_stride` floats between mel rows).
struct AudioFeatures {
  const float* values = nullptr;
  int64_t frames = 0;
  int64_t row_stride = 0;
};

class AudioEncoder {
 public:
  // Loads `prefix`conv1.weight … of `ckpt` (prefix "thinker.audio_tower.") onto `placement`.
  // kLoadFailed naming a missing or mis-shaped tensor. audio_bos_eos_token is not read (the
  // reference's forward does not use it).
  AudioEncoder(const Checkpoint& ckpt, const AudioEncoderConfig& config, const std::string& prefix,
               Placement placement = {});

  const AudioEncoderConfig& config() const { return config_; }
  const Placement& placement() const { return placement_; }
  // The rows of all `audios`, one audio after another: [sum of audio_output_length, output_dim]
  // host float32. kInvalidArgument naming the audio (by index) with fewer than 3 frames (it would
  // give no row).
  tensor::Tensor encode(std::span<const AudioFeatures> audios) const;

 private:
  tensor::Tensor weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;
  // conv1 and conv2 of one chunk, time-major [frames, mel_bins] on the placement, into `out`
  // [(frames - 1) / 2 + 1, d_model].
  void front_end(const tensor::Tensor& chunk, tensor::Tensor& out) const;

  AudioEncoderConfig config_;
  Placement placement_;
  tensor::Tensor conv1_w_, conv1_b_, conv2_w_, conv2_b_;  // tap-major [d_model, 3 * in]
  tensor::Tensor positions_;                              // host float32 [max_source_positions, d_model]
  std::optional<WhisperLayers> layers_;
  tensor::Tensor ln_post_w_, ln_post_b_, proj_w_, proj_b_;
};

}  // namespace omni::model::qwen2_5_omni
