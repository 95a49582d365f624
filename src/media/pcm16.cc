#include "media/pcm16.h"

namespace omni::media {

void append_pcm16_le(std::span<const float> samples, std::string& out) {
  size_t at = out.size();
  out.resize(at + samples.size() * 2);
  for (float sample : samples) {
    auto value = static_cast<uint16_t>(to_pcm16(sample));
    out[at++] = static_cast<char>(value & 0xff);
    out[at++] = static_cast<char>(value >> 8);
  }
}

}  // namespace omni::media
