// A model repository's files at one revision as a folder on disk: downloaded from the Hub into the
// shared cache (cache_layout.h), or, offline, found there. What the CLI calls to turn `org/name`
// into a directory it can load.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "hub/file_selection.h"
#include "hub/hub_environment.h"
#include "hub/repo_id.h"

namespace omni::hub {

struct SnapshotRequest {
  RepoId repo;
  std::string revision = "main";  // a branch, a tag or a commit hash
  FileSet files = FileSet::kPipeline;
  int workers = 8;                    // files downloaded at once
  bool interactive_progress = false;  // progress bars on stderr (it is a terminal)
};

struct Snapshot {
  std::filesystem::path dir;  // {cache}/models--org--name/snapshots/{commit}
  std::string commit;
  std::vector<std::string> files;  // the repository paths now in `dir` that the request wanted
};

// Online: asks the Hub for the revision's commit and files, downloads the wanted ones the cache
// lacks (several at once, resuming .incomplete blobs, checking sizes and LFS sha256s, one process
// per blob), links them into the snapshot and writes refs/{revision}. When the Hub cannot be
// reached at all and the cache has a complete snapshot of the revision, that one is used (with a
// warning). Offline (`env.offline`): cached_snapshot. Throws omni::Error naming the repository, the
// revision, the file and the HTTP status.
Snapshot fetch_snapshot(const HubEnvironment& env, const SnapshotRequest& request);

// The snapshot of the revision from the cache alone. Throws omni::Error(kNotFound) naming what is
// missing (the ref, the snapshot folder, config.json, a weight shard the index lists, a blob a link
// points to), with the command that downloads it.
Snapshot cached_snapshot(const HubEnvironment& env, const SnapshotRequest& request);

}  // namespace omni::hub
