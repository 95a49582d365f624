#include "model/qwen3_omni/talker_prompt.h"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "base/error.h"

namespace omni::model::qwen3_omni {

using tensor::DType;
using tensor::Tensor;
using Projection = qwen3_tts::Talker::Projection;

namespace {

// Rows [begin, end) of a host float32 [n, w] tensor, copied.
Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t w = t.dim(1);
  Tensor out = Tensor::empty({end - begin, w}, DType::kF32);
  std::copy_n(t.data<float>() + begin * w, (end - begin) * w, out.data<float>());
  return out;
}

// The turns of a thinker prompt: where each <|im_start|> is and the role token after it. The last
// one must be the assistant's (the reply's turn). kInvalidArgument naming the position at fault.
struct Segment {
  int64_t begin = 0;
  int32_t role = 0;
};

std::vector<Segment> prompt_segments(const TalkerConfig& config, std::span<const int32_t> prompt) {
  const qwen3_tts::TalkerConfig& c = config.talker;
  std::vector<Segment> segments;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] != c.im_start_token_id) continue;
    if (i + 1 >= prompt.size()) {
      throw_error(ErrorCode::kInvalidArgument, "talker prompt: <|im_start|> at position {} has no role after it", i);
    }
    const int32_t role = prompt[i + 1];
    if (role != config.system_token_id && role != config.user_token_id && role != c.assistant_token_id) {
      throw_error(ErrorCode::kInvalidArgument,
                  "talker prompt: the role after <|im_start|> at position {} is token {}, not system, user or "
                  "assistant",
                  i, role);
    }
    segments.push_back({static_cast<int64_t>(i), role});
  }
  if (segments.empty()) throw_error(ErrorCode::kInvalidArgument, "talker prompt: the prompt has no <|im_start|>");
  if (segments.back().role != c.assistant_token_id) {
    throw_error(ErrorCode::kInvalidArgument, "talker prompt: the conversation does not end in the assistant's reply");
  }
  return segments;
}

}  // namespace

TalkerPromptSize talker_prompt_size(const TalkerConfig& config, std::span<const int32_t> prompt) {
  const std::vector<Segment> segments = prompt_segments(config, prompt);
  TalkerPromptSize size;
  for (size_t s = 0; s + 1 < segments.size(); ++s) {
    if (segments[s].role == config.user_token_id) size.rows += segments[s + 1].begin - segments[s].begin;
  }
  size.rows += 9;
  size.thinker_rows = segments.back().begin + 4;
  return size;
}

TalkerPositions talker_positions(const TalkerConfig& config, std::span<const int32_t> prompt,
                                 std::span<const float> thinker_streams) {
  TalkerPositions out;
  if (thinker_streams.empty()) return out;
  const size_t n = prompt.size();
  if (thinker_streams.size() != 3 * n) {
    throw_error(ErrorCode::kInvalidArgument, "talker positions: {} thinker positions for a prompt of {} tokens (3 each)",
                thinker_streams.size(), n);
  }
  const std::vector<Segment> segments = prompt_segments(config, prompt);
  std::array<std::vector<float>, 3> streams;
  float next = 0.0f;  // the position of the next text row: the largest so far + 1
  for (size_t s = 0; s + 1 < segments.size(); ++s) {
    if (segments[s].role != config.user_token_id) continue;
    const auto begin = static_cast<size_t>(segments[s].begin), end = static_cast<size_t>(segments[s + 1].begin);
    const float shift = thinker_streams[begin] - next;
    float largest = next - 1.0f;
    for (size_t p = begin; p < end; ++p) {
      for (size_t k = 0; k < 3; ++k) {
        const float value = thinker_streams[k * n + p] - shift;
        streams[k].push_back(value);
        largest = std::max(largest, value);
      }
    }
    next = largest + 1.0f;
  }
  for (int r = 0; r < 9; ++r) {
    for (auto& stream : streams) stream.push_back(next + static_cast<float>(r));
  }
  const size_t rows = streams[0].size();
  for (const auto& stream : streams) out.streams.insert(out.streams.end(), stream.begin(), stream.end());
  out.rope_delta = next + 9.0f - static_cast<float>(rows);
  return out;
}

