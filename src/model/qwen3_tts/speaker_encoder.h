// The speaker encoder of Qwen3-TTS Base checkpoints (docs/models/qwen3_tts.md, "Voice cloning"):
// reference audio (24 kHz mono float32) -> log-mel [frames, 128] -> ECAPA-TDNN -> the x-vector
// [enc_dim] (= the talker's hidden size) that fills the speaker slot of the talker's prompt.
//
// The mel front end runs on the CPU; the network in float32 on the device the encoder is loaded on
// (the CPU or a CUDA device; a few GFLOP for 10 s of audio on the released widths), through
// tensor/ops.h. Immutable after loading: embed() may be called from several threads at once.
// Errors: omni::Error(kLoadFailed) naming the file and tensor for a bad checkpoint;
// kInvalidArgument for audio too short to analyse.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "model/qwen3_tts/config.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_tts {

// The mel front end's fixed parameters (the official extract_speaker_embedding's).
inline constexpr int kSpeakerMelFft = 1024;
inline constexpr int kSpeakerMelHop = 256;
inline constexpr double kSpeakerMelFmax = 12000.0;
// The shortest audio the front end accepts: more than (n_fft - hop) / 2 samples for the reflect
// padding, and at least one frame.
inline constexpr int64_t kSpeakerMelMinSamples = kSpeakerMelFft;

class SpeakerEncoder {
 public:
  // Loads `prefix`* from `checkpoint` in the shapes `config` gives: Qwen3-TTS's "speaker_encoder.";
  // the same network conditions Qwen2.5-Omni's token2wav DiT under its own prefix.
  SpeakerEncoder(const Checkpoint& checkpoint, SpeakerEncoderConfig config,
                 tensor::Device device = tensor::Device::cpu(), std::string prefix = "speaker_encoder.");

  const SpeakerEncoderConfig& config() const { return config_; }
  // The log-mel [frames, mel_dim] (row-major) of `samples` at config().sample_rate.
  std::vector<float> mel(std::span<const float> samples) const;
  // The x-vector [enc_dim] of a log-mel [frames, mel_dim].
  std::vector<float> embed_mel(std::span<const float> mel, int64_t frames) const;
  // mel() then embed_mel().
  std::vector<float> embed(std::span<const float> samples) const;

 private:
  // A Conv1d with padding "same" in reflect mode.
  struct Conv {
    tensor::Tensor weight;  // [C_out, k * C_in]: tap-major, the rows of ops::unfold_rows
    tensor::Tensor bias;    // [C_out]
    int kernel = 1, dilation = 1;
  };
  struct SeRes2NetBlock {
    Conv tdnn1, tdnn2, se1, se2;
    std::vector<Conv> res2net;  // res2net_scale - 1 convs on channel chunks
  };

  Conv load_conv(const Checkpoint& checkpoint, const std::string& name, int out, int in, int k, int dilation) const;
  // conv over x [T, C_in]: [T, C_out]; relu adds the TDNN block's ReLU.
  tensor::Tensor apply(const Conv& conv, const tensor::Tensor& x, bool relu) const;

  SpeakerEncoderConfig config_;
  tensor::Device device_;
  std::string prefix_;
  std::vector<double> mel_filterbank_;
  Conv first_;
  std::vector<SeRes2NetBlock> blocks_;
  Conv mfa_, asp_conv_, fc_;
  // The pooling's TDNN over [x | mean | std] rows, split by its input columns: the x part, and the
  // statistics part that is the same for every row (it becomes a bias).
  Conv asp_tdnn_x_, asp_tdnn_stats_;
};

}  // namespace omni::model::qwen3_tts
