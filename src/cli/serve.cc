#include "cli/serve.h"

#include <spdlog/spdlog.h>

#include <memory>

#include "base/error.h"
#include "base/log.h"
#include "cli/serve_flags.h"

namespace omni::cli {

namespace {

// The flags the user gave whose feature does not exist yet, each with the reason.
std::vector<std::string> unsupported_flags(const ServeFlags& flags) {
  std::vector<std::string> out;
  for (const FlagSpec& spec : serve_flag_specs()) {
    if (spec.unsupported.empty() || !flags.was_given(spec.dest)) continue;
    if (spec.name == "--diffusion-attention-config-entry") continue;  // reported as --diffusion-attention-config
    out.push_back(fmt::format("{} ({})", flags.flag_of.at(spec.dest), spec.unsupported));
  }
  if (flags.values["worker_backend"] == "ray") {
    out.push_back("--worker-backend ray (the Ray worker backend does not exist)");
  }
  if (flags.values["api_server_count"].get<int64_t>() > 1) {
    out.push_back(fmt::format("--api-server-count {} (multiple API frontends do not exist yet)",
                              flags.values["api_server_count"].get<int64_t>()));
  }
  return out;
}

int run_serve(const ServeFlags& flags) {
  if (flags.was_given("log_file")) {
    init_logging(spdlog::level::to_string_view(spdlog::get_level()).data(), flags.values["log_file"]);
  }
  const config::EffectiveConfig config = build_config(flags);
  spdlog::info("serve: model {} -> pipeline {} ({}), platform {}, {} stage(s), async_chunk {}", config.model,
               config.pipeline->model_type, config.pipeline_reason, config.platform, config.stages.size(),
               config.async_chunk);

  if (std::vector<std::string> unsupported = unsupported_flags(flags); !unsupported.empty()) {
    throw_error(ErrorCode::kUnsupported, "not supported yet: {}", fmt::join(unsupported, "; "));
  }
  const config::EffectiveStage& first = config.stages.front();
  throw_error(ErrorCode::kUnsupported,
              "pipeline '{}' is configured and valid, but it cannot be served yet: stage {} ('{}', {}) has no stage "
              "model and there is no serving runtime yet (issue 6). `omnistage config {}` prints the effective "
              "configuration.",
              config.pipeline->model_type, first.topology->stage_id, first.topology->model_stage,
              config::execution_type_name(first.topology->execution_type), config.model);
}

}  // namespace

Command serve_command() {
  return {"serve", "Serve a model behind the OpenAI-compatible API (same flags as vLLM-Omni's serve)",
          [](CLI::App& sub) -> std::function<int()> {
            auto parser = std::make_shared<ServeFlagParser>(sub);
            return [parser] { return run_serve(parser->collect()); };
          },
          rewrite_serve_args};
}

}  // namespace omni::cli
