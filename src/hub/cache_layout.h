// The huggingface_hub cache layout of one model repository, shared with the Python tools:
//
//   {root}/models--{org}--{name}/blobs/{etag}               the file contents, named by their etag
//                                /blobs/{etag}.incomplete    a download in progress (resumable)
//                                /snapshots/{commit}/{file}  relative symlinks to ../../blobs/{etag}
//                                /refs/{revision}            the commit a branch or tag pointed to
//   {root}/.locks/models--{org}--{name}/{etag}.lock          held while a process downloads a blob
//
// A RepoCache only computes paths and edits these entries; it does not talk to the network.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "hub/repo_id.h"

namespace omni::hub {

// "models--{org}--{name}".
std::string repo_folder_name(const RepoId& repo);

// A full 40-character lowercase hexadecimal commit hash.
bool is_commit_hash(std::string_view text);

// Throws omni::Error(kInvalidArgument) naming the repo unless `file` is a relative path inside the
// repository (no empty, "." or ".." parts, no leading '/', no backslash): file names come from the
// server and become paths in the cache.
void check_repo_file_path(const RepoId& repo, std::string_view file);

// Throws omni::Error(kLoadFailed) unless `etag` can name a blob (letters, digits, '-', '_').
void check_etag(const RepoId& repo, std::string_view file, std::string_view etag);

class RepoCache {
 public:
  RepoCache(std::filesystem::path cache_root, RepoId repo);

  const RepoId& repo() const { return repo_; }
  const std::filesystem::path& cache_root() const { return root_; }
  const std::filesystem::path& dir() const { return dir_; }

  std::filesystem::path blob(std::string_view etag) const;
  std::filesystem::path incomplete_blob(std::string_view etag) const;
  std::filesystem::path blob_lock(std::string_view etag) const;
  std::filesystem::path snapshot(std::string_view commit) const;
  std::filesystem::path ref(std::string_view revision) const;

  // The commit refs/{revision} holds, or nullopt when there is no such ref.
  std::optional<std::string> read_ref(std::string_view revision) const;
  // Writes refs/{revision} (atomically: a temporary file renamed over it).
  void write_ref(std::string_view revision, std::string_view commit) const;
  // The commit `revision` names in the cache: the revision itself when it is a commit hash with a
  // snapshot folder, else what refs/{revision} holds. nullopt when neither.
  std::optional<std::string> cached_commit(std::string_view revision) const;

  // Points snapshots/{commit}/{file} at blobs/{etag} with a relative symlink (replacing what was
  // there), creating the folders on the way.
  void link_snapshot_file(std::string_view commit, std::string_view file, std::string_view etag) const;

 private:
  std::filesystem::path root_;
  RepoId repo_;
  std::filesystem::path dir_;
};

}  // namespace omni::hub
