#include "hub/snapshot.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/json.h"
#include "hub/blob_lock.h"
#include "hub/cache_layout.h"
#include "hub/download_progress.h"
#include "hub/hub_client.h"
#include "hub/sha256.h"

namespace omni::hub {

namespace fs = std::filesystem;

namespace {

bool is_sha256(std::string_view etag) {
  return etag.size() == 64 &&
         std::all_of(etag.begin(), etag.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string download_command(const SnapshotRequest& request) {
  return request.revision == "main"
             ? fmt::format("omnistage download {}", request.repo.str())
             : fmt::format("omnistage download {} --revision {}", request.repo.str(), request.revision);
}

std::string missing_hint(const HubEnvironment& env, const SnapshotRequest& request) {
  return env.offline ? fmt::format(" (HF_HUB_OFFLINE is set: run `{}` once online, with the same cache)",
                                   download_command(request))
                     : fmt::format(" (run `{}`)", download_command(request));
}

// The files in the snapshot folder (repository paths), and the links among them whose blob is gone.
void list_snapshot(const fs::path& dir, std::vector<std::string>& present, std::vector<std::string>& dangling) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path relative = it->path().lexically_relative(dir);
    if (it->is_directory(ec)) continue;
    if (fs::is_regular_file(it->path(), ec)) {
      present.push_back(relative.generic_string());
    } else if (it->is_symlink(ec)) {
      dangling.push_back(relative.generic_string());
    }
  }
  std::sort(present.begin(), present.end());
}

struct FileJob {
  std::string path;
  std::string etag;
  std::optional<uint64_t> size;
  bool lfs = false;
};

class SnapshotDownload {
 public:
  SnapshotDownload(const HubClient& client, const RepoCache& cache, const std::string& commit,
                   DownloadProgress& progress)
      : client_(client), cache_(cache), commit_(commit), progress_(progress) {}

  void run(std::vector<FileJob> jobs, int workers) {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < jobs.size() && !cancel_; i = next++) {
        try {
          fetch(jobs[i]);
        } catch (...) {
          std::lock_guard lock(mutex_);
          if (!error_) error_ = std::current_exception();
          cancel_ = true;
        }
      }
    };
    const int count = std::clamp(workers, 1, static_cast<int>(jobs.size()));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) threads.emplace_back(work);
    for (std::thread& thread : threads) thread.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  bool have_blob(const fs::path& blob, uint64_t size) const {
    std::error_code ec;
    return fs::is_regular_file(blob, ec) && fs::file_size(blob, ec) == size && !ec;
  }

  void fetch(FileJob& job) {
    const RepoId& repo = cache_.repo();
    if (job.etag.empty() || !job.size) {
      const FileMetadata metadata = client_.file_metadata(repo, commit_, job.path);
      job.etag = metadata.etag;
      job.size = metadata.size;
      job.lfs = metadata.lfs;
    }
    check_etag(repo, job.path, job.etag);
    const uint64_t size = *job.size;
    const fs::path blob = cache_.blob(job.etag);
    bool downloaded = false;
    if (!have_blob(blob, size)) {
      BlobLock lock(cache_.blob_lock(job.etag), fmt::format("{} {}", repo.str(), job.path));
      // Another process may have finished it while this one waited for the lock.
      if (!have_blob(blob, size)) {
        download_blob(job, blob, size);
        downloaded = true;
      }
    }
    if (!downloaded) progress_.finish_file(job.path, size, false);
    cache_.link_snapshot_file(commit_, job.path, job.etag);
  }

  void download_blob(const FileJob& job, const fs::path& blob, uint64_t size) {
    const RepoId& repo = cache_.repo();
    const fs::path partial = cache_.incomplete_blob(job.etag);
    fs::create_directories(partial.parent_path());
    std::error_code ec;
    uint64_t resumed = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
    if (ec || resumed > size) resumed = 0;
    if (!fs::exists(partial, ec)) std::ofstream(partial, std::ios::binary | std::ios::app).flush();
    progress_.start_file(job.path, size, resumed);
    client_.download(
        repo, commit_, job.path, job.etag, size, partial, [&](uint64_t bytes) { progress_.add_bytes(job.path, bytes); },
        &cancel_);
    if (job.lfs || is_sha256(job.etag)) {
      const std::string digest = sha256_file_hex(partial);
      if (digest != job.etag) {
        fs::remove(partial, ec);
        throw_error(ErrorCode::kLoadFailed,
                    "{}: file '{}': the downloaded bytes have sha256 {}, the Hub lists {}; the partial download was "
                    "removed, run the command again",
                    repo.str(), job.path, digest, job.etag);
      }
    }
    fs::rename(partial, blob);
    progress_.finish_file(job.path, size, true);
  }

