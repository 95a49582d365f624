#include "hub/cache_layout.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace omni::hub {

namespace fs = std::filesystem;

std::string repo_folder_name(const RepoId& repo) { return "models--" + repo.org + "--" + repo.name; }

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

void check_repo_file_path(const RepoId& repo, std::string_view file) {
  bool ok = !file.empty() && file.front() != '/' && file.find('\\') == std::string_view::npos;
  for (size_t begin = 0; ok && begin <= file.size();) {
    const size_t end = std::min(file.find('/', begin), file.size());
    const std::string_view part = file.substr(begin, end - begin);
    ok = !part.empty() && part != "." && part != "..";
    begin = end + 1;
  }
  if (!ok)
    throw_error(ErrorCode::kInvalidArgument,
                "{}: the Hub listed a file named '{}', which is not a path inside the repository", repo.str(), file);
}

void check_etag(const RepoId& repo, std::string_view file, std::string_view etag) {
  const bool ok = !etag.empty() && etag.size() <= 128 && std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
  if (!ok)
    throw_error(ErrorCode::kLoadFailed, "{}: {}: the Hub sent the etag '{}', which cannot name a blob", repo.str(),
                file, etag);
}

RepoCache::RepoCache(fs::path cache_root, RepoId repo)
    : root_(std::move(cache_root)), repo_(std::move(repo)), dir_(root_ / repo_folder_name(repo_)) {}

fs::path RepoCache::blob(std::string_view etag) const { return dir_ / "blobs" / std::string(etag); }

fs::path RepoCache::incomplete_blob(std::string_view etag) const {
  return dir_ / "blobs" / (std::string(etag) + ".incomplete");
}

fs::path RepoCache::blob_lock(std::string_view etag) const {
  return root_ / ".locks" / repo_folder_name(repo_) / (std::string(etag) + ".lock");
}

fs::path RepoCache::snapshot(std::string_view commit) const { return dir_ / "snapshots" / std::string(commit); }

fs::path RepoCache::ref(std::string_view revision) const { return dir_ / "refs" / std::string(revision); }

std::optional<std::string> RepoCache::read_ref(std::string_view revision) const {
  std::ifstream in(ref(revision));
  if (!in) return std::nullopt;
  std::string commit;
  in >> commit;
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

void RepoCache::write_ref(std::string_view revision, std::string_view commit) const {
  const fs::path path = ref(revision);
  fs::create_directories(path.parent_path());
  const fs::path temporary = path.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << commit;
    if (!out) throw_error(ErrorCode::kInternal, "{}: cannot write {}", repo_.str(), temporary.string());
  }
  fs::rename(temporary, path);
}

std::optional<std::string> RepoCache::cached_commit(std::string_view revision) const {
  std::error_code ec;
  if (is_commit_hash(revision) && fs::is_directory(snapshot(revision), ec)) return std::string(revision);
  return read_ref(revision);
}

void RepoCache::link_snapshot_file(std::string_view commit, std::string_view file, std::string_view etag) const {
  const fs::path link = snapshot(commit) / std::string(file);
  fs::create_directories(link.parent_path());
  // From snapshots/{commit}/{dirs...}/ up to the repo folder: one ".." per folder below it.
  fs::path target;
  for (auto part = fs::path(std::string(file)).parent_path(); !part.empty(); part = part.parent_path()) target /= "..";
  target = target / ".." / ".." / "blobs" / std::string(etag);
  // A new link renamed over the old one: another process linking the same file never sees a gap.
  static std::atomic<uint64_t> counter{0};
  const fs::path temporary =
      link.string() + fmt::format(".link.{}.{}", getpid(), counter.fetch_add(1, std::memory_order_relaxed));
  fs::create_symlink(target, temporary);
  fs::rename(temporary, link);
}

}  // namespace omni::hub
