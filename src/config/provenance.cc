#include "config/provenance.h"

#include <fmt/format.h>

namespace omni::config {

std::string Provenance::label() const {
  switch (layer) {
    case Layer::kDefault:
      return "default";
    case Layer::kPipeline:
      return "pipeline";
    case Layer::kDeploy:
      return "deploy:" + file;
    case Layer::kPlatform:
      return "platform:" + detail;
    case Layer::kCli:
      return "cli";
    case Layer::kStageOverride:
      return "stage-override";
  }
  return "default";
}

std::string Provenance::explain() const {
  switch (layer) {
    case Layer::kDefault:
      return "default (engine default)";
    case Layer::kPipeline:
      return "pipeline (registered topology)";
    case Layer::kDeploy:
      return fmt::format("deploy ({})", file);
    case Layer::kPlatform:
      return fmt::format("platform:{} ({})", detail, file);
    case Layer::kCli:
      return fmt::format("cli ({})", detail);
    case Layer::kStageOverride:
      return "stage-override (--stage-overrides)";
  }
  return label();
}

}  // namespace omni::config
