// A chat request's `mm_processor_kwargs` (vLLM's per-request overrides of the model's multimodal
// processor), checked against what the served model's processors take. For Qwen3-Omni those are the
// keys transformers' Qwen3OmniMoeProcessor routes to its processors (ProcessorMixin._merge_kwargs
// sends a flat kwarg to every modality whose kwargs declare it):
//
//   min_pixels, max_pixels   images and videos (both Qwen2-VL processors take them); they count only
//                            together, as those processors read them, and then replace both [min,
//                            max] pixel budgets; applied by the stage (additional_information.
//                            mm_processor_kwargs)
//   fps, min_frames,         videos: how the server samples a video's frames (media/visual_decoder.h);
//   max_frames               the sampled rate then sets the seconds per temporal patch (2 / fps)
//   use_audio_in_video       videos: the server also decodes each video's audio track and sends it
//                            with the video, and the stage interleaves its audio rows with the
//                            video's rows by time
//
// A key the served model does not take (any key, for a model that reads no images or video) or a
// value of the wrong type is a 400 naming `mm_processor_kwargs.<key>` and the keys it takes.
// Threads: pure; any thread.
#pragma once

#include <cstdint>
#include <optional>

#include "base/json.h"
#include "server/chat_media.h"

namespace omni::server {

struct MmProcessorKwargs {
  std::optional<int64_t> min_pixels, max_pixels;
  std::optional<double> fps;
  std::optional<int> min_frames, max_frames;
  bool use_audio_in_video = false;
  // The kwargs the entry stage applies (additional_information.mm_processor_kwargs); empty for none.
  Json stage_kwargs() const;
};

// `value` (the request's mm_processor_kwargs; null or absent: none) for a model whose media are
// `options`. Throws the 400 of openai_error.h naming the key at fault.
MmProcessorKwargs parse_mm_processor_kwargs(const Json* value, const ChatMediaOptions& options);

// `options` with the sampling kwargs (fps, min_frames, max_frames) and use_audio_in_video applied.
ChatMediaOptions with_processor_kwargs(const ChatMediaOptions& options, const MmProcessorKwargs& kwargs);

}  // namespace omni::server
