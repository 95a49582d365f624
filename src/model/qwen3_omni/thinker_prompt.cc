#include "model/qwen3_omni/thinker_prompt.h"

#include <algorithm>

#include "base/error.h"

namespace omni::model::qwen3_omni {

ThinkerTokenIds parse_thinker_token_ids(const Json& config, const std::string& source) {
  ThinkerTokenIds ids;
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object()) return ids;
  const auto read = [&](const char* key, int32_t& out) {
    auto it = thinker->find(key);
    if (it == thinker->end() || it->is_null()) return;
    if (!it->is_number_integer()) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'thinker_config.{}' must be a token id, got {}", source, key,
                  it->dump());
    }
    out = it->get<int32_t>();
  };
  read("audio_token_id", ids.audio_token);
  read("audio_start_token_id", ids.audio_start_token);
  read("image_token_id", ids.image_token);
  read("video_token_id", ids.video_token);
  read("vision_start_token_id", ids.vision_start_token);
  return ids;
}

std::vector<int32_t> expand_audio_placeholders(std::span<const int32_t> prompt, int32_t audio_token,
                                               std::span<const int64_t> counts) {
  const auto placeholders = static_cast<size_t>(std::count(prompt.begin(), prompt.end(), audio_token));
  if (placeholders != counts.size()) {
    throw_error(ErrorCode::kInvalidArgument, "the prompt has {} audio placeholder{} for {} audio{}", placeholders,
                placeholders == 1 ? "" : "s", counts.size(), counts.size() == 1 ? "" : "s");
  }
  std::vector<int32_t> out;
  size_t next = 0;
  for (int32_t id : prompt) {
    if (id != audio_token) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), static_cast<size_t>(counts[next++]), audio_token);
  }
  return out;
}

std::vector<int32_t> audio_rows(std::span<const int32_t> expanded, int32_t audio_token) {
  std::vector<int32_t> rows;
  for (size_t i = 0; i < expanded.size(); ++i) {
    if (expanded[i] == audio_token) rows.push_back(static_cast<int32_t>(i));
  }
  return rows;
}

ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids) {
  const size_t n = expanded.size();
  ThinkerPositions out;
  out.streams.resize(3 * n);
  int32_t next = 0;  // the position the next token takes (the running max + 1)
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = expanded[i];
    if (id == ids.image_token || id == ids.video_token) {
      throw_error(ErrorCode::kUnsupported, "prompt token {}: image and video placeholders are not read yet", i);
    }
    // Text, an audio segment's start and end tokens and its rows all take the next position on
    // all three streams: an audio segment is arange(n) after its start token.
    for (int s = 0; s < 3; ++s) out.streams[s * n + i] = next;
    ++next;
  }
  out.rope_delta = next - static_cast<int32_t>(n);
  return out;
}

}  // namespace omni::model::qwen3_omni
