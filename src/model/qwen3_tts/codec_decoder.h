// The Qwen3-TTS 12 Hz codec decoder (Qwen3TTSTokenizerV2Decoder; docs/models/qwen3_tts.md,
// "The codec decoder"): 16 codes per frame -> RVQ lookup -> causal conv -> sliding-window
// transformer -> 2 ConvNeXt upsamplers -> 4 SnakeBeta decoder blocks -> 1920 samples of 24 kHz
// audio per frame, float32, on the CPU or a CUDA device.
//
// Every stage is causal, so the decoder streams exactly: a CodecStream carries what the next
// frames need from earlier ones (per convolution the last (k - 1) * dilation input rows, per
// transposed convolution its overlapping input row, per transformer layer the keys and values of
// the last sliding_window - 1 frames, and the frame position that RoPE continues from).
// Decoding a stream chunk by chunk gives the samples of one-shot decoding bit for bit (the ops
// compute each row identically whatever the chunk; tests/model/qwen3_tts/codec_decoder_test.cc).
// One-shot decode() is a fresh stream fed all frames at once, i.e. the reference's full-sequence
// decode (not its 300-frame chunked_decode, which differs after 300 frames).
//
// The Qwen3-Omni code2wav is a variant of it (CodecDecoderLayout): codes enter as the mean of one
// embedding per codebook, with no residual-VQ projections, no pre_conv and no projections around
// the transformer, and the decoder blocks' transposed convolutions are trimmed by k - stride on
// the left too. It streams exactly as well: such a layer's first k - stride rows of a stream are
// dropped, so F frames give F * samples_per_frame() minus a fixed count (555 for the released
// rates), all of which a stream's first chunk lacks.
//
// Streams decode in batches: decode_batch() packs the new frames of several streams one after
// another along time and runs every layer once for all of them (tensor/ops.h's segments), each
// stream reading and advancing only its own state. A stream's state lives on the decoder's device.
// On the CPU a stream's samples are the same bits alone, chunked or batched; on CUDA they agree
// within float32 rounding (cuBLASLt picks its algorithms by the shape of each product).
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/audio_decoder.h"
#include "model/qwen3_tts/codec_config.h"
#include "tensor/tensor.h"

namespace omni::model {
class Checkpoint;
}

namespace omni::model::qwen3_tts {

// Where a checkpoint keeps the decoder, and which variant it is.
struct CodecDecoderLayout {
  std::string name = "qwen3_tts codec decoder";  // in errors
  std::string prefix = "decoder.";  // of every tensor: "decoder." (speech_tokenizer/), "code2wav." (Qwen3-Omni)
  // Residual-VQ codebooks with output projections, pre_conv, and the transformer's input and
  // output projections (Qwen3-TTS). Without them: `code_embedding.weight` [num_quantizers *
  // codebook_size, hidden_size], averaged over the codebooks, and latent_dim = hidden_size.
  bool residual_vq = true;
  // The decoder blocks' transposed convolutions are trimmed by k - stride on the left as well.
  bool trim_transposed_left = false;
};

class CodecDecoder final : public StreamingAudioDecoder {
 public:
  // Loads `dir`/config.json and the decoder.* tensors of `dir`/model.safetensors (dir = a
  // checkpoint's speech_tokenizer/). Errors: kNotFound for missing files, kLoadFailed naming the
  // file and the tensor that is missing or mis-shaped (see read_codec_decoder_config for config
  // errors). Encoder tensors are ignored.
  // The weights and the streams' state go to `device` (the CPU or a CUDA device; kUnavailable when
  // that device is missing, kUnsupported for CUDA in a build without it).
  static std::unique_ptr<CodecDecoder> load(const std::filesystem::path& dir,
                                            tensor::Device device = tensor::Device::cpu());
  // The decoder of `layout` in `checkpoint` (f32 or bf16 tensors), configured by `config`.
  static std::unique_ptr<CodecDecoder> load(const Checkpoint& checkpoint, CodecDecoderConfig config,
                                            const CodecDecoderLayout& layout, tensor::Device device);

  const CodecDecoderConfig& config() const { return config_; }
  tensor::Device device() const { return device_; }
  int codes_per_frame() const override { return config_.num_quantizers; }
  int samples_per_frame() const override { return config_.samples_per_frame(); }
  int sample_rate() const override { return config_.output_sample_rate; }

  std::unique_ptr<AudioDecoderStream> open_stream() const override;
  // A deep copy of a stream this decoder opened (its histories on the decoder's device);
  // kInvalidArgument for another decoder's stream.
  std::unique_ptr<AudioDecoderStream> copy_stream(const AudioDecoderStream& stream) const override;
  // Codes below 0 count as 0 (the reference clamps padding); codes >= codebook_size are
  // kInvalidArgument. Thread-safe for distinct streams.
  void decode(AudioDecoderStream& stream, std::span<const int32_t> codes, std::vector<float>& audio) const override;
  // Streams opened by this decoder, each at most once per call; items without frames are skipped.
  // Errors: as decode(), naming the item; no stream moves on an error.
  void decode_batch(std::span<const AudioDecodeItem> items) const override;
  // Any batch fits (the work grows with the frames; memory is the limit).
  int max_batch() const override { return 1 << 20; }

  // All frames at once: codes [frames][num_quantizers] frame-major -> frames * samples_per_frame()
  // samples (less samples_trimmed() with trim_transposed_left).
  std::vector<float> decode(std::span<const int32_t> codes) const;

  // The samples a stream gives fewer than frames * samples_per_frame(): 0 for Qwen3-TTS.
  int64_t samples_trimmed() const;

  struct Weights;
  ~CodecDecoder() override;

 private:
  CodecDecoder(CodecDecoderConfig config, CodecDecoderLayout layout, tensor::Device device,
               std::unique_ptr<Weights> weights);
  static void load_residual_vq(const Checkpoint& checkpoint, const CodecDecoderConfig& config,
                               const std::string& prefix, Weights& weights);
  // The transformer, the upsamplers and the decoder blocks.
  static void load_stack(const Checkpoint& checkpoint, const CodecDecoderConfig& config, const std::string& prefix,
                         Weights& weights);
  // The transformer's input rows [total, hidden or latent] from each codebook's codes (ids[g] [total]).
  tensor::Tensor residual_vq(const std::vector<tensor::Tensor>& ids, int64_t total) const;
  tensor::Tensor mean_code_embedding(const std::vector<tensor::Tensor>& ids, int64_t total) const;

  CodecDecoderConfig config_;
  CodecDecoderLayout layout_;
  tensor::Device device_;
  std::unique_ptr<Weights> weights_;
};

}  // namespace omni::model::qwen3_tts
