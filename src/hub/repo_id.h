// A Hugging Face Hub model repository named `org/name`, as a user types it on the command line.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace omni::hub {

struct RepoId {
  std::string org;
  std::string name;

  std::string str() const { return org + "/" + name; }
  bool operator==(const RepoId&) const = default;
};

// `text` as a repository id when it has the Hub's shape: exactly one '/', both parts made of
// letters, digits, '-', '_' and '.', neither starting with '-' or '.', no "--" or "..", at most 96
// characters each. nullopt otherwise (a local path such as ./model or /data/x/y is never one).
std::optional<RepoId> parse_repo_id(std::string_view text);

}  // namespace omni::hub
