#include "hub/hub_environment.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace omni::hub {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> non_empty(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool truthy(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
  return value == "1" || value == "true" || value == "yes" || value == "on";
}

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

}  // namespace

HubEnvironment hub_environment(const std::function<const char*(const char*)>& getenv, const std::string& download_dir) {
  HubEnvironment env;
  const std::optional<std::string> home = non_empty(getenv, "HOME");
  const fs::path default_hf_home = non_empty(getenv, "XDG_CACHE_HOME")
                                       ? fs::path(*non_empty(getenv, "XDG_CACHE_HOME")) / "huggingface"
                                       : fs::path(home.value_or("/")) / ".cache" / "huggingface";
  const fs::path hf_home = non_empty(getenv, "HF_HOME") ? fs::path(*non_empty(getenv, "HF_HOME")) : default_hf_home;

  if (!download_dir.empty()) {
    env.cache_root = download_dir;
  } else if (auto cache = non_empty(getenv, "HF_HUB_CACHE")) {
    env.cache_root = *cache;
  } else if (auto legacy_cache = non_empty(getenv, "HUGGINGFACE_HUB_CACHE")) {
    env.cache_root = *legacy_cache;
  } else {
    env.cache_root = hf_home / "hub";
  }

  if (auto endpoint = non_empty(getenv, "HF_ENDPOINT")) {
    env.endpoint = *endpoint;
    while (env.endpoint.size() > 1 && env.endpoint.back() == '/') env.endpoint.pop_back();
  }

  if (auto token = non_empty(getenv, "HF_TOKEN")) {
    env.token = trimmed(*token);
  } else if (auto legacy = non_empty(getenv, "HUGGING_FACE_HUB_TOKEN")) {
    env.token = trimmed(*legacy);
  } else {
    const fs::path token_file =
        non_empty(getenv, "HF_TOKEN_PATH") ? fs::path(*non_empty(getenv, "HF_TOKEN_PATH")) : hf_home / "token";
    std::ifstream in(token_file);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      if (std::string token = trimmed(text.str()); !token.empty()) env.token = token;
    }
  }
  if (env.token && env.token->empty()) env.token.reset();

  if (auto offline = non_empty(getenv, "HF_HUB_OFFLINE")) env.offline = truthy(*offline);
  if (auto timeout = non_empty(getenv, "HF_HUB_DOWNLOAD_TIMEOUT")) {
    char* end = nullptr;
    const long seconds = std::strtol(timeout->c_str(), &end, 10);
    if (end == timeout->c_str() || *end != '\0' || seconds < 1 || seconds > 3600) {
      throw_error(ErrorCode::kInvalidArgument, "HF_HUB_DOWNLOAD_TIMEOUT={}: expected whole seconds in [1, 3600]",
                  *timeout);
    }
    env.download_timeout_s = static_cast<int>(seconds);
  }
  return env;
}

HubEnvironment hub_environment_from_process(const std::string& download_dir) {
  return hub_environment([](const char* name) { return std::getenv(name); }, download_dir);
}

}  // namespace omni::hub
