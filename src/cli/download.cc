#include "cli/download.h"

#include <cstdio>
#include <memory>

#include "base/error.h"
#include "cli/model_source.h"

namespace omni::cli {

namespace {

struct DownloadOptions {
  std::string model;
  ModelSource source;
  bool config_only = false;
};

}  // namespace

Command download_command() {
  return {"download",
          "Download a model from the Hugging Face Hub into the shared Hub cache and print its folder",
          [](CLI::App& sub) -> std::function<int()> {
            auto options = std::make_shared<DownloadOptions>();
            sub.add_option("model", options->model, "Hugging Face repository id, e.g. Qwen/Qwen3-0.6B")->required();
            sub.add_option("--revision", options->source.revision, "Branch, tag or commit hash")->default_str("main");
            sub.add_option("--download-dir", options->source.download_dir,
                           "Cache root to use instead of $HF_HUB_CACHE / $HF_HOME/hub / ~/.cache/huggingface/hub");
            sub.add_flag("--config-only", options->config_only,
                         "Only the configuration files (what `omnistage config` reads)");
            return [options] {
              if (!hub_model(options->model)) {
                throw_error(ErrorCode::kInvalidArgument,
                            "download: '{}' is not a Hugging Face repository id of the form org/name (or it is a "
                            "local path, which needs no download)",
                            options->model);
              }
              ModelSource source = options->source;
              if (options->config_only) source.files = hub::FileSet::kConfig;
              const std::string dir = local_model_dir(options->model, source);
              std::printf("%s\n", dir.c_str());
              return 0;
            };
          },
          {}};
}

}  // namespace omni::cli
