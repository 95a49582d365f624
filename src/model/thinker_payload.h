// What an Omni thinker stage sends its talker for one request, one payload per sampled token
// (engine::ArEngine's rows for a downstream stage, model/causal_lm.h's DownstreamRows): the rows
// the thinker computed since its previous token, from first_position on — each position's token id
// and input embedding, and the hidden state its model hands the talker (Qwen3-Omni: after
// accept_hidden_layer, for the prompt's positions only, as its talker reads hidden states only at
// the prompt's media placeholders; Qwen2.5-Omni: the final-norm output of every position, as its
// talker adds it to every row). The payload that starts at position 0 may also carry special
// embeddings the talker's text track is made of (Qwen3-Omni: tts_bos, tts_eos and tts_pad) and, for
// a prompt with images or videos, its M-RoPE streams (the talker's own positions are derived from
// them).
//
// Bytes (little-endian, the host's): "QOTR", then int32 first_position, prompt_length, rows,
// width, hidden_rows, special_rows, position_rows (0 or prompt_length); int32 ids[rows]; float32
// embeddings[rows][width], hidden[hidden_rows][width], specials[special_rows][width],
// positions[3][position_rows].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/causal_lm.h"

namespace omni::model {

struct ThinkerPayload {
  int32_t first_position = 0;
  int32_t prompt_length = 0;
  int32_t width = 0;  // the thinker's hidden size
  std::vector<int32_t> ids;
  std::vector<float> embeddings;  // [ids.size(), width]
  std::vector<float> hidden;      // [rows of positions < prompt_length, or all rows with reply_hidden, width]
  std::vector<float> specials;    // [special rows, width] from position 0 on (as the encoder gave them), else empty
  std::vector<float> positions;   // [3 * prompt_length] from position 0 on when not plain, else empty
};

// The payload of `rows` (the hidden states past the prompt are left out unless `reply_hidden`);
// `specials` [n, width] and rows.prompt_positions are added when rows.first_position is 0.
std::vector<uint8_t> encode_thinker_payload(const DownstreamRows& rows, std::span<const float> specials,
                                            bool reply_hidden = false);
// Throws omni::Error(kInvalidArgument) naming what is malformed (its sizes).
ThinkerPayload decode_thinker_payload(std::span<const uint8_t> bytes);

}  // namespace omni::model
