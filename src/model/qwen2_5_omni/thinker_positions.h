// The Qwen2.5-Omni thinker's prompt layout and positions, as transformers' Qwen2_5OmniProcessor
// expands the chat template's placeholders and Qwen2_5OmniThinkerForConditionalGeneration's
// get_rope_index numbers the result (sectioned M-RoPE, three integer streams t, h, w).
//
// Expansion (replace_multimodal_special_tokens): in prompt order, the k-th `<|AUDIO|>` becomes as
// many copies as the k-th audio has encoder rows, an `<|IMAGE|>` one copy per 2 x 2 block of its
// patch grid, a `<|VIDEO|>` likewise; with use_audio_in_video a video's
// `<|vision_bos|><|VIDEO|><|vision_eos|>` becomes `<|vision_bos|><|audio_bos|>`, its rows and its
// audio track's rows interleaved by chunks of seconds_per_chunk, then `<|audio_eos|><|vision_eos|>`
// (the video and its track take the next audio in the order audios come).
//
// Positions: a prompt without images and videos takes the plain positions 0, 1, 2, … on all streams
// (audio alone included) and a rope delta of 0. Otherwise every block starts at the largest
// position of the block before it + 1: text (and each start and end token) one position per token
// on all streams; an audio's n rows arange(n); an image's or video's rows of temporal patch k,
// block row i and block column j take (k * second_per_grid * position_id_per_seconds truncated,
// i, j) + start (second_per_grid 1 for images). A video with its audio: its two start tokens both
// take position s, the rows start at s + 1 (audio row a at s + 1 + a), the chunks are appended video
// chunk 0, audio chunk 0, video chunk 1, …, and both end tokens take the last appended chunk's
// largest position + 1. Decode steps take their index + rope_delta (largest position + 1 - prompt
// length) on all streams.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"

namespace omni::model::qwen2_5_omni {

// The placeholder ids and timing fields of thinker_config (transformers' class defaults, which are
// the released values, where a field is absent).
struct ThinkerTokenIds {
  int32_t audio_token = 151646;         // <|AUDIO|>
  int32_t audio_start_token = 151647;   // <|audio_bos|>
  int32_t audio_end_token = 151648;     // <|audio_eos|>
  int32_t image_token = 151655;         // <|IMAGE|>
  int32_t video_token = 151656;         // <|VIDEO|>
  int32_t vision_start_token = 151652;  // <|vision_bos|>
  int32_t vision_end_token = 151653;    // <|vision_eos|>
  double position_id_per_seconds = 25.0;
  double seconds_per_chunk = 2.0;
  int spatial_merge_size = 2;  // thinker_config.vision_config.spatial_merge_size
};

// thinker_config's ids of a Qwen2.5-Omni config.json (`source` names it in errors): audio_token_index
// (or audio_token_id), image_token_index, video_token_index, audio_start_token_id,
// audio_end_token_id, vision_start_token_id, vision_end_token_id, position_id_per_seconds,
// seconds_per_chunk. kLoadFailed naming the field when one has the wrong type.
ThinkerTokenIds parse_thinker_token_ids(const Json& config, const std::string& source);

// An image's or a video's patch grid (t, h, w) and the seconds one temporal patch spans
// (temporal_patch_size / fps for a video; 1 for an image).
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
  double second_per_grid = 1.0;
  int64_t rows(int merge) const { return t * (h / merge) * (w / merge); }
};

// What the towers made of a request's media, in prompt order: per image and video its grid, per
// audio its encoder rows (the tracks of videos included, in the order the audios come, when
// use_audio_in_video).
struct PromptMedia {
  std::vector<VisionGrid> images;
  std::vector<VisionGrid> videos;
  std::vector<int64_t> audio_rows;
  bool use_audio_in_video = false;
};

// get_chunked_index: the [begin, end) slices of the ascending `values` that fall in successive
// ranges of `per_chunk` (a value >= c * per_chunk closes chunk c, one chunk per such value), always
// ending with the slice that runs to the end.
std::vector<std::pair<int64_t, int64_t>> chunked_index(std::span<const double> values, int64_t per_chunk);

// The prompt with its placeholders expanded for `media` (above). kInvalidArgument naming the
// mismatch: another number of placeholders than media, a video with its audio whose placeholder is
// not `<|vision_bos|><|VIDEO|><|vision_eos|>`, no audio left for a video's track.
std::vector<int32_t> expand_placeholders(std::span<const int32_t> prompt, const ThinkerTokenIds& ids,
                                         const PromptMedia& media);

// The three position streams of an expanded prompt, [3 * tokens] (all t, then h, then w), whole
// numbers as floats, and the rope delta. kInvalidArgument when the placeholders do not match
// `media` (a segment running past the prompt, media left over).
struct ThinkerPositions {
  std::vector<float> streams;
  float rope_delta = 0.0f;
};
ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids,
                                   const PromptMedia& media);

}  // namespace omni::model::qwen2_5_omni
