// The Qwen3-Omni talker's prompt (docs/models/qwen3_omni.md, "Speech output: the talker's
// prompt"), from what the thinker computed for one request, as transformers 5.17's
// Qwen3OmniMoeForConditionalGeneration.generate builds it:
//   - the conversation is cut at each <|im_start|> of the prompt; the last segment runs from the
//     last <|im_start|> of the prompt to the end of the thinker's rows (its reply);
//   - system segments and earlier assistant segments are skipped;
//   - a user segment gives one row per token: hidden_projection(the thinker's hidden state after
//     accept_hidden_layer) at audio, image and video placeholders, text_projection(the thinker's
//     input embedding) elsewhere;
//   - the last (assistant) segment, A = text_projection(its input embeddings), gives 9 rows:
//     text track [A0, A1, A2, tts_pad x 4, tts_bos, A3] + codec track [0, 0, 0, nothink,
//     think_bos, think_eos, speaker, pad, bos] (codec embeddings), and the decode steps' text
//     track trailing = [A4, ..., tts_eos], then tts_pad;
//   - tts_bos, tts_eos, tts_pad are text_projection of the thinker's embeddings of those tokens.
// The thinker's last generated token has no row (it never went through the thinker), so it never
// reaches the talker. Errors: omni::Error(kInvalidArgument) naming the position and token at fault.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/qwen3_omni/talker_config.h"
#include "model/qwen3_tts/prompt.h"
#include "model/qwen3_tts/talker.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_omni {

// What the thinker hands the talker for one request: its token ids (prompt, then reply), and per
// position it ran, its input embedding (host float32 [rows, thinker hidden], rows <= ids.size()),
// and at least for the prompt's positions the hidden state after accept_hidden_layer.
struct ThinkerRows {
  std::span<const int32_t> ids;
  size_t prompt_length = 0;
  tensor::Tensor embeddings;
  tensor::Tensor accepted_hidden;
  // The thinker's input embeddings of tts_bos, tts_eos and tts_pad ([3, thinker hidden]).
  tensor::Tensor special_embeddings;
  // The thinker has finished its reply: the trailing text track ends in tts_eos. While it still
  // writes, the trailing rows are the reply's rows so far (more are projected as they come).
  bool complete = true;
};

// What the talker prompt of a thinker prompt takes: its rows, and the thinker rows it is built
// from (through the reply's first token: the last <|im_start|> + 4). Errors as build_talker_prompt.
struct TalkerPromptSize {
  int64_t rows = 0;
  int64_t thinker_rows = 0;
};
TalkerPromptSize talker_prompt_size(const TalkerConfig& config, std::span<const int32_t> prompt);

qwen3_tts::TalkerPrompt build_talker_prompt(const qwen3_tts::Talker& talker, const TalkerConfig& config,
                                            const ThinkerRows& thinker, int32_t speaker_codec_id);

// The talker prompt's M-RoPE streams, as transformers' talker computes them (get_rope_index over
// the talker's own ids: its user turns' ids, then the assistant part's 9 text rows) when the
// request has images or videos; text and audio alone give the plain positions, as for the
// thinker. Derived from the thinker's streams of `prompt` (`thinker_streams`, [3 * prompt.size()],
// all t, then h, then w; empty: plain): each kept user turn starts at a text token (its
// <|im_start|>), which takes the largest position of the rows kept before it + 1 (0 for the first),
// and the rest of the turn keeps its offsets from that token on every stream; the 9 assistant rows
// follow one by one. `streams` is [3 * rows] for the talker prompt's rows (talker_prompt_size), and
// decode steps take their index + rope_delta on all streams; both empty / 0 for plain positions.
// Errors as talker_prompt_size, and kInvalidArgument for thinker_streams of another size.
struct TalkerPositions {
  std::vector<float> streams;
  float rope_delta = 0.0f;
};
TalkerPositions talker_positions(const TalkerConfig& config, std::span<const int32_t> prompt,
                                 std::span<const float> thinker_streams);

}  // namespace omni::model::qwen3_omni
