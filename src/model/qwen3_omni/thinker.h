// The Qwen3-Omni thinker's text model: a Qwen3 decoder (q/k RMSNorm, GQA, no biases) whose layers'
// MLPs are mixtures of experts (model/moe_mlp.h), with interleaved M-RoPE, stored under
// `thinker.model.` (its output head `thinker.lm_head.weight`) of a checkpoint whose config.json
// holds thinker_config.text_config. For text the three M-RoPE position streams are equal
// (thinker_positions.h), which makes the rotation the plain one the decoder applies.
//
// Registered as the architecture Qwen3OmniMoeForConditionalGeneration (model/model_registry.h)
// and as the llm_ar stage model "qwen3_omni_thinker" (model/stage_model_registry.h). A checkpoint
// with an audio tower and a preprocessor config also reads audio (thinker_audio.h; the towers run on
// the text model's device in its dtype): a request's
// audios are encoded when it is added and their rows replace its expanded placeholders
// (thinker_prompt.h). A checkpoint with a vision encoder (thinker.visual.*) reads images and video
// (thinker_vision.h) the same way; their rows take 3-D positions and carry DeepStack rows.
#pragma once

#include <array>
#include <filesystem>
#include <memory>
#include <string_view>

#include "base/json.h"
#include "model/decoder_lm.h"
#include "model/hf_config.h"
#include "model/model_registry.h"
#include "model/qwen3_omni/thinker_audio.h"
#include "model/qwen3_omni/thinker_prompt.h"
#include "model/qwen3_omni/thinker_vision.h"

namespace omni::model::qwen3_omni {

inline constexpr std::string_view kThinkerStageModel = "qwen3_omni_thinker";

// thinker_config.text_config of a Qwen3-Omni config.json (`source` names it in errors). Its stop
// ids: the text config's eos_token_id, else the top-level im_end_token_id (<|im_end|>), as the
// thinker ends its turn with it. kLoadFailed naming the file and the field.
TextModelConfig parse_thinker_text_config(const Json& config, const std::string& source);

class Thinker : public DecoderLm {
 public:
  // The text model of `dir` (either expert layout) and, when the checkpoint has
  // thinker.audio_tower.* and a preprocessor config, its audio input. Errors as DecoderLm's and
  // ThinkerAudio's.
  Thinker(const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options);

  // The rate of the audio the model takes; 0 when it reads no audio.
  int audio_sample_rate() const { return audio_ ? audio_->sample_rate() : 0; }
  // Whether the model reads images and video.
  bool reads_vision() const { return vision_ != nullptr; }
  // multi_modal_data (model/causal_lm.h's kMultiModalData): "audio" entries' samples at
  // audio_sample_rate(); "image" entries {"data": base64 RGB bytes, "width", "height"}; "video"
  // entries {"data": base64 of the sampled frames' RGB bytes one after another, "width", "height",
  // "frames", "fps": the sampled frames' rate, and for use_audio_in_video "audio": its audio track
  // as an audio entry, whose rows are interleaved with the video's}; additional_information's
  // kMmProcessorKwargs {"min_pixels", "max_pixels"} set both pixel budgets (together only).
  // kInvalidArgument naming the entry's source for one that is malformed, at another rate, too
  // short or too small, and for media the checkpoint cannot read.
  std::optional<MultimodalPrompt> prepare_multimodal_prompt(std::span<const int32_t> prompt,
                                                            const Json& additional_information) override;

  // A checkpoint with speech output gives its talker rows (thinker_payload.h): the hidden states
  // after talker_config.accept_hidden_layer, with the embeddings; none without a talker.
  std::optional<int> downstream_layer() const override { return downstream_layer_; }
  std::vector<uint8_t> encode_downstream_rows(const DownstreamRows& rows) const override;

 private:
  ThinkerTokenIds ids_;
  std::optional<int> downstream_layer_;
  std::array<int32_t, 3> special_ids_{};  // tts_bos, tts_eos, tts_pad
  mutable std::vector<float> specials_;   // their embeddings, on first use
  std::unique_ptr<ThinkerAudio> audio_;
  std::unique_ptr<ThinkerVision> vision_;
};

// Whether the checkpoint of `dir` reads audio: it has a preprocessor config and an audio tower
// (thinker.audio_tower.* in its weights; in a folder without weight files, which serves with random
// weights, thinker_config.audio_config in config.json).
bool has_audio_input(const std::filesystem::path& dir);

// Loads the thinker of `dir` (a Thinker) with `options`.
std::unique_ptr<DecoderLm> load_thinker(const std::filesystem::path& dir, const Json& config,
                                        const CausalLmLoadOptions& options);

// Registers Qwen3OmniMoeForConditionalGeneration.
void register_family(ModelRegistry& registry);

}  // namespace omni::model::qwen3_omni
