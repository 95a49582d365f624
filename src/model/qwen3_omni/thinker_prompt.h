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
// get_rope_index altogether) and a rope delta of 0.
//
// An image or a video (`<|vision_start|>`, its `<|image_pad|>`/`<|video_pad|>` rows, `<|vision_end|>`)
// has one row per 2 x 2 block of its t x h x w patch grid, in the vision encoder's order (temporal
// patch, block row, block column). With s the position after its start token, a row of temporal
// patch k, block row i and block column j takes (s + k * step, s + i, s + j), step being
// position_id_per_seconds for an image (whose t is 1, so 0 is all it takes) and seconds per temporal
// patch x position_id_per_seconds for a video (truncated to an integer); the end token takes the
// largest of those positions + 1. Decode steps then take position + rope delta on all streams.
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
  // thinker_config.position_id_per_seconds: temporal positions per second of video (transformers'
  // class default 25 when the field is absent; the released checkpoints set 13).
  double position_id_per_seconds = 25.0;
};

// thinker_config's ids of a Qwen3-Omni config.json (the class defaults where a field is absent).
// kLoadFailed naming the field when it is not an integer.
ThinkerTokenIds parse_thinker_token_ids(const Json& config, const std::string& source);

// `prompt` with its k-th placeholder `token` repeated counts[k] times; `kind` names the media in
// errors. Throws omni::Error(kInvalidArgument) when the prompt holds another number of
// placeholders than there are counts ("the prompt has 1 image placeholder for 2 images").
std::vector<int32_t> expand_placeholders(std::span<const int32_t> prompt, int32_t token,
                                         std::span<const int64_t> counts, const char* kind);
inline std::vector<int32_t> expand_audio_placeholders(std::span<const int32_t> prompt, int32_t audio_token,
                                                      std::span<const int64_t> counts) {
  return expand_placeholders(prompt, audio_token, counts, "audio");
}

// The batch positions of the placeholders `token` of an expanded prompt, in order.
std::vector<int32_t> audio_rows(std::span<const int32_t> expanded, int32_t audio_token);
inline std::vector<int32_t> placeholder_rows(std::span<const int32_t> expanded, int32_t token) {
  return audio_rows(expanded, token);
}

// An image's or a video's rows in the prompt: its grid of patches (t, h, w), the merge, and the
// temporal position step per temporal patch (position_id_per_seconds for an image, seconds per
// temporal patch x position_id_per_seconds for a video).
struct VisionSegment {
  int64_t t = 1, h = 0, w = 0;
  int merge = 2;
  double temporal_step = 0.0;
  int64_t rows() const { return t * (h / merge) * (w / merge); }
};

// The three position streams of an expanded prompt, [3 * tokens] (all t, then h, then w), and
// the rope delta (largest position + 1 - tokens) that decode steps add to their index. `images` and
// `videos` describe the prompt's image and video segments in order. kInvalidArgument when the
// placeholders do not match them (a segment's rows cut short, more segments than described).
struct ThinkerPositions {
  std::vector<int32_t> streams;
  int32_t rope_delta = 0;
};
ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids,
                                   std::span<const VisionSegment> images = {},
                                   std::span<const VisionSegment> videos = {});

}  // namespace omni::model::qwen3_omni
