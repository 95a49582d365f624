#include "server/media_fetch.h"

#include <curl/curl.h>

#include <fstream>
#include <mutex>
#include <system_error>

#include "base/base64.h"
#include "server/openai_error.h"

namespace omni::server {

namespace {

std::string human_bytes(size_t bytes) {
  if (bytes % (size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

std::string decode_base64(std::string_view payload, const std::string& field) {
  try {
    return base64_decode(payload);
  } catch (const Error& e) {
    throw_invalid_field(field, "'{}' is neither a URL nor base64 audio: {}", field, e.what());
  }
}

struct Transfer {
  std::string body;
  size_t max_bytes = 0;
  bool too_large = false;
};

size_t on_data(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (transfer->body.size() + n > transfer->max_bytes) {
    transfer->too_large = true;
    return 0;  // aborts the transfer
  }
  transfer->body.append(data, n);
  return n;
}

std::string fetch_url(const std::string& url, const std::string& field, const MediaFetchOptions& options) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* curl = curl_easy_init();
  if (!curl) throw_error(ErrorCode::kInternal, "libcurl could not start a transfer");
  Transfer transfer;
  transfer.max_bytes = options.max_bytes;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 3L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout.count()));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options.max_bytes));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  if (transfer.too_large || code == CURLE_FILESIZE_EXCEEDED) {
    throw_invalid_field(field, "'{}': {} is larger than the limit of {}", field, url, human_bytes(options.max_bytes));
  }
  if (code == CURLE_OPERATION_TIMEDOUT) {
    throw_invalid_field(field, "'{}': {} sent no answer within {} s", field, url,
                        static_cast<double>(options.timeout.count()) / 1000.0);
  }
  if (code != CURLE_OK)
    throw_invalid_field(field, "'{}': fetching {} failed: {}", field, url, curl_easy_strerror(code));
  if (status < 200 || status >= 300) throw_invalid_field(field, "'{}': {} answered HTTP {}", field, url, status);
  return std::move(transfer.body);
}

std::string read_local_file(std::string_view url, const std::string& field, const MediaFetchOptions& options) {
  if (!options.allowed_local_media_path) {
    throw_invalid_field(field,
                        "'{}': local files are not allowed; start the server with --allowed-local-media-path "
                        "to serve files from a folder",
                        field);
  }
  std::string_view path = url.substr(7);  // after "file://"
  std::error_code ec;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::path(path), ec);
  const std::filesystem::path root = std::filesystem::weakly_canonical(*options.allowed_local_media_path, ec);
  auto [end, _] = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (ec || end != root.end()) {
    throw_invalid_field(field, "'{}': {} is not inside --allowed-local-media-path {}", field, path, root.string());
  }
  std::ifstream in(resolved, std::ios::binary);
  if (!in) throw_invalid_field(field, "'{}': cannot read {}", field, resolved.string());
  std::string bytes;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    bytes.append(buffer, static_cast<size_t>(in.gcount()));
    if (bytes.size() > options.max_bytes) {
      throw_invalid_field(field, "'{}': {} is larger than the limit of {}", field, resolved.string(),
                          human_bytes(options.max_bytes));
    }
  }
  return bytes;
}

}  // namespace

bool media_reference_is_url(std::string_view reference) {
  return reference.starts_with("http://") || reference.starts_with("https://") || reference.starts_with("file://");
}

std::string fetch_media(std::string_view reference, const std::string& field, const MediaFetchOptions& options) {
  if (reference.starts_with("http://") || reference.starts_with("https://")) {
    return fetch_url(std::string(reference), field, options);
  }
  if (reference.starts_with("file://")) return read_local_file(reference, field, options);
  if (reference.starts_with("data:")) {
    const size_t comma = reference.find(',');
    if (comma == std::string_view::npos || reference.substr(0, comma).find(";base64") == std::string_view::npos) {
      throw_invalid_field(field, "'{}' is a data URL without ';base64,': only base64 data URLs are accepted", field);
    }
    reference.remove_prefix(comma + 1);
  }
  if (reference.empty()) throw_invalid_field(field, "'{}' is empty", field);
  // Base64 of more than max_bytes cannot decode to an acceptable size.
  if (reference.size() / 4 * 3 > options.max_bytes) {
    throw_invalid_field(field, "'{}' is larger than the limit of {}", field, human_bytes(options.max_bytes));
  }
  return decode_base64(reference, field);
}

}  // namespace omni::server
