#include "config/json_merge.h"

#include <utility>
#include <vector>

namespace omni::config {

void deep_merge(OrderedJson& target, const OrderedJson& update) {
  if (!target.is_object() || !update.is_object()) {
    target = update;
    return;
  }
  for (const auto& [key, value] : update.items()) {
    auto it = target.find(key);
    if (it != target.end() && it->is_object() && value.is_object()) {
      deep_merge(*it, value);
    } else {
      target[key] = value;
    }
  }
}

std::string json_text(const OrderedJson& value, int indent) {
  return value.dump(indent, ' ', false, OrderedJson::error_handler_t::replace);
}

bool nests_deeper_than(const OrderedJson& value, int limit) {
  std::vector<std::pair<const OrderedJson*, int>> pending{{&value, 0}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    if (depth + 1 > limit) return true;
    for (const auto& item : *node) pending.emplace_back(&item, depth + 1);
  }
  return false;
}

}  // namespace omni::config
