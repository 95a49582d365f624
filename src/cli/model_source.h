// MODEL arguments that name a Hugging Face Hub repository (`org/name`) instead of a local folder:
// every subcommand that takes a model folder (serve, generate, config, download) turns one into
// its snapshot folder in the Hub cache here, downloading what is missing, or from the cache alone
// under HF_HUB_OFFLINE=1. Used on the main thread during start-up.
#pragma once

#include <optional>
#include <string>

#include "hub/file_selection.h"
#include "hub/repo_id.h"

namespace omni::cli {

struct ModelSource {
  std::string revision = "main";  // --revision (or --tokenizer-revision)
  std::string download_dir;       // --download-dir: the cache root instead of the environment's
  hub::FileSet files = hub::FileSet::kPipeline;
};

// The repository `model` names, when it is not an existing local path and has the Hub's
// `org/name` shape; nullopt for a local folder (or anything else, left to the caller to report).
std::optional<hub::RepoId> hub_model(const std::string& model);

// `model` itself unless hub_model(model); else the snapshot folder of that repository at
// `source.revision`, downloaded into the cache (progress bars when stderr is a terminal) or found
// there. Throws omni::Error naming the repository, the revision, the file and the HTTP status.
std::string local_model_dir(const std::string& model, const ModelSource& source);

// The snapshot folder of `model` when the cache already holds it completely (no network); nullopt
// when `model` is not a Hub id or the cache lacks it.
std::optional<std::string> cached_model_dir(const std::string& model, const ModelSource& source);

}  // namespace omni::cli
