// The bytes behind a media reference a client puts in a request field (a voice-clone `ref_audio`;
// any route's media input), in the forms vLLM-Omni accepts:
//   - a data URL, "data:<type>;base64,<payload>";
//   - bare base64 (the whole field is the payload);
//   - an http:// or https:// URL, fetched with libcurl: at most `max_bytes`, within `timeout`, at
//     most 3 redirects, only a 2xx answer counts;
//   - a file:// URL of a file inside --allowed-local-media-path (after resolving symbolic links and
//     "..": a path that leaves the folder is refused); without that flag local files are refused.
//
// Errors are InvalidField (HTTP 400) naming `field` and what is wrong ("… is not base64", "… answered
// HTTP 404", "… is larger than the limit of 64 MiB", "local files are not allowed…").
// Threads: any; fetching a URL blocks the caller until the transfer ends (call it off the
// connection's executor).
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace omni::server {

struct MediaFetchOptions {
  std::optional<std::filesystem::path> allowed_local_media_path;  // --allowed-local-media-path
  size_t max_bytes = size_t{64} << 20;
  std::chrono::milliseconds timeout{10000};
};

// Whether `reference` names a URL to fetch (http, https or file), i.e. fetch_media may block.
bool media_reference_is_url(std::string_view reference);

std::string fetch_media(std::string_view reference, const std::string& field, const MediaFetchOptions& options);

}  // namespace omni::server
