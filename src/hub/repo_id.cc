#include "hub/repo_id.h"

#include <algorithm>

namespace omni::hub {

namespace {

bool valid_part(std::string_view part) {
  if (part.empty() || part.size() > 96) return false;
  if (part.front() == '-' || part.front() == '.' || part.back() == '.') return false;
  if (part.find("--") != std::string_view::npos || part.find("..") != std::string_view::npos) return false;
  return std::all_of(part.begin(), part.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

}  // namespace

std::optional<RepoId> parse_repo_id(std::string_view text) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos) return std::nullopt;
  const std::string_view org = text.substr(0, slash);
  const std::string_view name = text.substr(slash + 1);
  if (!valid_part(org) || !valid_part(name)) return std::nullopt;
  return RepoId{std::string(org), std::string(name)};
}

}  // namespace omni::hub
