// JSON text for messages (errors, log lines) about values that came from outside.
#pragma once

#include <string>

#include "base/json.h"

namespace omni {

// `value` as compact JSON text: strings holding invalid UTF-8, which a peer or a client may send,
// are written with U+FFFD instead of throwing as dump() does.
template <typename J>
std::string dump_for_message(const J& value) {
  return value.dump(-1, ' ', false, J::error_handler_t::replace);
}

}  // namespace omni
