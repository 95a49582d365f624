// The Hub's HTTP API as huggingface_hub uses it, over libcurl:
//   GET  {endpoint}/api/models/{repo}/revision/{revision}?blobs=true  the commit and its file list
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}                   a file's etag and size
//   GET  {endpoint}/{repo}/resolve/{commit}/{file}                   its bytes (redirects followed,
//                                                                    a Range to resume)
// with `Authorization: Bearer <token>` when a token is set (never sent on to another host after a
// redirect). Errors name the repository, the file and the HTTP status: 401/403 say to set HF_TOKEN
// (kUnauthorized), 404 says which of repository, revision or file is missing (kNotFound), a Hub
// that cannot be reached is kUnavailable. One HubClient may be used from several threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hub/hub_environment.h"
#include "hub/repo_id.h"

namespace omni::hub {

// One file of a revision as the Hub lists it.
struct RepoFile {
  std::string path;              // "model.safetensors", "speech_tokenizer/config.json"
  std::optional<uint64_t> size;  // bytes, when the listing had it
  std::string etag;              // the LFS sha256 or the git blob id, when the listing had it
  bool lfs = false;              // stored in LFS: the etag is the file's sha256
};

struct RevisionInfo {
  std::string commit;  // the full commit hash the revision points to
  std::vector<RepoFile> files;
};

// What a HEAD of a file's resolve URL says about it.
struct FileMetadata {
  std::string etag;   // X-Linked-Etag (LFS) or ETag, unquoted
  uint64_t size = 0;  // X-Linked-Size or Content-Length
  bool lfs = false;   // the etag came from X-Linked-Etag (it is the sha256)
};

class HubClient {
 public:
  explicit HubClient(HubEnvironment environment);

  const HubEnvironment& environment() const { return env_; }

  RevisionInfo revision_info(const RepoId& repo, const std::string& revision) const;
  FileMetadata file_metadata(const RepoId& repo, const std::string& commit, const std::string& file) const;

  // Downloads `file` into `partial`, resuming from the bytes already there with a Range request,
  // until it holds `size` bytes. A dropped connection or a server error (5xx, 429) is retried
  // (resuming again) a few times before it is an error. `on_bytes` is called with each chunk's
  // size as it arrives. Returns early with an error when `*cancel` becomes true. The response's
  // X-Linked-Etag / ETag must be `etag` and its size `size`, or it is kLoadFailed.
  void download(const RepoId& repo, const std::string& commit, const std::string& file, const std::string& etag,
                uint64_t size, const std::filesystem::path& partial, const std::function<void(uint64_t)>& on_bytes,
                const std::atomic<bool>* cancel) const;

  // {endpoint}/{repo}/resolve/{revision}/{file}, each path part percent-encoded.
  std::string resolve_url(const RepoId& repo, const std::string& revision, const std::string& file) const;

 private:
  HubEnvironment env_;
};

// "sha256" from `"sha256"` or `W/"sha256"`.
std::string normalized_etag(std::string etag);

}  // namespace omni::hub
