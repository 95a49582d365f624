// The media of a chat request (vLLM's and the OpenAI API's content parts), decoded for the served
// model: `input_audio` ({"data": base64, "format": "wav"}) and `audio_url` ({"url": …} or the URL
// itself: a `data:` URL with base64 content, an http(s) URL fetched within a time and size limit
// (server/media_fetch.h), or `file://` under --allowed-local-media-path) become
// mono float32 samples at the model's audio input rate (media/audio_decoder.h), in the order the
// parts appear. `image_url` and `video_url` parts ({"url": …} or the URL itself, the same URL kinds)
// become 8-bit RGB pixels (media/visual_decoder.h), a video's frames sampled as the model's processor
// samples them; --limit-mm-per-prompt bounds how many of each modality one request carries.
//
// The result is what the request's additional_information carries under "multi_modal_data" to the
// entry stage, whose model expands each placeholder the chat template wrote for a part
// (model/causal_lm.h's MultimodalPrompt): {"audio": [{"data": base64 of little-endian float32
// samples, "sample_rate": rate, "source": "messages[i].content[j]"}, …], "image": [{"data": base64
// of the RGB bytes, "width": w, "height": h, "source": …}, …], "video": [{"data": base64 of the kept
// frames' RGB bytes one after another, "width", "height", "frames": n, "fps": the kept frames' rate,
// "source": …, and with use_audio_in_video "audio": {"data", "sample_rate"}, the video's audio
// track decoded as an audio part's bytes would be}, …]}.
//
// Errors are the 400 of openai_error.h naming the part at fault (messages[i].content[j]): not
// decodable, too long or too large, a URL that cannot be fetched, a local file outside the
// allowed path, more parts than the limit, or a media part for a model that reads none.
// Threads: the functions are pure; any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "media/audio_decoder.h"
#include "media/visual_decoder.h"

namespace omni::server {

struct ChatMediaOptions {
  int audio_sample_rate = 0;  // the served model's audio input rate; 0: it reads no audio
  bool images = false;        // the served model reads images
  bool videos = false;        // the served model reads video, its frames sampled by video_sampling
  media::VideoSampling video_sampling;
  media::VisualDecodeLimits visual_limits;  // of each image or video part
  // --limit-mm-per-prompt: modality ("audio", "image", "video") -> the most parts one request may
  // carry; a modality not named takes vLLM's default of 999.
  std::map<std::string, int> limit_per_prompt;
  // --allowed-local-media-path: file:// URLs are read only under it; unset: refused.
  std::optional<std::filesystem::path> allowed_local_media_path;
  // Of each part's bytes, and of the request's decoded audio in all (max_seconds).
  media::AudioDecodeLimits audio_limits;
  // http(s) URLs: the time limit (vLLM's VLLM_AUDIO_FETCH_TIMEOUT) and audio_limits.max_bytes.
  std::chrono::milliseconds fetch_timeout{10'000};
  // A request's mm_processor_kwargs.use_audio_in_video (server/mm_processor_kwargs.h): each video's
  // audio track goes with it (counted in audio_limits.max_seconds with the audio parts); a video
  // without one is refused.
  bool use_audio_in_video = false;
};

// Reads --limit-mm-per-prompt's JSON ({"audio": 2, "image": {"count": 1}}). Throws
// omni::Error(kInvalidConfig) naming the flag and the entry at fault.
std::map<std::string, int> parse_limit_mm_per_prompt(const std::string& json);

// The media kinds the served model reads, as content-part kinds ("audio", "image", "video").
std::vector<std::string> readable_media(const ChatMediaOptions& options);

// The decoded media of `messages` (an empty object when there is none). See above for errors.
Json collect_chat_media(const Json& messages, const ChatMediaOptions& options);

}  // namespace omni::server
