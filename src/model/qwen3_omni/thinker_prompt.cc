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
  if (auto it = thinker->find("position_id_per_seconds"); it != thinker->end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() <= 0) {
      throw_error(ErrorCode::kLoadFailed,
                  "{}: 'thinker_config.position_id_per_seconds' must be a positive number, got {}", source, it->dump());
    }
    ids.position_id_per_seconds = it->get<double>();
  }
  return ids;
}

std::vector<int32_t> expand_placeholders(std::span<const int32_t> prompt, int32_t audio_token,
                                         std::span<const int64_t> counts, const char* kind) {
  const auto placeholders = static_cast<size_t>(std::count(prompt.begin(), prompt.end(), audio_token));
  if (placeholders != counts.size()) {
    throw_error(ErrorCode::kInvalidArgument, "the prompt has {} {} placeholder{} for {} {}{}", placeholders, kind,
                placeholders == 1 ? "" : "s", counts.size(), kind, counts.size() == 1 ? "" : "s");
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

ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids,
                                   std::span<const VisionSegment> images, std::span<const VisionSegment> videos) {
  const size_t n = expanded.size();
  ThinkerPositions out;
  out.streams.resize(3 * n);
  int32_t next = 0;  // the position the next token takes (the running max + 1)
  size_t image = 0, video = 0;
  for (size_t i = 0; i < n;) {
    const int32_t id = expanded[i];
    if (id != ids.image_token && id != ids.video_token) {
      // Text, an audio segment's start and end tokens and its rows, a vision segment's start and end
      // tokens: the next position on all three streams (an audio segment is arange(n) after its start).
      for (int s = 0; s < 3; ++s) out.streams[s * n + i] = next;
      ++next;
      ++i;
      continue;
    }
    const bool is_image = id == ids.image_token;
    std::span<const VisionSegment> segments = is_image ? images : videos;
    size_t& index = is_image ? image : video;
    const char* kind = is_image ? "image" : "video";
    if (index >= segments.size()) {
      throw_error(ErrorCode::kInvalidArgument, "prompt token {}: more {} placeholders than {}s ({})", i, kind, kind,
                  segments.size());
    }
    const VisionSegment& seg = segments[index++];
    const int64_t rows = seg.rows(), bh = seg.h / seg.merge, bw = seg.w / seg.merge;
    if (i + static_cast<size_t>(rows) > n ||
        std::any_of(expanded.begin() + static_cast<int64_t>(i), expanded.begin() + static_cast<int64_t>(i) + rows,
                    [&](int32_t x) { return x != id; })) {
      throw_error(ErrorCode::kInvalidArgument, "prompt token {}: the {} {} needs {} placeholder rows in a row", i, kind,
                  index - 1, rows);
    }
    const int32_t start = next;
    int32_t top = start;
    size_t row = i;
    for (int64_t k = 0; k < seg.t; ++k) {
      const auto t = static_cast<int32_t>(static_cast<double>(k) * seg.temporal_step);
      for (int64_t r = 0; r < bh; ++r) {
        for (int64_t c = 0; c < bw; ++c, ++row) {
          out.streams[row] = start + t;
          out.streams[n + row] = start + static_cast<int32_t>(r);
          out.streams[2 * n + row] = start + static_cast<int32_t>(c);
          top = std::max({top, start + t, start + static_cast<int32_t>(r), start + static_cast<int32_t>(c)});
        }
      }
    }
    next = top + 1;
    i = row;
  }
  if (image != images.size() || video != videos.size()) {
    throw_error(ErrorCode::kInvalidArgument, "the prompt has placeholders for {} image{} and {} video{}, not {} and {}",
                image, image == 1 ? "" : "s", video, video == 1 ? "" : "s", images.size(), videos.size());
  }
  out.rope_delta = next - static_cast<int32_t>(n);
  return out;
}

}  // namespace omni::model::qwen3_omni
