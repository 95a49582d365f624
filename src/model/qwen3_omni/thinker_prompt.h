// The thinker's prompt with multimodal segments, as Qwen3OmniMoeProcessor and get_rope_index build
// it: every placeholder token the chat template wrote for an audio (`<|audio_pad|>`, between
// `<|audio_start|>` and `<|audio_end|>`) is expanded to as many copies as the audio encoder gives
// that audio rows, the k-th placeholder standing for the k-th audio of the request; the encoder's
// rows then replace those tokens' embeddings, in order.
//
// Positions (interleaved M-RoPE, three streams t, h, w): a text token advances all three streams by
// one; an audio segment's start token takes the next position, its n placeholder rows the n after
// it on all streams, and the text after the segment resumes at the segment's largest position + 1.
// Text and audio alone therefore give the plain positions 0, 1, 2, … (transformers then skips
// get_rope_index altogether) and a rope delta of 0. Image and video segments (whose rows take grid
// positions) are not read yet.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"

namespace omni::model::qwen3_omni {

// The placeholder ids of thinker_config.
struct ThinkerTokenIds {
  int32_t audio_token = 151675;        // <|audio_pad|>
  int32_t audio_start_token = 151669;  // <|audio_start|>
  int32_t image_token = 151655;        // <|image_pad|>
  int32_t video_token = 151656;        // <|video_pad|>
  int32_t vision_start_token = 151652;
};

// thinker_config's ids of a Qwen3-Omni config.json (the class defaults where a field is absent).
// kLoadFailed naming the field when it is not an integer.
ThinkerTokenIds parse_thinker_token_ids(const Json& config, const std::string& source);

// `prompt` with its k-th audio placeholder repeated counts[k] times. Throws
// omni::Error(kInvalidArgument) when the prompt holds another number of placeholders than there
// are counts ("the prompt has 1 audio placeholder for 2 audios").
std::vector<int32_t> expand_audio_placeholders(std::span<const int32_t> prompt, int32_t audio_token,
                                               std::span<const int64_t> counts);

// The batch positions of the audio placeholders of an expanded prompt, in order.
std::vector<int32_t> audio_rows(std::span<const int32_t> expanded, int32_t audio_token);

// The three position streams of an expanded prompt, [3 * tokens] (all t, then h, then w), and
// the rope delta (largest position + 1 - tokens) that decode steps add to their index.
// kUnsupported for a prompt with image or video placeholders.
struct ThinkerPositions {
  std::vector<int32_t> streams;
  int32_t rope_delta = 0;
};
ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids);

}  // namespace omni::model::qwen3_omni
