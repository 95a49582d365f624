#include "model/qwen3_omni/thinker_prompt.h"

#include <algorithm>
#include <string>

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

void read_end_token_ids(const std::filesystem::path& dir, ThinkerTokenIds& ids) {
  const std::filesystem::path path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return;
  const Json config = read_json_file(path);
  auto added = config.find("added_tokens_decoder");
  if (added == config.end() || !added->is_object()) return;
  for (const auto& [id, token] : added->items()) {
    if (!token.is_object() || !token.contains("content") || !token["content"].is_string()) continue;
    const std::string& content = token["content"].get_ref<const std::string&>();
    int32_t* slot = content == "<|vision_end|>"  ? &ids.vision_end_token
                    : content == "<|audio_end|>" ? &ids.audio_end_token
                                                 : nullptr;
    if (slot == nullptr) continue;
    try {
      *slot = static_cast<int32_t>(std::stol(id));
    } catch (const std::exception&) {
      throw_error(ErrorCode::kLoadFailed, "{}: added_tokens_decoder key '{}' of {} is not a token id", path.string(),
                  id, content);
    }
  }
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

std::vector<bool> interleave_video_audio(const VisionSegment& video, double position_id_per_seconds) {
  const int64_t per_t = (video.h / video.merge) * (video.w / video.merge);
  std::vector<bool> order;
  order.reserve(static_cast<size_t>(video.rows() + video.audio_rows));
  int64_t v = 0, a = 0;
  const int64_t vn = video.rows(), an = video.audio_rows;
  // The processor's float64 times: (k * second_per_grid) * position_id_per_seconds against a.
  while (v < vn && a < an) {
    const double time = static_cast<double>(v / per_t) * video.second_per_grid * position_id_per_seconds;
    if (time <= static_cast<double>(a)) {
      order.push_back(true);
      ++v;
    } else {
      order.push_back(false);
      ++a;
    }
  }
  order.insert(order.end(), static_cast<size_t>(vn - v), true);
  order.insert(order.end(), static_cast<size_t>(an - a), false);
  return order;
}

std::vector<int32_t> expand_vision_placeholders(std::span<const int32_t> prompt, const ThinkerTokenIds& ids,
                                                int32_t token, std::span<const VisionSegment> segments,
                                                const char* kind) {
  const auto placeholders = static_cast<size_t>(std::count(prompt.begin(), prompt.end(), token));
  if (placeholders != segments.size()) {
    throw_error(ErrorCode::kInvalidArgument, "the prompt has {} {} placeholder{} for {} {}{}", placeholders, kind,
                placeholders == 1 ? "" : "s", segments.size(), kind, segments.size() == 1 ? "" : "s");
  }
  std::vector<int32_t> out;
  size_t next = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] != token) {
      out.push_back(prompt[i]);
      continue;
    }
    const VisionSegment& seg = segments[next++];
    if (seg.audio_rows == 0) {
      out.insert(out.end(), static_cast<size_t>(seg.rows()), token);
      continue;
    }
    if (i == 0 || prompt[i - 1] != ids.vision_start_token || i + 1 == prompt.size() ||
        prompt[i + 1] != ids.vision_end_token) {
      throw_error(ErrorCode::kInvalidArgument,
                  "prompt token {}: the {} {} comes with its audio (use_audio_in_video), so its placeholder must be "
                  "<|vision_start|><|video_pad|><|vision_end|>",
                  i, kind, next - 1);
    }
    out.push_back(ids.audio_start_token);
    for (bool video : interleave_video_audio(seg, ids.position_id_per_seconds))
      out.push_back(video ? token : ids.audio_token);
    out.push_back(ids.audio_end_token);
  }
  return out;
}

