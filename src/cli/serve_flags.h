// The flags of `omnistage serve`, defined once and shared by `omnistage config`: vLLM-Omni's
// serve arguments (same names, aliases, choices and defaults) plus the engine and server flags.
//
// Only flags the user typed reach the configuration merge (never a parser default), so a default
// can never override a deploy YAML value. Used on the main thread during start-up only.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/json.h"
#include "config/effective_config.h"
#include "config/pipeline_registry.h"
#include "hub/file_selection.h"

namespace omni::cli {

// Where a flag's value goes.
enum class FlagTarget {
  kStage,    // an engine argument of every stage (the "explicit global CLI flags" layer)
  kRuntime,  // orchestrator / launcher / server setting, read by serve itself
};

enum class FlagKind {
  kString,
  kInt,
  kFloat,
  kJson,      // a JSON object given as text
  kJsonList,  // a JSON list of strings given as text ('["*"]'), as vLLM's CORS flags take
  kList,      // one or more strings
  kSwitch,    // present = true
  kBoolPair,  // --x / --no-x
};

struct FlagSpec {
  std::string name;                       // canonical long flag, e.g. "--tensor-parallel-size"
  std::vector<std::string> alternatives;  // other long names ("--usp") and vLLM-style short aliases ("-tp")
  std::string dest;                       // the field it sets, e.g. "tensor_parallel_size"
  FlagKind kind = FlagKind::kString;
  FlagTarget target = FlagTarget::kRuntime;
  OrderedJson default_value;  // null = no default
  std::vector<std::string> choices;
  std::string help;
  // Non-empty when the feature behind the flag does not exist yet: serve stops with this reason
  // when the user gives the flag.
  std::string unsupported;
  // For a switch: the value it stores (false for --disable-… style flags of an enable_… field).
  bool switch_value = true;
  // For a kBoolPair: the negative flag; empty = "--no-" + the name without its dashes.
  std::string negation;
};

// Every serve flag, in --help order.
const std::vector<FlagSpec>& serve_flag_specs();

// Rewrites the arguments after `serve`/`config` into what CLI11 can parse: multi-character
// single-dash aliases ("-oma", "-tp", "-dac") become their long flag, and the dotted form
// --diffusion-attention-config.<path> VALUE becomes an entry of a hidden list flag. Throws
// omni::Error(kInvalidArgument) for a dotted flag without a value.
std::vector<std::string> rewrite_serve_args(const std::vector<std::string>& args);

// The values of one parsed serve command line.
struct ServeFlags {
  std::string model;
  OrderedJson values = OrderedJson::object();  // dest -> value (typed, or the default, or null)
  std::set<std::string> given;                 // dests the user typed
  std::map<std::string, std::string> flag_of;  // dest -> the canonical flag that set it

  bool was_given(const std::string& dest) const { return given.contains(dest); }
};

// Declares MODEL and every serve flag on `app`. Returns the object that collect() fills after
// parsing; it must outlive the parse.
class ServeFlagParser {
 public:
  explicit ServeFlagParser(CLI::App& app);
  // Converts and validates the parsed values (types, JSON objects, ranges, the flag combination
  // rules of vLLM-Omni's serve). Throws omni::Error(kInvalidArgument) naming the flag.
  ServeFlags collect() const;

 private:
  struct Binding {
    const FlagSpec* spec;
    CLI::Option* option = nullptr;
    CLI::Option* negation = nullptr;  // --no-x of a kBoolPair
    std::shared_ptr<std::string> text = std::make_shared<std::string>();
    std::shared_ptr<std::vector<std::string>> list = std::make_shared<std::vector<std::string>>();
  };
  std::shared_ptr<std::string> model_ = std::make_shared<std::string>();
  std::vector<Binding> bindings_;
};

// The config layer's view of the command line: the model, --deploy-config, the explicit
// stage-scoped flags, --async-chunk and --stage-overrides.
config::CliConfigInputs config_inputs(const ServeFlags& flags);

// The environment the merge runs in: the bundled deploy dir (OMNISTAGE_DEPLOY_DIR, else the
// source tree's deploy/) and the platform (OMNISTAGE_PLATFORM, else cuda when a CUDA device is
// visible, else cpu).
config::ConfigEnvironment config_environment();

// Every registered pipeline (and the known Hugging Face ids), built once.
const config::PipelineRegistry& pipeline_registry();

// Resolves, merges and validates the configuration for `flags` with every registered pipeline.
config::EffectiveConfig build_config(const ServeFlags& flags);

// When MODEL names a Hugging Face Hub repository rather than a local path, MODEL becomes its
// snapshot folder at --revision in the Hub cache (--download-dir, else the environment's):
// downloaded, or from the cache alone under HF_HUB_OFFLINE=1 (cli/model_source.h). The API then
// answers to the repository id unless --served-model-name is given. `files` says what to fetch:
// with kConfig, a known model id the cache lacks stays an id (the bundled table resolves it, no
// download). With kPipeline a --tokenizer that is a Hub id is fetched too (--tokenizer-revision).
void use_hub_model(ServeFlags& flags, hub::FileSet files);

}  // namespace omni::cli
