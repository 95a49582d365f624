#include "cli/version.h"

#include <fmt/format.h>

#include "omni_version.h"
#include "tensor/backend.h"

namespace omni::cli {

std::string version_text() {
  return fmt::format("omnistage {} (commit {})\nbackends: {}", OMNI_VERSION, OMNI_GIT_COMMIT,
                     tensor::compiled_backends());
}

}  // namespace omni::cli
