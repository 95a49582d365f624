// Where the Hub cache lives, which Hub to talk to and with what token, and whether the network
// may be used at all: the environment variables huggingface_hub reads, with the same meaning, so
// that omnistage and the Python tools share one cache.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace omni::hub {

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

struct HubEnvironment {
  // The cache root: --download-dir when given, else $HF_HUB_CACHE (or its old name
  // $HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else
  // $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
  std::filesystem::path cache_root;
  std::string endpoint = kDefaultEndpoint;  // $HF_ENDPOINT, without a trailing '/'
  // $HF_TOKEN, else $HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH or $HF_HOME/token
  // (what `huggingface-cli login` writes). Sent as `Authorization: Bearer <token>`.
  std::optional<std::string> token;
  bool offline = false;  // $HF_HUB_OFFLINE is 1/true/yes/on (any case)
  // $HF_HUB_DOWNLOAD_TIMEOUT: seconds without a byte before a connection counts as dropped (and
  // is resumed); also the connect timeout.
  int download_timeout_s = 10;
};

// Reads the environment through `getenv` (std::getenv in production; a table in tests).
HubEnvironment hub_environment(const std::function<const char*(const char*)>& getenv,
                               const std::string& download_dir = "");

// hub_environment over the process environment.
HubEnvironment hub_environment_from_process(const std::string& download_dir = "");

}  // namespace omni::hub
