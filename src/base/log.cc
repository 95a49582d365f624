#include "base/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "base/error.h"

namespace omni {

spdlog::level::level_enum parse_log_level(std::string_view name, std::string_view source) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "trace") return spdlog::level::trace;
  if (lower == "debug") return spdlog::level::debug;
  if (lower == "info") return spdlog::level::info;
  if (lower == "warning" || lower == "warn") return spdlog::level::warn;
  if (lower == "error") return spdlog::level::err;
  if (lower == "critical") return spdlog::level::critical;
  if (lower == "off") return spdlog::level::off;
  throw_error(ErrorCode::kInvalidArgument, "{}: unknown log level '{}' (allowed: {})", source, name, kLogLevels);
}

void init_logging(std::string_view level, const std::string& log_file) {
  spdlog::level::level_enum chosen = spdlog::level::info;
  if (!level.empty()) {
    chosen = parse_log_level(level, "--log-level");
  } else if (const char* env = std::getenv(std::string(kLogLevelEnv).c_str()); env && *env) {
    chosen = parse_log_level(env, kLogLevelEnv);
  }
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!log_file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file));
    } catch (const spdlog::spdlog_ex& e) {
      throw_error(ErrorCode::kInvalidArgument, "--log-file {}: cannot open: {}", log_file, e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("omnistage", sinks.begin(), sinks.end());
  logger->set_level(chosen);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [%P] %v");
  spdlog::set_default_logger(logger);
}

}  // namespace omni