qwen3_tts::TalkerPrompt build_talker_prompt(const qwen3_tts::Talker& talker, const TalkerConfig& config,
                                            const ThinkerRows& thinker, int32_t speaker_codec_id) {
  const qwen3_tts::TalkerConfig& c = config.talker;
  const int64_t h = talker.hidden_size(), width = c.text_hidden_size;
  const int64_t n = thinker.embeddings.defined() ? thinker.embeddings.dim(0) : 0;
  if (thinker.embeddings.rank() != 2 || thinker.embeddings.dim(1) != width || thinker.accepted_hidden.rank() != 2 ||
      thinker.accepted_hidden.dim(1) != width ||
      thinker.accepted_hidden.dim(0) < std::min<int64_t>(n, static_cast<int64_t>(thinker.prompt_length)) ||
      n > static_cast<int64_t>(thinker.ids.size()) || thinker.prompt_length > thinker.ids.size() ||
      thinker.special_embeddings.shape() != tensor::Shape{3, width}) {
    throw_error(ErrorCode::kInvalidArgument,
                "talker prompt: the thinker's rows must be [rows <= {} ids, {}] embeddings, hidden states of the "
                "prompt's rows and [3, {}] special embeddings",
                thinker.ids.size(), width, width);
  }
  const Tensor specials = talker.project_rows(thinker.special_embeddings, Projection::kText);
  const float* tts_bos = specials.data<float>();
  const float* tts_eos = tts_bos + h;
  const float* tts_pad = tts_bos + 2 * h;

  const std::vector<Segment> segments = prompt_segments(config, thinker.ids.first(thinker.prompt_length));
  std::vector<float> rows;
  qwen3_tts::TalkerPrompt prompt;
  for (size_t s = 0; s < segments.size(); ++s) {
    const int64_t begin = segments[s].begin;
    const int64_t end = s + 1 < segments.size() ? segments[s + 1].begin : n;
    if (segments[s].role == config.user_token_id) {
      // Text rows from the embeddings, multimodal rows from the accepted hidden states, in order.
      auto multimodal = [&](int64_t p) {
        const int32_t id = thinker.ids[static_cast<size_t>(p)];
        return id == config.audio_token_id || id == config.image_token_id || id == config.video_token_id;
      };
      bool any_media = false;
      for (int64_t p = begin; p < end; ++p) any_media = any_media || multimodal(p);
      const Tensor text = talker.project_rows(rows_of(thinker.embeddings, begin, end), Projection::kText);
      const Tensor media =
          any_media ? talker.project_rows(rows_of(thinker.accepted_hidden, begin, end), Projection::kHidden) : Tensor();
      for (int64_t p = begin; p < end; ++p) {
        const float* row = (multimodal(p) ? media : text).data<float>() + (p - begin) * h;
        rows.insert(rows.end(), row, row + h);
      }
      continue;
    }
    if (s + 1 < segments.size()) continue;  // a system turn or an earlier reply
    if (end - begin < 4) {
      throw_error(ErrorCode::kInvalidArgument,
                  "talker prompt: the reply has no first token yet (the assistant segment has {} rows, 4 needed)",
                  end - begin);
    }
    const Tensor a = talker.project_rows(rows_of(thinker.embeddings, begin, end), Projection::kText);
    const float* text[9] = {
        a.data<float>(), a.data<float>() + h,    a.data<float>() + 2 * h, tts_pad, tts_pad, tts_pad, tts_pad,
        tts_bos,         a.data<float>() + 3 * h};
    const int32_t codec[9] = {-1,
                              -1,
                              -1,
                              c.codec_nothink_id,
                              c.codec_think_bos_id,
                              c.codec_think_eos_id,
                              speaker_codec_id,
                              c.codec_pad_id,
                              c.codec_bos_id};
    for (int r = 0; r < 9; ++r) {
      rows.insert(rows.end(), text[r], text[r] + h);
      if (codec[r] >= 0) talker.add_codec_embedding(codec[r], rows.data() + rows.size() - h);
    }
    // The reply's later rows, then tts_eos once the reply is complete.
    const int64_t reply = end - begin - 4, trailing = reply + (thinker.complete ? 1 : 0);
    prompt.trailing = Tensor::empty({trailing, h}, DType::kF32);
    std::copy_n(a.data<float>() + 4 * h, reply * h, prompt.trailing.data<float>());
    if (thinker.complete) std::copy_n(tts_eos, h, prompt.trailing.data<float>() + reply * h);
  }
  const int64_t count = static_cast<int64_t>(rows.size()) / h;
  prompt.rows = Tensor::empty({count, h}, DType::kF32);
  std::copy(rows.begin(), rows.end(), prompt.rows.data<float>());
  prompt.tts_pad = Tensor::empty({h}, DType::kF32);
  std::copy_n(tts_pad, h, prompt.tts_pad.data<float>());
  prompt.text_ids.assign(thinker.ids.begin() + static_cast<std::ptrdiff_t>(thinker.prompt_length), thinker.ids.end());
  return prompt;
}

}  // namespace omni::model::qwen3_omni
