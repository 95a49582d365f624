// The Qwen2.5-Omni talker's inputs, as transformers 5.17's Qwen2_5OmniForConditionalGeneration.generate
// and Qwen2_5OmniTalkerForConditionalGeneration.forward build them, in the thinker's width (the
// talker projects every row once, talker.h). With L prompt tokens and the thinker's rows of its
// reply tokens r0, r1, … (each the token's input embedding + the thinker's final-norm output; the
// reply's last token never went through the thinker, so it has none):
//   prompt rows (L + 2): embedding + final-norm output of each prompt token (embeddings of media
//     placeholders zeroed by the thinker), then the thinker's embedding of the speaker's bos token
//     + C(codec_pad), then r0 + C(codec_bos) (C: the talker's codec embeddings; the codec ids of
//     the prompt rows are codec_mask, which is never embedded);
//   decode step j (after code c_j was sampled): C(c_j) + text row j, the text rows being r1, r2, …,
//     then the embedding of tts_text_end, then that of tts_text_pad for ever.
// Positions: the thinker prompt's, then two text positions (the last + 1, + 2); decode steps take
// their index + rope_delta on all streams (0 for plain positions).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/qwen2_5_omni/talker.h"
#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

// What the thinker computed for one request (model/thinker_payload.h), host float32 rows of
// `width` values: ids (prompt, then the reply tokens it ran), per row its input embedding and
// final-norm output, and the prompt's M-RoPE streams (empty: plain).
struct ThinkerOutput {
  std::span<const int32_t> ids;
  size_t prompt_length = 0;
  int64_t width = 0;
  std::span<const float> embeddings;  // [ids.size(), width]
  std::span<const float> hidden;      // [ids.size(), width]
  std::span<const float> positions;   // [3 * prompt_length] or empty
};

// The thinker's embeddings of the rows that are not its outputs, [width] each.
struct TalkerTextRows {
  std::vector<float> speaker_bos;  // the speaker's bos_token (spk_dict.pt)
  std::vector<float> text_eos;     // tts_text_end
  std::vector<float> text_pad;     // tts_text_pad
};

struct TalkerPrompt {
  tensor::Tensor rows;  // host float32 [prompt_length + 2, width]
  // The reply's text rows after r0 (r1, …), [reply_rows - 1, width].
  std::vector<float> reply;
  int64_t reply_rows = 0;              // rows of the reply the thinker ran (r0 included)
  std::vector<float> mrope_positions;  // [3 * rows] or empty (plain)
  float rope_delta = 0.0f;
};

// kInvalidArgument naming what is missing: no reply row (the thinker wrote one token or none), rows
// of another width, positions of another size.
TalkerPrompt build_talker_prompt(const Talker& talker, const ThinkerOutput& thinker, const TalkerTextRows& text);

// Text row j of the decode steps (above) of `prompt`: a pointer to width floats.
const float* talker_text_row(const TalkerPrompt& prompt, const TalkerTextRows& text, int64_t j);

}  // namespace omni::model::qwen2_5_omni
