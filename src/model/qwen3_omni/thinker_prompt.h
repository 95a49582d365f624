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
// patch k, block row i and block column j takes (s + k * second_per_grid * position_id_per_seconds,
// s + i, s + j) (second_per_grid 1 for an image, whose t is 1; for a video temporal_patch_size /
// fps, so the temporal positions are fractional when that times position_id_per_seconds is not
// whole: 2 / 1.5 x 13 = 17.33), computed in float32 as transformers does; the end token takes the
// segment's largest position + 1. Positions are therefore floats; decode steps take their index +
// the rope delta (largest position + 1 - prompt length, also a float) on all streams.
//
// A video with its audio track (use_audio_in_video) is one segment `<|vision_start|><|audio_start|>`
// … `<|audio_end|><|vision_end|>` whose rows are the video's rows and the audio's interleaved by
// time, as Qwen3OmniMoeProcessor.replace_multimodal_special_tokens orders them: video row of temporal
// patch k is at time k * second_per_grid * position_id_per_seconds, audio row a at time a, and the
// next row is the video's while its time is <= the audio's; the rest of whichever outlasts the
// other follows. The two start tokens take the next two positions, s the one after; audio row a
// takes s + a on all streams, video rows as above. The two end tokens take m + 1 and m + 2, m being
// the largest position of the rows after the last row of the kind that ran out first (get_rope_index
// takes the maximum of its last block, that tail, not of the whole segment).
#pragma once

#include <cstdint>
#include <filesystem>
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
  int32_t vision_end_token = 151653;
  int32_t audio_end_token = 151670;
  // thinker_config.position_id_per_seconds: temporal positions per second of video (transformers'
  // class default 25 when the field is absent; the released checkpoints set 13).
  double position_id_per_seconds = 25.0;
};

// thinker_config's ids of a Qwen3-Omni config.json (the class defaults where a field is absent).
// kLoadFailed naming the field when it is not an integer.
ThinkerTokenIds parse_thinker_token_ids(const Json& config, const std::string& source);
// <|vision_end|> and <|audio_end|> have no config field (transformers' processor takes them from its
// tokenizer): the ids that the checkpoint's tokenizer_config.json (`dir`) lists for them in
// added_tokens_decoder, else the released vocabulary's (the defaults above). kLoadFailed when a key
// there is not an id.
void read_end_token_ids(const std::filesystem::path& dir, ThinkerTokenIds& ids);

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

// An image's or a video's rows in the prompt: its grid of patches (t, h, w), the merge, the seconds
// a temporal patch spans (1 for an image; temporal_patch_size / fps for a video) and, for a video
// whose audio track is interleaved with it (use_audio_in_video), the audio encoder's rows of that
// track (0: none).
struct VisionSegment {
  int64_t t = 1, h = 0, w = 0;
  int merge = 2;
  double second_per_grid = 1.0;
  int64_t audio_rows = 0;
  int64_t rows() const { return t * (h / merge) * (w / merge); }
};

// The video rows (true) and audio rows (false) of a video segment with its audio track, in the
// processor's interleaved order (above); `position_id_per_seconds` as in ThinkerTokenIds.
std::vector<bool> interleave_video_audio(const VisionSegment& video, double position_id_per_seconds);

// `prompt` (its audio placeholders already expanded) with its k-th `<|image_pad|>` or `<|video_pad|>`
// (`token`) expanded for segments[k]: rows() copies, or for a segment with audio_rows,
// `<|audio_start|>`, the interleaved video and audio placeholders and `<|audio_end|>` in its place,
// which must then sit between `<|vision_start|>` and `<|vision_end|>`. kInvalidArgument naming the
// mismatch.
std::vector<int32_t> expand_vision_placeholders(std::span<const int32_t> prompt, const ThinkerTokenIds& ids,
                                                int32_t token, std::span<const VisionSegment> segments,
                                                const char* kind);

// The three position streams of an expanded prompt, [3 * tokens] (all t, then h, then w), and
// the rope delta (largest position + 1 - tokens) that decode steps add to their index. `images` and
// `videos` describe the prompt's image and video segments in order. kInvalidArgument when the
// placeholders do not match them (a segment's rows cut short, more segments than described).
struct ThinkerPositions {
  std::vector<float> streams;
  float rope_delta = 0.0f;
};
ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids,
                                   std::span<const VisionSegment> images = {},
                                   std::span<const VisionSegment> videos = {});

}  // namespace omni::model::qwen3_omni