  const HubClient& client_;
  const RepoCache& cache_;
  const std::string& commit_;
  DownloadProgress& progress_;
  std::atomic<bool> cancel_{false};
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace

Snapshot cached_snapshot(const HubEnvironment& env, const SnapshotRequest& request) {
  const RepoCache cache(env.cache_root, request.repo);
  const std::string repo = request.repo.str();
  const std::optional<std::string> commit = cache.cached_commit(request.revision);
  if (!commit) {
    throw_error(ErrorCode::kNotFound, "{}: revision '{}' is not in the Hub cache {} (no {}){}", repo, request.revision,
                env.cache_root.string(), cache.ref(request.revision).string(), missing_hint(env, request));
  }
  Snapshot snapshot{cache.snapshot(*commit), *commit, {}};
  std::error_code ec;
  if (!fs::is_directory(snapshot.dir, ec)) {
    throw_error(ErrorCode::kNotFound, "{}: revision '{}' is commit {}, but the Hub cache has no folder {}{}", repo,
                request.revision, *commit, snapshot.dir.string(), missing_hint(env, request));
  }
  std::vector<std::string> present;
  std::vector<std::string> dangling;
  list_snapshot(snapshot.dir, present, dangling);
  std::vector<std::string> missing;
  for (const std::string& file : dangling) {
    if (wanted_file(file, request.files)) missing.push_back(file);
  }
  const std::set<std::string> have(present.begin(), present.end());
  if (!have.contains("config.json") && !have.contains("model_index.json")) missing.push_back("config.json");
  if (request.files == FileSet::kPipeline) {
    bool any_weights = false;
    for (const std::string& file : present) {
      if (file.ends_with(".safetensors")) any_weights = true;
      if (!file.ends_with(".safetensors.index.json")) continue;
      const Json index = read_json_file(snapshot.dir / file);
      if (!index.contains("weight_map") || !index["weight_map"].is_object()) continue;
      const fs::path folder = fs::path(file).parent_path();
      std::set<std::string> shards;
      for (const auto& [tensor, shard] : index["weight_map"].items()) {
        if (shard.is_string()) shards.insert((folder / shard.get<std::string>()).generic_string());
      }
      for (const std::string& shard : shards) {
        if (!have.contains(shard)) missing.push_back(shard);
      }
    }
    if (!any_weights) missing.push_back("*.safetensors (no weights)");
  }
  if (!missing.empty()) {
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    // Joined by hand: GCC 12 reports a false -Wstringop-overflow inside fmt 9's fmt::join.
    std::string listed;
    for (const std::string& file : missing) listed += (listed.empty() ? "" : ", ") + file;
    throw_error(ErrorCode::kNotFound, "{}: the cached snapshot {} of revision '{}' lacks {}{}", repo,
                snapshot.dir.string(), request.revision, listed, missing_hint(env, request));
  }
  for (const std::string& file : present) {
    if (wanted_file(file, request.files)) snapshot.files.push_back(file);
  }
  return snapshot;
}

Snapshot fetch_snapshot(const HubEnvironment& env, const SnapshotRequest& request) {
  if (env.offline) return cached_snapshot(env, request);
  const HubClient client(env);
  const std::string repo = request.repo.str();
  RevisionInfo info;
  try {
    info = client.revision_info(request.repo, request.revision);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnavailable) throw;
    Snapshot cached;
    try {
      cached = cached_snapshot(env, request);
    } catch (const Error&) {
      throw e;
    }
    spdlog::warn("{}; using the cached snapshot {}", e.what(), cached.dir.string());
    return cached;
  }
  if (!is_commit_hash(info.commit)) {
    throw_error(ErrorCode::kLoadFailed, "{}: revision '{}': the Hub answered the commit '{}', not a commit hash", repo,
                request.revision, info.commit);
  }

  std::vector<FileJob> jobs;
  for (const RepoFile& file : info.files) {
    if (!wanted_file(file.path, request.files)) continue;
    check_repo_file_path(request.repo, file.path);
    jobs.push_back({file.path, file.etag, file.size, file.lfs});
  }
  if (jobs.empty()) {
    throw_error(ErrorCode::kNotFound,
                "{}: revision '{}' has none of the files omnistage loads (config.json, *.safetensors, tokenizer and "
                "processor files) among its {} file(s)",
                repo, request.revision, info.files.size());
  }

  const RepoCache cache(env.cache_root, request.repo);
  fs::create_directories(cache.dir() / "blobs");
  if (request.revision != info.commit) cache.write_ref(request.revision, info.commit);
  spdlog::info("download {}: revision '{}' is commit {}; {} of its {} file(s) wanted, cache {}", repo, request.revision,
               info.commit, jobs.size(), info.files.size(), env.cache_root.string());
  {
    DownloadProgress progress(repo, static_cast<int>(jobs.size()), request.interactive_progress);
    SnapshotDownload download(client, cache, info.commit, progress);
    download.run(jobs, request.workers);
  }
  Snapshot snapshot{cache.snapshot(info.commit), info.commit, {}};
  for (const FileJob& job : jobs) snapshot.files.push_back(job.path);
  std::sort(snapshot.files.begin(), snapshot.files.end());
  return snapshot;
}

}  // namespace omni::hub
