// The Qwen3-Omni audio encoder (`thinker.audio_tower`, transformers' Qwen3OmniMoeAudioEncoder):
// log-mel features in, one row of the thinker's width per ~77 ms of audio out.
//
// For the audios of one request together (the chunks of all of them share one padding):
//   1. each audio's valid frames are cut into chunks of 2 * n_window (100) frames, the last one
//      shorter, and every chunk is right-padded with zeros to the longest chunk;
//   2. per chunk, as an image [1, mel_bins, frames]: three 3 x 3 convolutions with stride 2 and
//      padding 1 (conv2d1..3, each followed by exact GELU; 128 -> 64 -> 32 -> 16 mel rows, 100 ->
//      50 -> 25 -> 13 frames), the channels x mel rows of each frame flattened channel-major into
//      conv_out (no bias) to d_model, plus the sinusoidal position embedding restarting at 0 in every
//      chunk; only a chunk's valid rows are kept (the padding frames still reach them through the
//      second and third convolutions, as in the reference);
//   3. encoder_layers pre-LayerNorm layers (self-attention with biases, GELU MLP) whose attention is
//      bidirectional within windows: each audio's rows are cut into windows of
//      (the longest chunk's rows) x (n_window_infer / (2 * n_window)) rows, 104 for the released
//      model, the remainder last;
//   4. ln_post, proj1, GELU, proj2 (to output_dim, the thinker's hidden size).
// An audio of L valid frames gives audio_output_length(L) rows.
//
// Runs through tensor/ops.h on the device and in the dtype of its Placement (the CPU in float32, or
// a CUDA device in float32/bfloat16/float16; the weights converted from the checkpoint's dtype):
// each convolution is ops::conv2d over the chunk as a time-major image [frames, mel_bins, 1] (the
// kernels' two spatial axes swapped at loading to match), so the flattened rows need no transpose
// (conv_out's columns are reordered at loading instead). The inputs and the output rows are host
// float32. Immutable after loading; encode() may be called from any thread of a CPU placement, and
// from one thread at a time on a GPU (its stream).
#pragma once

#include <cstdint>
#include <filesystem>
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

namespace omni::model::qwen3_omni {

struct AudioEncoderConfig {
  int num_mel_bins = 128;
  int d_model = 1280;
  int encoder_layers = 32;
  int encoder_attention_heads = 20;
  int encoder_ffn_dim = 5120;
  int downsample_hidden_size = 480;
  int output_dim = 2048;
  int n_window = 50;
  int n_window_infer = 800;
  int max_source_positions = 1500;
  bool scale_embedding = false;
};

// thinker_config.audio_config of a Qwen3-Omni config.json (`source` names it in errors): kLoadFailed
// naming a field of the wrong type or range; kUnsupported for an activation other than GELU.
AudioEncoderConfig parse_audio_encoder_config(const Json& audio_config, const std::string& source);

// The rows the encoder gives an audio of `frames` valid feature frames (the processor's
// placeholder count): 13 per whole chunk of 2 * n_window frames plus the rows of the remainder
// through three stride-2 convolutions.
int64_t audio_output_length(int64_t frames, int n_window);

// One audio's input: its valid feature frames, [mel_bins, frames] row-major (a view of a longer
// row stride is allowed: `row_stride` floats between mel rows).
struct AudioFeatures {
  const float* values = nullptr;
  int64_t frames = 0;
  int64_t row_stride = 0;
};

class AudioEncoder {
 public:
  // Loads `prefix`conv2d1.weight … of `ckpt` (prefix "thinker.audio_tower.") onto `placement`.
  // kLoadFailed naming a missing or mis-shaped tensor.
  AudioEncoder(const Checkpoint& ckpt, const AudioEncoderConfig& config, const std::string& prefix,
               Placement placement = {});

  const AudioEncoderConfig& config() const { return config_; }
  const Placement& placement() const { return placement_; }
  // The rows of all `audios`, one audio after another: [sum of audio_output_length, output_dim]
  // host float32. kInvalidArgument for an audio with no frames.
  tensor::Tensor encode(std::span<const AudioFeatures> audios) const;

 private:
  // A weight of the checkpoint on the placement.
  tensor::Tensor weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;
  // The convolution front end of one zero-padded chunk, a time-major image [width, mel_bins, 1] on
  // the placement: its first `valid` rows of d_model into `out`.
  void front_end(const tensor::Tensor& chunk, int64_t valid, tensor::Tensor& out) const;

  AudioEncoderConfig config_;
  Placement placement_;
  int64_t freq_rows_ = 0;                 // mel rows after the three convolutions
  tensor::Tensor conv_w_[3], conv_b_[3];  // conv_w_ [out, in, time tap, mel tap]
  tensor::Tensor conv_out_;               // [d_model, freq_rows * channels]: mel row-major
  tensor::Tensor positions_;              // host float32 [max_source_positions, d_model]
  std::optional<WhisperLayers> layers_;
  tensor::Tensor ln_post_w_, ln_post_b_, proj1_w_, proj1_b_, proj2_w_, proj2_b_;
};

}  // namespace omni::model::qwen3_omni
