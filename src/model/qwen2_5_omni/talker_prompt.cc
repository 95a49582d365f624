#include "model/qwen2_5_omni/talker_prompt.h"

#include <algorithm>

#include "base/error.h"

namespace omni::model::qwen2_5_omni {

TalkerPrompt build_talker_prompt(const Talker& talker, const ThinkerOutput& thinker, const TalkerTextRows& text) {
  const int64_t w = thinker.width;
  const auto n = static_cast<int64_t>(thinker.ids.size());
  const auto l = static_cast<int64_t>(thinker.prompt_length);
  if (w != talker.config().embedding_size) {
    throw_error(ErrorCode::kInvalidArgument, "thinker rows of width {}, the talker reads {}", w,
                talker.config().embedding_size);
  }
  if (l == 0 || n <= l) {
    throw_error(ErrorCode::kInvalidArgument,
                "the talker needs the thinker's prompt and at least its first reply row: {} rows for a prompt of {}", n,
                l);
  }
  if (thinker.embeddings.size() != static_cast<size_t>(n * w) || thinker.hidden.size() != static_cast<size_t>(n * w)) {
    throw_error(ErrorCode::kInvalidArgument, "thinker rows: {} ids with {} embedding and {} hidden values of width {}",
                n, thinker.embeddings.size(), thinker.hidden.size(), w);
  }
  if (!thinker.positions.empty() && thinker.positions.size() != static_cast<size_t>(3 * l)) {
    throw_error(ErrorCode::kInvalidArgument, "thinker positions: {} values for a prompt of {} (3 per token)",
                thinker.positions.size(), l);
  }
  for (const auto* row : {&text.speaker_bos, &text.text_eos, &text.text_pad}) {
    if (row->size() != static_cast<size_t>(w)) {
      throw_error(ErrorCode::kInvalidArgument, "a talker text row of {} values, expected {}", row->size(), w);
    }
  }
  TalkerPrompt p;
  p.rows = tensor::Tensor::empty({l + 2, w}, tensor::DType::kF32);
  float* out = p.rows.data<float>();
  // Row r of the thinker: embedding + hidden.
  const auto thinker_row = [&](int64_t r, float* to) {
    for (int64_t i = 0; i < w; ++i) to[i] = thinker.embeddings[r * w + i] + thinker.hidden[r * w + i];
  };
  for (int64_t r = 0; r < l; ++r) thinker_row(r, out + r * w);
  std::copy(text.speaker_bos.begin(), text.speaker_bos.end(), out + l * w);
  talker.add_codec_embedding(talker.config().codec_pad, out + l * w);
  thinker_row(l, out + (l + 1) * w);
  talker.add_codec_embedding(talker.config().codec_bos, out + (l + 1) * w);
  p.reply_rows = n - l;
  p.reply.resize(static_cast<size_t>((p.reply_rows - 1) * w));
  for (int64_t r = l + 1; r < n; ++r) thinker_row(r, p.reply.data() + (r - l - 1) * w);

  if (!thinker.positions.empty()) {
    const int64_t rows = l + 2;
    p.mrope_positions.resize(static_cast<size_t>(3 * rows));
    float top = 0.0f;
    for (int s = 0; s < 3; ++s) {
      const float* from = thinker.positions.data() + s * l;
      float* to = p.mrope_positions.data() + s * rows;
      std::copy(from, from + l, to);
      to[l] = from[l - 1] + 1.0f;
      to[l + 1] = from[l - 1] + 2.0f;
      top = std::max(top, *std::max_element(to, to + rows));
    }
    p.rope_delta = top + 1.0f - static_cast<float>(rows);
  }
  return p;
}

const float* talker_text_row(const TalkerPrompt& prompt, const TalkerTextRows& text, int64_t j) {
  const int64_t w = static_cast<int64_t>(text.text_pad.size());
  if (j < prompt.reply_rows - 1) return prompt.reply.data() + j * w;
  if (j == prompt.reply_rows - 1) return text.text_eos.data();
  return text.text_pad.data();
}

}  // namespace omni::model::qwen2_5_omni
