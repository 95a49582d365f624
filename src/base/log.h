// Process-wide logging on spdlog. Call init_logging once from main before any other thread
// starts; afterwards the spdlog macros/functions are safe from any thread.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

namespace omni {

inline constexpr std::string_view kLogLevelEnv = "OMNISTAGE_LOG_LEVEL";
// The level names --log-level and OMNISTAGE_LOG_LEVEL accept.
inline constexpr std::string_view kLogLevels = "trace, debug, info, warning, error, critical, off";

// Parses a level name (case-insensitive; "warn" is accepted for "warning"). Throws
// omni::Error(kInvalidArgument) naming `source` (e.g. "--log-level") and the allowed values.
spdlog::level::level_enum parse_log_level(std::string_view name, std::string_view source);

// Sets up the default logger: stderr, plus `log_file` when not empty. The level is `level` when
// not empty, else OMNISTAGE_LOG_LEVEL when set, else info.
void init_logging(std::string_view level, const std::string& log_file);

}  // namespace omni
