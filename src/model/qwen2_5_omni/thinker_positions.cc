#include "model/qwen2_5_omni/thinker_positions.h"

#include <algorithm>
#include <array>

#include "base/error.h"

namespace omni::model::qwen2_5_omni {

ThinkerTokenIds parse_thinker_token_ids(const Json& config, const std::string& source) {
  ThinkerTokenIds ids;
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object()) return ids;
  const auto read_id = [&](std::initializer_list<const char*> keys, int32_t& out) {
    for (const char* key : keys) {
      auto it = thinker->find(key);
      if (it == thinker->end() || it->is_null()) continue;
      if (!it->is_number_integer()) {
        throw_error(ErrorCode::kLoadFailed, "{}: 'thinker_config.{}' must be a token id, got {}", source, key,
                    it->dump());
      }
      out = it->get<int32_t>();
      return;
    }
  };
  read_id({"audio_token_index", "audio_token_id"}, ids.audio_token);
  read_id({"image_token_index", "image_token_id"}, ids.image_token);
  read_id({"video_token_index", "video_token_id"}, ids.video_token);
  read_id({"audio_start_token_id"}, ids.audio_start_token);
  read_id({"audio_end_token_id"}, ids.audio_end_token);
  read_id({"vision_start_token_id"}, ids.vision_start_token);
  read_id({"vision_end_token_id"}, ids.vision_end_token);
  const auto read_number = [&](const char* key, double& out) {
    auto it = thinker->find(key);
    if (it == thinker->end() || it->is_null()) return;
    if (!it->is_number() || it->get<double>() <= 0) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'thinker_config.{}' must be a positive number, got {}", source, key,
                  it->dump());
    }
    out = it->get<double>();
  };
  read_number("position_id_per_seconds", ids.position_id_per_seconds);
  read_number("seconds_per_chunk", ids.seconds_per_chunk);
  if (auto vision = thinker->find("vision_config"); vision != thinker->end() && vision->is_object()) {
    if (auto merge = vision->find("spatial_merge_size"); merge != vision->end() && !merge->is_null()) {
      if (!merge->is_number_integer() || merge->get<int>() <= 0) {
        throw_error(ErrorCode::kLoadFailed,
                    "{}: 'thinker_config.vision_config.spatial_merge_size' must be a positive integer, got {}", source,
                    merge->dump());
      }
      ids.spatial_merge_size = merge->get<int>();
    }
  }
  return ids;
}

std::vector<std::pair<int64_t, int64_t>> chunked_index(std::span<const double> values, int64_t per_chunk) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  int64_t start = 0, chunk = 1;
  const auto n = static_cast<int64_t>(values.size());
  for (int64_t i = 0; i < n; ++i) {
    if (values[static_cast<size_t>(i)] >= static_cast<double>(chunk * per_chunk)) {
      chunks.emplace_back(start, i);
      start = i;
      ++chunk;
    }
  }
  chunks.emplace_back(start, n);
  return chunks;
}

namespace {

int64_t tokens_per_chunk(const ThinkerTokenIds& ids) {
  return static_cast<int64_t>(ids.position_id_per_seconds * ids.seconds_per_chunk);
}

}  // namespace

