// Stop strings, matched on the detokenized output text as vLLM does: after each new piece of text,
// each stop string (in the order given; the first that matches wins) is searched for in the region
// where a match could involve the new text, so a stop string spanning several tokens is found on
// the token that completes it.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace omni::engine {

struct StopStringMatch {
  size_t stop_index = 0;  // which stop string matched
  // The length the output text is cut to: before the stop string, or after it with
  // include_stop_str_in_output; std::string_view::npos when nothing is cut.
  size_t truncate_to = std::string_view::npos;
};

// `text` is the whole output text so far, whose last `num_new_bytes` bytes just arrived.
std::optional<StopStringMatch> find_stop_string(std::string_view text, size_t num_new_bytes,
                                                std::span<const std::string> stop, bool include_stop_str_in_output);

// How many trailing bytes of the output text a stream must hold back while unfinished, so that text
// which may turn out to begin a stop string is never sent (vLLM's stop buffer): the longest stop
// string minus one, or 0 when stop strings are part of the output anyway.
size_t stop_string_holdback(std::span<const std::string> stop, bool include_stop_str_in_output);

}  // namespace omni::engine
