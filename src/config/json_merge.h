// Recursive merging of JSON objects, the way deploy overlays and overrides combine.
#pragma once

#include <string>

#include "base/json.h"

namespace omni::config {

// Merges `update` into `target`: where both hold an object under the same key the objects are
// merged recursively, otherwise the value from `update` replaces the old one (update wins).
void deep_merge(OrderedJson& target, const OrderedJson& update);

// Serializes `value` for messages and output; invalid UTF-8 in strings (YAML accepts any bytes)
// is replaced instead of throwing. `indent` < 0 prints one line.
std::string json_text(const OrderedJson& value, int indent = -1);

// Whether `value` nests objects/arrays more than `limit` levels deep. Iterative, so it is safe on
// input of any depth (deep_merge and the deploy loader recurse and must not see such input).
bool nests_deeper_than(const OrderedJson& value, int limit);

}  // namespace omni::config