std::vector<int32_t> expand_placeholders(std::span<const int32_t> prompt, const ThinkerTokenIds& ids,
                                         const PromptMedia& media) {
  const int merge = ids.spatial_merge_size;
  size_t audio = 0, image = 0, video = 0;
  std::vector<int32_t> out;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const int32_t id = prompt[i];
    if (id == ids.audio_token) {
      if (audio >= media.audio_rows.size()) {
        throw_error(ErrorCode::kInvalidArgument, "prompt token {}: an audio placeholder beyond the {} audio{}", i,
                    media.audio_rows.size(), media.audio_rows.size() == 1 ? "" : "s");
      }
      out.insert(out.end(), static_cast<size_t>(media.audio_rows[audio++]), ids.audio_token);
    } else if (id == ids.image_token) {
      if (image >= media.images.size()) {
        throw_error(ErrorCode::kInvalidArgument, "prompt token {}: an image placeholder beyond the {} image{}", i,
                    media.images.size(), media.images.size() == 1 ? "" : "s");
      }
      out.insert(out.end(), static_cast<size_t>(media.images[image++].rows(merge)), ids.image_token);
    } else if (id == ids.video_token) {
      if (video >= media.videos.size()) {
        throw_error(ErrorCode::kInvalidArgument, "prompt token {}: a video placeholder beyond the {} video{}", i,
                    media.videos.size(), media.videos.size() == 1 ? "" : "s");
      }
      const VisionGrid& grid = media.videos[video++];
      if (!media.use_audio_in_video) {
        out.insert(out.end(), static_cast<size_t>(grid.rows(merge)), ids.video_token);
        continue;
      }
      if (out.empty() || out.back() != ids.vision_start_token || i + 1 >= prompt.size() ||
          prompt[i + 1] != ids.vision_end_token) {
        throw_error(ErrorCode::kInvalidArgument,
                    "prompt token {}: video {} comes with its audio (use_audio_in_video), so its placeholder must be "
                    "<|vision_bos|><|VIDEO|><|vision_eos|>",
                    i, video - 1);
      }
      if (audio >= media.audio_rows.size()) {
        throw_error(ErrorCode::kInvalidArgument, "prompt token {}: video {} has no audio track left ({} audios)", i,
                    video - 1, media.audio_rows.size());
      }
      const int64_t audio_rows = media.audio_rows[audio++];
      // The processor's float64 times: temporal patch k at k * second_per_grid * position_id_per_seconds.
      const int64_t per_t = (grid.h / merge) * (grid.w / merge);
      std::vector<double> video_times, audio_times;
      for (int64_t k = 0; k < grid.t; ++k)
        video_times.insert(video_times.end(), static_cast<size_t>(per_t),
                           static_cast<double>(k) * grid.second_per_grid * ids.position_id_per_seconds);
      for (int64_t a = 0; a < audio_rows; ++a) audio_times.push_back(static_cast<double>(a));
      const auto video_chunks = chunked_index(video_times, tokens_per_chunk(ids));
      const auto audio_chunks = chunked_index(audio_times, tokens_per_chunk(ids));
      out.push_back(ids.audio_start_token);
      for (size_t j = 0; j < std::max(video_chunks.size(), audio_chunks.size()); ++j) {
        if (j < video_chunks.size())
          out.insert(out.end(), static_cast<size_t>(video_chunks[j].second - video_chunks[j].first), ids.video_token);
        if (j < audio_chunks.size())
          out.insert(out.end(), static_cast<size_t>(audio_chunks[j].second - audio_chunks[j].first), ids.audio_token);
      }
      out.push_back(ids.audio_end_token);
    } else {
      out.push_back(id);
    }
  }
  if (audio != media.audio_rows.size() || image != media.images.size() || video != media.videos.size()) {
    throw_error(ErrorCode::kInvalidArgument,
                "the prompt has placeholders for {} audio{}, {} image{} and {} video{}, not {}, {} and {}", audio,
                audio == 1 ? "" : "s", image, image == 1 ? "" : "s", video, video == 1 ? "" : "s",
                media.audio_rows.size(), media.images.size(), media.videos.size());
  }
  return out;
}

namespace {

// get_rope_index's list of position blocks, flattened: each block's rows appended to the streams,
// and the largest position of the latest block (where the next block starts, + 1).
class PositionBlocks {
 public:
  int64_t next_start() const { return any_ ? last_max_ + 1 : 0; }
  // `count` consecutive positions from next_start() on all streams.
  void text(int64_t count) {
    if (count <= 0) return;
    const int64_t s = next_start();
    for (int64_t k = 0; k < count; ++k) row(s + k, s + k, s + k);
    close(s + count - 1);
  }
  // One row (t, h, w) of the block being appended; close() ends the block.
  void row(int64_t t, int64_t h, int64_t w) {
    for (int s = 0; s < 3; ++s) streams_[s].push_back(s == 0 ? t : s == 1 ? h : w);
  }
  void close(int64_t block_max) {
    last_max_ = block_max;
    any_ = true;
  }
  size_t size() const { return streams_[0].size(); }
  const std::array<std::vector<int64_t>, 3>& streams() const { return streams_; }

