// Where a merged configuration value came from, so `omnistage config --explain` can say it.
#pragma once

#include <map>
#include <string>

namespace omni::config {

// The layers of the merge, lowest precedence first (the spec's precedence list plus the two
// layers below YAML: engine defaults and values the pipeline topology implies).
enum class Layer {
  kDefault,        // engine default
  kPipeline,       // implied by the registered PipelineConfig
  kDeploy,         // a deploy YAML file (base or overlay)
  kPlatform,       // a platforms.<name> section of a deploy YAML
  kCli,            // an explicit global CLI flag
  kStageOverride,  // --stage-overrides
};

struct Provenance {
  Layer layer = Layer::kDefault;
  std::string file;    // kDeploy, kPlatform: absolute path of the YAML file
  std::string detail;  // kPlatform: platform name; kCli: the flag

  static Provenance deploy(std::string file) { return {Layer::kDeploy, std::move(file), ""}; }

  // The short label of the JSON `sources` map: "deploy:/abs/file.yaml", "platform:cuda", "cli",
  // "stage-override", "pipeline", "default".
  std::string label() const;
  // The label with the file or flag that set the value, for --explain.
  std::string explain() const;
};

// Field name -> the layer that last set it. Nested keys use dots: "default_sampling_params.top_k",
// "engine_extras.hf_overrides".
using SourceMap = std::map<std::string, Provenance>;

}  // namespace omni::config
