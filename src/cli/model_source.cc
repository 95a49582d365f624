#include "cli/model_source.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "hub/hub_environment.h"
#include "hub/snapshot.h"

namespace omni::cli {

namespace {

hub::SnapshotRequest snapshot_request(const hub::RepoId& repo, const ModelSource& source) {
  if (source.revision.empty())
    throw_error(ErrorCode::kInvalidArgument, "--revision: empty revision for {}", repo.str());
  hub::SnapshotRequest request;
  request.repo = repo;
  request.revision = source.revision;
  request.files = source.files;
  request.interactive_progress = isatty(STDERR_FILENO) == 1;
  return request;
}

}  // namespace

std::optional<hub::RepoId> hub_model(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return std::nullopt;
  return hub::parse_repo_id(model);
}

std::string local_model_dir(const std::string& model, const ModelSource& source) {
  const std::optional<hub::RepoId> repo = hub_model(model);
  if (!repo) return model;
  const hub::HubEnvironment env = hub::hub_environment_from_process(source.download_dir);
  const hub::Snapshot snapshot = hub::fetch_snapshot(env, snapshot_request(*repo, source));
  spdlog::info("model {} (revision {}, commit {}): {}{}", repo->str(), source.revision, snapshot.commit,
               snapshot.dir.string(), env.offline ? " (HF_HUB_OFFLINE: from the cache)" : "");
  return snapshot.dir.string();
}

std::optional<std::string> cached_model_dir(const std::string& model, const ModelSource& source) {
  const std::optional<hub::RepoId> repo = hub_model(model);
  if (!repo) return std::nullopt;
  const hub::HubEnvironment env = hub::hub_environment_from_process(source.download_dir);
  try {
    return hub::cached_snapshot(env, snapshot_request(*repo, source)).dir.string();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    return std::nullopt;
  }
}

}  // namespace omni::cli