namespace {

// The positions of one vision segment's rows, starting at prompt index `i` (its first row) with s
// the position after its start token(s), written into `streams`; returns the maximum over the
// block transformers' get_rope_index appends last (the whole segment, or for an interleaved one the
// tail after the last row of the kind that ran out first) and advances i past the rows.
float vision_rows(std::span<const int32_t> expanded, const ThinkerTokenIds& ids, const VisionSegment& seg,
                  int32_t token, float s, size_t& i, std::vector<float>& streams, const char* kind, size_t index) {
  const size_t n = expanded.size();
  const int64_t bh = seg.h / seg.merge, bw = seg.w / seg.merge, per_t = bh * bw;
  const auto total = static_cast<size_t>(seg.rows() + seg.audio_rows);
  const auto is_row = [&](int32_t x) { return x == token || (seg.audio_rows > 0 && x == ids.audio_token); };
  if (i + total > n ||
      !std::all_of(expanded.begin() + static_cast<int64_t>(i), expanded.begin() + static_cast<int64_t>(i + total),
                   is_row) ||
      std::count(expanded.begin() + static_cast<int64_t>(i), expanded.begin() + static_cast<int64_t>(i + total),
                 token) != seg.rows()) {
    throw_error(ErrorCode::kInvalidArgument, "prompt token {}: the {} {} needs {} placeholder rows in a row", i, kind,
                index, total);
  }
  // float32 as transformers: t = (k * float32(second_per_grid)) * position_id_per_seconds, + s.
  const auto spg = static_cast<float>(seg.second_per_grid);
  const auto pps = static_cast<float>(ids.position_id_per_seconds);
  int64_t v = 0, a = 0;
  size_t last_video = 0, last_audio = 0;  // one past the prompt index of each kind's last row
  std::vector<float> row_max(total);
  for (size_t r = 0; r < total; ++r) {
    const size_t at = i + r;
    float t, h, w;
    if (expanded[at] == token) {
      const int64_t k = v / per_t, rc = v % per_t;
      const float step = static_cast<float>(k) * spg;
      t = step * pps + s;
      h = static_cast<float>(rc / bw) + s;
      w = static_cast<float>(rc % bw) + s;
      ++v;
      last_video = r + 1;
    } else {
      t = h = w = static_cast<float>(a) + s;
      ++a;
      last_audio = r + 1;
    }
    streams[at] = t;
    streams[n + at] = h;
    streams[2 * n + at] = w;
    row_max[r] = std::max({t, h, w});
  }
  // The last block: the tail after the kind that ran out first (all rows when there is no audio).
  const size_t tail_begin = seg.audio_rows == 0 ? 0 : std::min(last_video, last_audio);
  const float top = *std::max_element(row_max.begin() + static_cast<int64_t>(tail_begin), row_max.end());
  i += total;
  return top;
}

}  // namespace

ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids,
                                   std::span<const VisionSegment> images, std::span<const VisionSegment> videos) {
  const size_t n = expanded.size();
  ThinkerPositions out;
  out.streams.resize(3 * n);
  // The position the next text token takes is base + count: the last vision block's maximum + 1
  // plus the tokens since (one float32 addition each, as arange(len) + start).
  float base = 0.0f;
  int64_t count = 0;
  size_t image = 0, video = 0;
  const auto text = [&](size_t at) {
    const float p = base + static_cast<float>(count++);
    for (int s = 0; s < 3; ++s) out.streams[s * n + at] = p;
  };
  for (size_t i = 0; i < n;) {
    const int32_t id = expanded[i];
    // A video with its audio: <|vision_start|><|audio_start|> then its interleaved rows.
    const bool audio_in_video = id == ids.audio_start_token && i > 0 && expanded[i - 1] == ids.vision_start_token &&
                                i + 1 < n &&
                                (expanded[i + 1] == ids.video_token || expanded[i + 1] == ids.audio_token) &&
                                video < videos.size() && videos[video].audio_rows > 0;
    if (id != ids.image_token && id != ids.video_token && !audio_in_video) {
      // Text, an audio segment's start and end tokens and its rows, a vision segment's start and end
      // tokens: the next position on all three streams (an audio segment is arange(n) after its start).
      text(i);
      ++i;
      continue;
    }
    if (audio_in_video) {
      text(i);  // the second start token
      ++i;
    }
    const bool is_image = !audio_in_video && id == ids.image_token;
    std::span<const VisionSegment> segments = is_image ? images : videos;
    size_t& index = is_image ? image : video;
    const char* kind = is_image ? "image" : "video";
    if (index >= segments.size()) {
      throw_error(ErrorCode::kInvalidArgument, "prompt token {}: more {} placeholders than {}s ({})", i, kind, kind,
                  segments.size());
    }
    const VisionSegment& seg = segments[index++];
    if (seg.audio_rows > 0 && !audio_in_video) {
      throw_error(ErrorCode::kInvalidArgument,
                  "prompt token {}: the video {} comes with its audio, but its rows do not follow "
                  "<|vision_start|><|audio_start|>",
                  i, index - 1);
    }
    const float top = vision_rows(expanded, ids, seg, is_image ? ids.image_token : ids.video_token,
                                  base + static_cast<float>(count), i, out.streams, kind, index - 1);
    base = top + 1.0f;
    count = 0;
    if (audio_in_video) {
      if (i >= n || expanded[i] != ids.audio_end_token) {
        throw_error(ErrorCode::kInvalidArgument,
                    "prompt token {}: the video {} with its audio must end with <|audio_end|>", i, index - 1);
      }
      text(i);  // <|audio_end|>; <|vision_end|> follows as text
      ++i;
    }
  }
  if (image != images.size() || video != videos.size()) {
    throw_error(ErrorCode::kInvalidArgument, "the prompt has placeholders for {} image{} and {} video{}, not {} and {}",
                image, image == 1 ? "" : "s", video, video == 1 ? "" : "s", images.size(), videos.size());
  }
  // The largest position over the prompt: transformers' llm_positions.max().
  float overall = 0.0f;
  for (float x : out.streams) overall = std::max(overall, x);
  out.rope_delta = overall + 1.0f - static_cast<float>(n);
  return out;
}

}  // namespace omni::model::qwen3_omni
