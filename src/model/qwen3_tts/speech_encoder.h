// The encoder of the Qwen3-TTS 12 Hz speech tokenizer (docs/models/qwen3_tts.md, "The
// speech-tokenizer encoder"): reference audio (24 kHz mono float32) -> codec frames of
// valid_quantizers codes at 12.5 Hz, the reference codes of in-context (ICL) voice cloning. A Mimi
// encoder: the SEANet causal convolutions (strides 4, 5, 6, 8 released), the encoder transformer
// (LayerNorm, RoPE, causal sliding-window attention, GELU MLP, layer scales), a stride-2
// downsampling convolution (replicate padding) and the split residual vector quantizer (one
// semantic codebook, then the acoustic ones, each quantizer set on its own projection of the same
// embeddings; nearest codebook entry by Euclidean distance), of which the first
// encoder_valid_num_quantizers codebooks are kept. The weights are `encoder.*` of
// speech_tokenizer/model.safetensors under transformers' Mimi names.
//
// Runs in float32 on the device it is loaded on (the CPU or a CUDA device), through tensor/ops.h.
// Immutable after loading: encode() may be called from several threads at once. Errors: omni::Error(kLoadFailed /
// kNotFound) naming the file and tensor for a bad checkpoint; kInvalidArgument for empty audio.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "model/qwen3_tts/speech_encoder_config.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_tts {

class SpeechEncoder {
 public:
  // The activations after each part, time-major ([steps, hidden_size] row-major), for tests.
  struct Activations {
    std::vector<float> convolutions;  // after the SEANet encoder, at sample_rate / hop()
    std::vector<float> transformer;   // after the encoder transformer
    std::vector<float> downsampled;   // after the downsampling, one row per frame
  };

  SpeechEncoder(const Checkpoint& checkpoint, SpeechEncoderConfig config,
                tensor::Device device = tensor::Device::cpu());
  // The encoder of the speech tokenizer in `dir` (a checkpoint's speech_tokenizer/) on `device`;
  // nullptr when its config.json has no encoder_config. Throws what the loaders throw.
  static std::unique_ptr<SpeechEncoder> load(const std::filesystem::path& dir,
                                             tensor::Device device = tensor::Device::cpu());

  const SpeechEncoderConfig& config() const { return config_; }
  // Frames for `samples` samples: ceil(samples / samples_per_frame()).
  int64_t frames_for(int64_t samples) const;
  // The codes of `samples` at config().sample_rate: frames_for(samples.size()) frames of
  // config().valid_quantizers codes, frame-major. `activations`, when given, receives the
  // intermediate tensors.
  std::vector<int32_t> encode(std::span<const float> samples, Activations* activations = nullptr) const;

 private:
  // A causal Conv1d (transformers' MimiConv1d with use_causal_conv): left padding k_eff - stride,
  // right padding up to a whole last window; ceil(T / stride) output rows.
  struct Conv {
    tensor::Tensor weight;  // [C_out, k * C_in]: tap-major, the rows of ops::unfold_rows
    tensor::Tensor bias;    // [C_out] or undefined
    int in = 0, out = 0, kernel = 1, stride = 1, dilation = 1;
    bool replicate = false;  // pad with the edge rows instead of zeros
  };
  struct ResidualBlock {
    Conv first, second;
  };
  struct TransformerLayer {
    tensor::Tensor norm1_w, norm1_b, norm2_w, norm2_b;
    tensor::Tensor q, k, v, o;  // [out, in]
    tensor::Tensor attn_scale, mlp_scale;
    tensor::Tensor fc1, fc2;
  };
  struct Quantizer {
    tensor::Tensor input_proj;              // [codebook_dim, hidden] or undefined (equal widths)
    std::vector<tensor::Tensor> codebooks;  // each [codebook_size, codebook_dim]: embed_sum / usage
    std::vector<tensor::Tensor> norms;      // each [codebook_size]: squared norms of the entries
  };
  // One stage of the SEANet encoder: residual blocks, then the strided convolution (ELU before it).
  struct Stage {
    std::vector<ResidualBlock> blocks;
    Conv down;
  };

  Conv load_conv(const Checkpoint& checkpoint, const std::string& name, int in, int out, int kernel, int stride,
                 int dilation, bool bias, bool replicate) const;
  Quantizer load_quantizer(const Checkpoint& checkpoint, const std::string& name, int layers) const;
  // `conv` over x [T, conv.in]: [ceil(T / stride), conv.out].
  tensor::Tensor apply(const Conv& conv, const tensor::Tensor& x) const;
  // The encoder transformer over x [steps, hidden], in place.
  void transformer(tensor::Tensor& x) const;
  // Codes of `quantizer` over x [frames, hidden] into columns [first, first + layers) of codes
  // [frames, valid_quantizers].
  void quantize(const Quantizer& quantizer, const tensor::Tensor& x, int first, tensor::Tensor& codes) const;

  SpeechEncoderConfig config_;
  tensor::Device device_;
  Conv first_;
  std::vector<Stage> stages_;
  Conv last_;
  std::vector<TransformerLayer> layers_;
  Conv downsample_;
  Quantizer semantic_, acoustic_;
};

}  // namespace omni::model::qwen3_tts
