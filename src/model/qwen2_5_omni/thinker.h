// The Qwen2.5-Omni thinker's text model: a Qwen2 decoder (q/k/v biases, GQA, no q/k norm) with
// sectioned M-RoPE (thinker_config.text_config.rope_parameters.mrope_section, [16, 24, 24] as
// released), stored under `thinker.model.` with its output head `thinker.lm_head.weight`.
//
// Registered as the architecture Qwen2_5OmniForConditionalGeneration (model/model_registry.h) and
// as the llm_ar stage model "qwen2_5_omni_thinker" (model/stage_model_registry.h). The media towers
// are separate: what they make of a request's audio, images and video enters through
// multimodal_prompt() as rows that replace the expanded placeholders' embeddings, with the 3-D
// positions of thinker_positions.h.
//
// With speech output (talker_config present, enable_audio_output not false) every forward of a
// request that feeds the talker captures each row's input embedding and the final norm's output
// (transformers' hidden_states[0] and hidden_states[-1]); they travel as model/thinker_payload.h,
// hidden states of every position included, the prompt's media rows zeroed as
// Qwen2_5OmniForConditionalGeneration.generate zeroes them. Threads: as every CausalLm.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "model/decoder_lm.h"
#include "model/hf_config.h"
#include "model/model_registry.h"
#include "model/qwen2_5_omni/thinker_positions.h"
#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

inline constexpr std::string_view kThinkerStageModel = "qwen2_5_omni_thinker";

// thinker_config.text_config of a Qwen2.5-Omni config.json (`source` names it in errors); the dtype
// from the top level when the text config has none; the stop ids: the text config's eos_token_id,
// else <|im_end|> of the released vocabulary (151645). kLoadFailed naming the file and the field.
TextModelConfig parse_thinker_text_config(const Json& config, const std::string& source);

// What the towers made of one request's media: the layout (grids, audio rows) and the rows
// themselves, host float32 [rows, thinker hidden] per audio, image and video, in prompt order.
struct EncodedMedia {
  PromptMedia layout;
  std::vector<tensor::Tensor> audios, images, videos;
};

class Thinker : public DecoderLm {
 public:
  // The text model of `dir`. Errors as DecoderLm's and parse_thinker_text_config's.
  Thinker(const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options);

  const ThinkerTokenIds& token_ids() const { return ids_; }

  // `prompt` (the chat template's ids, one placeholder per medium) with its placeholders expanded
  // for `media`, the media rows at their positions (each kind's rows in prompt order) and, with
  // images or videos, the M-RoPE streams. kInvalidArgument naming the medium whose rows do not
  // match its layout or the width, and as expand_placeholders / thinker_positions.
  MultimodalPrompt multimodal_prompt(std::span<const int32_t> prompt, const EncodedMedia& media) const;

  // With speech output: num_hidden_layers + 1, the final norm's output (model/causal_lm.h).
  std::optional<int> downstream_layer() const override { return downstream_layer_; }
  std::vector<uint8_t> encode_downstream_rows(const DownstreamRows& rows) const override;

 private:
  ThinkerTokenIds ids_;
  std::optional<int> downstream_layer_;
};

// Whether config.json asks for speech output: a talker_config and enable_audio_output not false.
bool has_audio_output(const Json& config);

// Loads the thinker of `dir` (a Thinker) with `options`.
std::unique_ptr<DecoderLm> load_thinker(const std::filesystem::path& dir, const Json& config,
                                        const CausalLmLoadOptions& options);

// Registers Qwen2_5OmniForConditionalGeneration.
void register_family(ModelRegistry& registry);

}  // namespace omni::model::qwen2_5_omni
