#include "model/thinker_payload.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace omni::model {

namespace {

constexpr char kMagic[4] = {'Q', 'O', 'T', 'R'};
constexpr size_t kHeaderWords = 7;

template <typename T>
void append(std::vector<uint8_t>& out, std::span<const T> values) {
  const size_t at = out.size();
  out.resize(at + values.size_bytes());
  if (!values.empty()) std::memcpy(out.data() + at, values.data(), values.size_bytes());
}

}  // namespace

std::vector<uint8_t> encode_thinker_payload(const DownstreamRows& rows, std::span<const float> specials,
                                            bool reply_hidden) {
  const auto count = static_cast<int32_t>(rows.token_ids.size());
  const int32_t width = rows.hidden_size;
  const int32_t hidden_rows = reply_hidden ? count : std::clamp(rows.prompt_length - rows.first_position, 0, count);
  const int32_t special_rows =
      rows.first_position == 0 && width > 0 ? static_cast<int32_t>(specials.size()) / width : 0;
  const int32_t position_rows = rows.first_position == 0 && !rows.prompt_positions.empty() ? rows.prompt_length : 0;
  if (rows.embeddings.size() != static_cast<size_t>(count) * width ||
      rows.prompt_positions.size() != (position_rows > 0 ? 3 * static_cast<size_t>(position_rows) : 0) ||
      rows.hidden.size() != static_cast<size_t>(count) * width ||
      static_cast<size_t>(special_rows) * width != (rows.first_position == 0 ? specials.size() : 0)) {
    throw_error(ErrorCode::kInternal,
                "thinker payload: {} rows of width {} with {} and {} values, {} specials and {} positions", count,
                width, rows.embeddings.size(), rows.hidden.size(), specials.size(), rows.prompt_positions.size());
  }
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  const int32_t header[kHeaderWords] = {rows.first_position, rows.prompt_length, count,        width,
                                        hidden_rows,         special_rows,       position_rows};
  append(out, std::span<const int32_t>(header));
  append(out, rows.token_ids);
  append(out, rows.embeddings);
  append(out, rows.hidden.first(static_cast<size_t>(hidden_rows) * width));
  if (special_rows > 0) append(out, specials);
  append(out, rows.prompt_positions);
  return out;
}

ThinkerPayload decode_thinker_payload(std::span<const uint8_t> bytes) {
  const size_t head = 4 + kHeaderWords * sizeof(int32_t);
  if (bytes.size() < head || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    throw_error(ErrorCode::kInvalidArgument, "thinker payload: {} bytes that do not start with a QOTR header",
                bytes.size());
  }
  int32_t h[kHeaderWords];
  std::memcpy(h, bytes.data() + 4, sizeof(h));
  const int32_t first = h[0], prompt = h[1], count = h[2], width = h[3], hidden_rows = h[4], special_rows = h[5],
                position_rows = h[6];
  if (first < 0 || prompt < 0 || count < 0 || width <= 0 || hidden_rows < 0 || hidden_rows > count ||
      special_rows < 0 || (special_rows != 0 && first != 0) ||
      (position_rows != 0 && (position_rows != prompt || first != 0))) {
    throw_error(ErrorCode::kInvalidArgument,
                "thinker payload: bad header (first position {}, prompt {}, rows {}, width {}, hidden rows {}, "
                "specials {}, position rows {})",
                first, prompt, count, width, hidden_rows, special_rows, position_rows);
  }
  const size_t floats =
      (static_cast<size_t>(count) + static_cast<size_t>(hidden_rows) + static_cast<size_t>(special_rows)) *
          static_cast<size_t>(width) +
      3 * static_cast<size_t>(position_rows);
  const size_t expected = head + static_cast<size_t>(count) * sizeof(int32_t) + floats * sizeof(float);
  if (bytes.size() != expected) {
    throw_error(ErrorCode::kInvalidArgument, "thinker payload: {} bytes, its header says {}", bytes.size(), expected);
  }
  ThinkerPayload p;
  p.first_position = first;
  p.prompt_length = prompt;
  p.width = width;
  const uint8_t* at = bytes.data() + head;
  auto take = [&at]<typename T>(std::vector<T>& out, size_t n) {
    out.resize(n);
    if (n > 0) std::memcpy(out.data(), at, n * sizeof(T));
    at += n * sizeof(T);
  };
  take(p.ids, static_cast<size_t>(count));
  take(p.embeddings, static_cast<size_t>(count) * width);
  take(p.hidden, static_cast<size_t>(hidden_rows) * width);
  take(p.specials, static_cast<size_t>(special_rows) * width);
  take(p.positions, 3 * static_cast<size_t>(position_rows));
  return p;
}

}  // namespace omni::model
