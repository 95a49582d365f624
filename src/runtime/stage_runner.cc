#include "runtime/stage_runner.h"

#include <fmt/ranges.h>

#include <map>
#include <mutex>

#include "runtime/ar_stage_runner.h"
#include "runtime/diffusion_stage_runner.h"
#include "runtime/generation_stage_runner.h"

namespace omni::runtime {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, StageRunnerFactory> factories;
};

// Built-in kinds, one per engine, are listed here rather than self-registered, because a static
// library drops object files nothing references.
Registry& registry() {
  static Registry* instance = [] {
    auto* r = new Registry;
    r->factories[std::string(kArRunnerKind)] = make_ar_stage_runner;
    r->factories[std::string(kGenerationRunnerKind)] = make_generation_stage_runner;
    r->factories[std::string(kDiffusionRunnerKind)] = make_diffusion_stage_runner;
    return r;
  }();
  return *instance;
}

}  // namespace

// The chunk is taken by value because overriding runners keep it; this default only refuses it.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
void StageRunner::add_input(const std::string& request_id, StageInputChunk /*chunk*/) {
  throw_error(ErrorCode::kUnsupported, "request {}: this stage's runner does not take streamed (async_chunk) input",
              request_id);
}

void StageRunner::sleep() {
  throw_error(ErrorCode::kUnsupported, "this stage's runner cannot sleep at level 1 (level 2 frees it whole)");
}

void StageRunner::wake_up() {
  throw_error(ErrorCode::kUnsupported, "this stage's runner cannot sleep at level 1 (level 2 frees it whole)");
}

void register_stage_runner(const std::string& kind, StageRunnerFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[kind] = std::move(factory);
}

std::unique_ptr<StageRunner> make_stage_runner(const Json& engine_args, const StageRunnerContext& context) {
  auto it = engine_args.find("runner");
  if (it == engine_args.end() || !it->is_string()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.runner must name a runner kind ({})",
                context.stage_id, fmt::join(stage_runner_kinds(), ", "));
  }
  std::string kind = it->get<std::string>();
  StageRunnerFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (auto f = r.factories.find(kind); f != r.factories.end()) factory = f->second;
  }
  if (!factory) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: unknown runner kind '{}'; the known kinds are {}",
                context.stage_id, kind, fmt::join(stage_runner_kinds(), ", "));
  }
  return factory(engine_args, context);
}

std::vector<std::string> stage_runner_kinds() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> kinds;
  for (const auto& [kind, factory] : r.factories) kinds.push_back(kind);
  return kinds;
}

}  // namespace omni::runtime