 private:
  std::array<std::vector<int64_t>, 3> streams_;
  int64_t last_max_ = 0;
  bool any_ = false;
};

// One vision segment's rows, (t, h, w) + start each, in the processor's order.
std::array<std::vector<int64_t>, 3> vision_positions(const VisionGrid& grid, int merge, int64_t start,
                                                     double position_id_per_seconds, bool video) {
  const int64_t bh = grid.h / merge, bw = grid.w / merge;
  std::array<std::vector<int64_t>, 3> out;
  const auto spg = static_cast<float>(grid.second_per_grid);
  const auto pps = static_cast<float>(position_id_per_seconds);
  for (int64_t k = 0; k < grid.t; ++k) {
    // float32 as transformers: (arange(t) * float(second_per_grid)) * position_id_per_seconds, then
    // .long(); an image's is arange(t) * 1 * position_id_per_seconds.
    const int64_t t = video ? static_cast<int64_t>((static_cast<float>(k) * spg) * pps)
                            : static_cast<int64_t>(static_cast<double>(k) * position_id_per_seconds);
    for (int64_t i = 0; i < bh; ++i) {
      for (int64_t j = 0; j < bw; ++j) {
        out[0].push_back(t + start);
        out[1].push_back(i + start);
        out[2].push_back(j + start);
      }
    }
  }
  return out;
}

int64_t block_max(const std::array<std::vector<int64_t>, 3>& rows, int64_t begin, int64_t end) {
  int64_t m = INT64_MIN;
  for (const auto& s : rows)
    for (int64_t r = begin; r < end; ++r) m = std::max(m, s[static_cast<size_t>(r)]);
  return m;
}

size_t find_from(std::span<const int32_t> ids, int32_t token, size_t from, bool remaining) {
  if (!remaining) return ids.size() + 1;
  auto it = std::find(ids.begin() + static_cast<int64_t>(std::min(from, ids.size())), ids.end(), token);
  return it == ids.end() ? ids.size() + 1 : static_cast<size_t>(it - ids.begin());
}

}  // namespace

ThinkerPositions thinker_positions(std::span<const int32_t> expanded, const ThinkerTokenIds& ids,
                                   const PromptMedia& media) {
  const size_t n = expanded.size();
  ThinkerPositions out;
  out.streams.resize(3 * n);
  if (media.images.empty() && media.videos.empty()) {
    for (size_t i = 0; i < n; ++i)
      for (int s = 0; s < 3; ++s) out.streams[s * n + i] = static_cast<float>(i);
    return out;
  }
  const int merge = ids.spatial_merge_size;
  // The segments as get_rope_index counts them: audio starts (video tracks included), and images
  // and videos by the token after each <|vision_bos|>.
  int64_t audios = 0, images = 0, videos = 0;
  for (size_t i = 0; i < n; ++i) {
    if (expanded[i] == ids.audio_start_token) ++audios;
    if (expanded[i] == ids.vision_start_token && i + 1 < n) {
      const int32_t next = expanded[i + 1];
      if (next == ids.image_token) ++images;
      if (next == (media.use_audio_in_video ? ids.audio_start_token : ids.video_token)) ++videos;
    }
  }
  const int64_t segments = images + audios + (media.use_audio_in_video ? 0 : videos);
  PositionBlocks blocks;
  size_t st = 0, audio = 0, image = 0, video = 0;
  int64_t remain_images = images, remain_videos = videos, remain_audios = audios;
  const auto bad = [&](const char* what, size_t index) {
    throw_error(ErrorCode::kInvalidArgument, "prompt token {}: {} {} does not match the media given", st, what, index);
  };
  for (int64_t seg = 0; seg < segments; ++seg) {
    const size_t ed_image = find_from(expanded, ids.image_token, st, remain_images > 0);
    const size_t ed_video = find_from(expanded, ids.video_token, st, remain_videos > 0);
    const size_t ed_audio = find_from(expanded, ids.audio_token, st, remain_audios > 0);
    const size_t min_ed = std::min({ed_image, ed_video, ed_audio});
    if (min_ed > n) bad("a segment", static_cast<size_t>(seg));
    if (min_ed == ed_audio) {
      if (audio >= media.audio_rows.size()) bad("audio", audio);
      const int64_t text_len = static_cast<int64_t>(min_ed - st) - 1;
      const int64_t len = media.audio_rows[audio];
      blocks.text(text_len);
      blocks.text(1);
      blocks.text(len);
      blocks.text(1);
      st += static_cast<size_t>(text_len + 2 + len);
      ++audio;
      --remain_audios;
    } else if (min_ed == ed_image || !media.use_audio_in_video) {
      const bool is_image = min_ed == ed_image;
      const std::vector<VisionGrid>& grids = is_image ? media.images : media.videos;
      size_t& index = is_image ? image : video;
      if (index >= grids.size()) bad(is_image ? "image" : "video", index);
      const int64_t text_len = static_cast<int64_t>(min_ed - st) - 1;
      blocks.text(text_len);
      blocks.text(1);
      const auto rows =
          vision_positions(grids[index], merge, blocks.next_start(), ids.position_id_per_seconds, !is_image);
      const auto len = static_cast<int64_t>(rows[0].size());
      for (int64_t r = 0; r < len; ++r) blocks.row(rows[0][r], rows[1][r], rows[2][r]);
      if (len > 0) blocks.close(block_max(rows, 0, len));
      blocks.text(1);
      st += static_cast<size_t>(text_len + 2 + len);
      ++index;
      --(is_image ? remain_images : remain_videos);
    } else {
      // A video with its audio track.
      if (video >= media.videos.size()) bad("video", video);
      if (audio >= media.audio_rows.size()) bad("audio", audio);
      const int64_t text_len = static_cast<int64_t>(min_ed - st) - 2;
      blocks.text(text_len);
      const int64_t bos = blocks.next_start();
      for (int k = 0; k < 2; ++k) blocks.row(bos, bos, bos);
      blocks.close(bos);
      const int64_t start = blocks.next_start();
      const int64_t audio_len = media.audio_rows[audio];
      const auto video_rows =
          vision_positions(media.videos[video], merge, start, ids.position_id_per_seconds, /*video=*/true);
      std::array<std::vector<int64_t>, 3> audio_rows;
      for (int64_t a = 0; a < audio_len; ++a)
        for (auto& s : audio_rows) s.push_back(a + start);
      std::vector<double> video_t, audio_t;
      for (int64_t t : video_rows[0]) video_t.push_back(static_cast<double>(t - start));
      for (int64_t a = 0; a < audio_len; ++a) audio_t.push_back(static_cast<double>(a));
      const auto video_chunks = chunked_index(video_t, tokens_per_chunk(ids));
      const auto audio_chunks = chunked_index(audio_t, tokens_per_chunk(ids));
      const auto append = [&](const std::array<std::vector<int64_t>, 3>& rows, std::pair<int64_t, int64_t> chunk) {
        for (int64_t r = chunk.first; r < chunk.second; ++r) blocks.row(rows[0][r], rows[1][r], rows[2][r]);
        if (chunk.second > chunk.first) blocks.close(block_max(rows, chunk.first, chunk.second));
      };
      for (size_t j = 0; j < std::max(video_chunks.size(), audio_chunks.size()); ++j) {
        if (j < video_chunks.size()) append(video_rows, video_chunks[j]);
        if (j < audio_chunks.size()) append(audio_rows, audio_chunks[j]);
      }
      const int64_t eos = blocks.next_start();
      for (int k = 0; k < 2; ++k) blocks.row(eos, eos, eos);
      blocks.close(eos);
      st += static_cast<size_t>(text_len + 4 + audio_len + static_cast<int64_t>(video_rows[0].size()));
      ++audio;
      ++video;
      --remain_videos;
      --remain_audios;
    }
  }
  if (st < n) blocks.text(static_cast<int64_t>(n - st));
  if (blocks.size() != n || image != media.images.size() || video != media.videos.size() ||
      audio != media.audio_rows.size()) {
    throw_error(ErrorCode::kInvalidArgument,
                "the prompt's {} tokens take {} positions for {} image{}, {} video{} and {} audio{}, not {} tokens "
                "for {}, {} and {}",
                n, blocks.size(), image, image == 1 ? "" : "s", video, video == 1 ? "" : "s", audio,
                audio == 1 ? "" : "s", n, media.images.size(), media.videos.size(), media.audio_rows.size());
  }
  int64_t top = 0;
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t p = blocks.streams()[s][i];
      out.streams[s * n + i] = static_cast<float>(p);
      top = std::max(top, p);
    }
  }
  out.rope_delta = static_cast<float>(top + 1 - static_cast<int64_t>(n));
  return out;
}

}  // namespace omni::model::qwen2_5_omni
