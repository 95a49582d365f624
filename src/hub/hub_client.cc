#include "hub/hub_client.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include "base/error.h"
#include "base/json.h"

namespace omni::hub {

namespace fs = std::filesystem;

namespace {

constexpr int kAttempts = 5;  // tries of one request before a transient failure is an error
constexpr size_t kErrorBodyLimit = size_t{64} * 1024;

void ensure_curl_initialised() {
  static const bool kInitialised = [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw_error(ErrorCode::kInternal, "libcurl could not be initialised");
    }
    return true;
  }();
  (void)kInitialised;
}

// One HTTP response of an exchange (a redirect adds one per hop).
struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lowercase names

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct Exchange {
  std::vector<Response> responses;
  std::string body;  // JSON answers and error bodies (never a blob's bytes)
  char curl_error[CURL_ERROR_SIZE] = {};

  const Response& last() const {
    static const Response kNone;
    return responses.empty() ? kNone : responses.back();
  }
  // A header from any hop, the first hop first (X-Linked-* come with the Hub's redirect).
  std::string any_header(const std::string& name) const {
    for (const Response& response : responses) {
      if (std::string value = response.header(name); !value.empty()) return value;
    }
    return "";
  }
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  std::string line(data, size * count);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.starts_with("HTTP/")) {
    Response response;
    const size_t space = line.find(' ');
    if (space != std::string::npos) response.status = std::strtol(line.c_str() + space + 1, nullptr, 10);
    exchange->responses.push_back(std::move(response));
  } else if (const size_t colon = line.find(':'); colon != std::string::npos && !exchange->responses.empty()) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    const size_t begin = value.find_first_not_of(" \t");
    value = begin == std::string::npos ? "" : value.substr(begin);
    exchange->responses.back().headers[name] = value;
  }
  return size * count;
}

size_t on_body_to_string(char* data, size_t size, size_t count, void* user) {
  static_cast<Exchange*>(user)->body.append(data, size * count);
  return size * count;
}

using Easy = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
using HeaderList = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;

// A handle with what every request shares: user agent, token, timeouts, header capture.
struct Request {
  Request(const HubEnvironment& env, const std::string& url, Exchange& exchange)
      : easy(curl_easy_init(), &curl_easy_cleanup), headers(nullptr, &curl_slist_free_all) {
    ensure_curl_initialised();
    if (!easy) throw_error(ErrorCode::kInternal, "libcurl could not create a handle");
    CURL* h = easy.get();
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_USERAGENT, "omnistage");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(env.download_timeout_s));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(env.download_timeout_s));
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &exchange);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &on_body_to_string);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &exchange);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, exchange.curl_error);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    // A custom Authorization header is not sent on to another host after a redirect (curl's
    // default without CURLOPT_UNRESTRICTED_AUTH), so a CDN never sees the token.
    if (env.token) add_header("Authorization: Bearer " + *env.token);
  }

  void add_header(const std::string& header) {
    headers.reset(curl_slist_append(headers.release(), header.c_str()));
    curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, headers.get());
  }

  CURLcode perform() { return curl_easy_perform(easy.get()); }

  Easy easy;
  HeaderList headers;
};

bool transient(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

bool transient(long status) { return status == 429 || status >= 500; }

void back_off(int attempt) { std::this_thread::sleep_for(std::chrono::milliseconds(250 << attempt)); }

std::string escaped(const std::string& text) {
  char* out = curl_easy_escape(nullptr, text.c_str(), static_cast<int>(text.size()));
  std::string result = out ? out : text;
  curl_free(out);
  return result;
}

std::string curl_failure(const Exchange& exchange, CURLcode code) {
  return exchange.curl_error[0] ? std::string(exchange.curl_error) : std::string(curl_easy_strerror(code));
}

// What the server said about an error: X-Error-Message, else the body's "error", else the body.
std::string server_message(const Exchange& exchange) {
  if (std::string message = exchange.last().header("x-error-message"); !message.empty()) return message;
  try {
    Json body = Json::parse(exchange.body);
    if (body.is_object() && body.contains("error") && body["error"].is_string()) return body["error"];
  } catch (const std::exception&) {
  }
  std::string text = exchange.body.substr(0, 200);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

[[noreturn]] void throw_http_error(const HubEnvironment& env, const RepoId& repo, const std::string& revision,
                                   const std::string& file, const Exchange& exchange) {
  const long status = exchange.last().status;
  const std::string what =
      file.empty() ? fmt::format("revision '{}'", revision) : fmt::format("file '{}' at revision '{}'", file, revision);
  std::string said = server_message(exchange);
  said = said.empty() ? "" : fmt::format(" ({})", said);
  const std::string code = exchange.last().header("x-error-code");
  if (status == 401 || status == 403) {
    // The Hub answers 401 for a repository that does not exist as for one the caller may not see.
    const std::string why = code == "GatedRepo" ? "the repository is gated: accept its terms on its Hub page, then "
                            : code == "RepoNotFound" ? "the repository does not exist, or it is private: "
                                                     : "the repository is private or gated: ";
    throw_error(ErrorCode::kUnauthorized, "{}: {}: HTTP {} from {}{}: {}{}", repo.str(), what, status, env.endpoint,
                said, why,
                env.token ? "the token in HF_TOKEN was refused; set HF_TOKEN to a token that may read it"
                          : "set HF_TOKEN to a Hugging Face access token that may read it");
  }
  if (status == 404) {
    if (code == "RevisionNotFound") {
      throw_error(ErrorCode::kNotFound, "{}: HTTP 404 from {}: revision '{}' not found{}", repo.str(), env.endpoint,
                  revision, said);
    }
    if (code == "EntryNotFound" || (!file.empty() && code != "RepoNotFound")) {
      throw_error(ErrorCode::kNotFound, "{}: HTTP 404 from {}: {} not found{}", repo.str(), env.endpoint, what, said);
    }
    throw_error(ErrorCode::kNotFound, "{}: HTTP 404 from {}: repository '{}' or revision '{}' not found{}", repo.str(),
                env.endpoint, repo.str(), revision, said);
  }
  throw_error(status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kLoadFailed, "{}: {}: HTTP {} from {}{}", repo.str(),
              what, status, env.endpoint, said);
}

[[noreturn]] void throw_unreachable(const HubEnvironment& env, const RepoId& repo, const std::string& what,
                                    const Exchange& exchange, CURLcode code) {
  throw_error(ErrorCode::kUnavailable, "{}: {}: cannot reach {}: {}", repo.str(), what, env.endpoint,
              curl_failure(exchange, code));
}

std::optional<uint64_t> parse_size(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(text);
}

// Writes a blob download's body into the .incomplete file, deciding on the first byte whether the
// server resumed (206: append) or started over (200: truncate).
struct BlobSink {
  Exchange* exchange = nullptr;
  const fs::path* path = nullptr;
  FILE* file = nullptr;
  uint64_t have = 0;
  bool started = false;
  const std::function<void(uint64_t)>* on_bytes = nullptr;
};

size_t on_blob_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<BlobSink*>(user);
  const size_t bytes = size * count;
  const long status = sink->exchange->last().status;
  if (status != 200 && status != 206) {
    if (sink->exchange->body.size() < kErrorBodyLimit) sink->exchange->body.append(data, bytes);
    return bytes;
  }
  if (!sink->started) {
    sink->started = true;
    sink->file = std::fopen(sink->path->c_str(), status == 206 && sink->have > 0 ? "ab" : "wb");
    if (sink->file == nullptr) return CURL_WRITEFUNC_ERROR;
  }
  if (std::fwrite(data, 1, bytes, sink->file) != bytes) return CURL_WRITEFUNC_ERROR;
  (*sink->on_bytes)(bytes);
  return bytes;
}

int on_transfer_info(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(user);
  return cancel != nullptr && cancel->load() ? 1 : 0;
}

uint64_t file_size_or_zero(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(size);
}

}  // namespace

std::string normalized_etag(std::string etag) {
  if (etag.starts_with("W/")) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

HubClient::HubClient(HubEnvironment environment) : env_(std::move(environment)) { ensure_curl_initialised(); }

std::string HubClient::resolve_url(const RepoId& repo, const std::string& revision, const std::string& file) const {
  std::string path;
  for (size_t begin = 0; begin <= file.size();) {
    const size_t end = std::min(file.find('/', begin), file.size());
    if (!path.empty()) path += '/';
    path += escaped(file.substr(begin, end - begin));
    begin = end + 1;
  }
  return fmt::format("{}/{}/{}/resolve/{}/{}", env_.endpoint, escaped(repo.org), escaped(repo.name), escaped(revision),
                     path);
}

RevisionInfo HubClient::revision_info(const RepoId& repo, const std::string& revision) const {
  const std::string url = fmt::format("{}/api/models/{}/{}/revision/{}?blobs=true", env_.endpoint, escaped(repo.org),
                                      escaped(repo.name), escaped(revision));
  for (int attempt = 0;; ++attempt) {
    Exchange exchange;
    Request request(env_, url, exchange);
    curl_easy_setopt(request.easy.get(), CURLOPT_FOLLOWLOCATION, 1L);
    const CURLcode code = request.perform();
    const bool retry = attempt + 1 < kAttempts;
    if (code != CURLE_OK) {
      // A Hub that never answered (no route, no connection, connect timeout) is not retried: the
      // cache may serve instead, and an unreachable Hub must fail fast.
      if (transient(code) && retry && !exchange.responses.empty()) {
        back_off(attempt);
        continue;
      }
      throw_unreachable(env_, repo, fmt::format("revision '{}'", revision), exchange, code);
    }
    const long status = exchange.last().status;
    if (transient(status) && retry) {
      back_off(attempt);
      continue;
    }
    if (status != 200) throw_http_error(env_, repo, revision, "", exchange);

    Json body;
    try {
      body = Json::parse(exchange.body);
    } catch (const std::exception& e) {
      throw_error(ErrorCode::kLoadFailed, "{}: revision '{}': {} answered with invalid JSON: {}", repo.str(), revision,
                  url, e.what());
    }
    RevisionInfo info;
    if (!body.is_object() || !body.contains("sha") || !body["sha"].is_string() || !body.contains("siblings") ||
        !body["siblings"].is_array()) {
      throw_error(ErrorCode::kLoadFailed, "{}: revision '{}': {} answered without `sha` and `siblings`", repo.str(),
                  revision, url);
    }
    info.commit = body["sha"];
    for (const Json& sibling : body["siblings"]) {
      if (!sibling.is_object() || !sibling.contains("rfilename") || !sibling["rfilename"].is_string()) continue;
      RepoFile file;
      file.path = sibling["rfilename"];
      if (sibling.contains("lfs") && sibling["lfs"].is_object() && sibling["lfs"].contains("sha256")) {
        const Json& lfs = sibling["lfs"];
        file.lfs = true;
        if (lfs["sha256"].is_string()) file.etag = lfs["sha256"];
        if (lfs.contains("size") && lfs["size"].is_number_unsigned()) file.size = lfs["size"].get<uint64_t>();
      } else {
        if (sibling.contains("blobId") && sibling["blobId"].is_string()) file.etag = sibling["blobId"];
        if (sibling.contains("size") && sibling["size"].is_number_unsigned())
          file.size = sibling["size"].get<uint64_t>();
      }
      info.files.push_back(std::move(file));
    }
    return info;
  }
}

FileMetadata HubClient::file_metadata(const RepoId& repo, const std::string& commit, const std::string& file) const {
  std::string url = resolve_url(repo, commit, file);
  for (int attempt = 0, hops = 0;; ++attempt) {
    Exchange exchange;
    Request request(env_, url, exchange);
    curl_easy_setopt(request.easy.get(), CURLOPT_NOBODY, 1L);
    request.add_header("Accept-Encoding: identity");  // the size of the bytes, not of a compressed form
    const CURLcode code = request.perform();
    if (code != CURLE_OK) {
      if (transient(code) && attempt + 1 < kAttempts && !exchange.responses.empty()) {
        back_off(attempt);
        continue;
      }
      throw_unreachable(env_, repo, fmt::format("file '{}'", file), exchange, code);
    }
    const Response& response = exchange.last();
    if (transient(response.status) && attempt + 1 < kAttempts) {
      back_off(attempt);
      continue;
    }
    // The redirect of an LFS file to the file storage carries X-Linked-*, which describe the file.
    // Another relative redirect stays on the Hub (a renamed repository): follow it.
    const std::string location = response.header("location");
    if (response.status >= 300 && response.status < 400 && response.header("x-linked-etag").empty() &&
        location.starts_with("/") && ++hops <= 5) {
      url = env_.endpoint + location;
      continue;
    }
    if (response.status >= 400) throw_http_error(env_, repo, commit, file, exchange);
    FileMetadata metadata;
    if (std::string linked = response.header("x-linked-etag"); !linked.empty()) {
      metadata.etag = normalized_etag(linked);
      metadata.lfs = true;
    } else {
      metadata.etag = normalized_etag(response.header("etag"));
    }
    std::optional<uint64_t> size = parse_size(response.header("x-linked-size"));
    if (!size) size = parse_size(response.header("content-length"));
    if (metadata.etag.empty() || !size) {
      throw_error(ErrorCode::kLoadFailed, "{}: file '{}': HTTP {} from {} without an ETag and a size", repo.str(), file,
                  response.status, env_.endpoint);
    }
    metadata.size = *size;
    return metadata;
  }
}

void HubClient::download(const RepoId& repo, const std::string& commit, const std::string& file,
                         const std::string& etag, uint64_t size, const fs::path& partial,
                         const std::function<void(uint64_t)>& on_bytes, const std::atomic<bool>* cancel) const {
  const std::string url = resolve_url(repo, commit, file);
  for (int attempt = 0;; ++attempt) {
    uint64_t have = file_size_or_zero(partial);
    if (have > size) {
      fs::resize_file(partial, 0);
      have = 0;
    }
    if (have == size && size > 0) return;

    Exchange exchange;
    Request request(env_, url, exchange);
    BlobSink sink{.exchange = &exchange, .path = &partial, .have = have, .on_bytes = &on_bytes};
    CURL* h = request.easy.get();
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &on_blob_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &on_transfer_info);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, cancel);
    request.add_header("Accept-Encoding: identity");
    if (have > 0) request.add_header(fmt::format("Range: bytes={}-", have));
    const CURLcode code = request.perform();
    if (sink.file != nullptr && std::fclose(sink.file) != 0) {
      throw_error(ErrorCode::kInternal, "{}: file '{}': cannot write {}", repo.str(), file, partial.string());
    }
    if (cancel != nullptr && cancel->load()) {
      throw_error(ErrorCode::kUnavailable, "{}: file '{}': download cancelled", repo.str(), file);
    }
    const bool retry = attempt + 1 < kAttempts;
    const long status = exchange.last().status;
    if (code != CURLE_OK) {
      if (code == CURLE_WRITE_ERROR) {
        throw_error(ErrorCode::kInternal, "{}: file '{}': cannot write {}", repo.str(), file, partial.string());
      }
      if (transient(code) && retry) {
        spdlog::warn("download {}: {}: {} after {} of {} bytes; resuming (attempt {} of {})", repo.str(), file,
                     curl_failure(exchange, code), file_size_or_zero(partial), size, attempt + 2, kAttempts);
        back_off(attempt);
        continue;
      }
      throw_unreachable(env_, repo, fmt::format("file '{}'", file), exchange, code);
    }
    if (status == 416) {  // the range starts at or past the end: what we hold is checked below
      if (file_size_or_zero(partial) == size) return;
      fs::resize_file(partial, 0);
      if (retry) continue;
    }
    if (transient(status) && retry) {
      spdlog::warn("download {}: {}: HTTP {}; retrying (attempt {} of {})", repo.str(), file, status, attempt + 2,
                   kAttempts);
      back_off(attempt);
      continue;
    }
    if (status != 200 && status != 206) throw_http_error(env_, repo, commit, file, exchange);

    std::string served_etag = exchange.any_header("x-linked-etag");
    if (served_etag.empty() && exchange.responses.size() == 1) served_etag = exchange.last().header("etag");
    served_etag = normalized_etag(served_etag);
    if (!served_etag.empty() && served_etag != etag) {
      throw_error(
          ErrorCode::kLoadFailed,
          "{}: file '{}': the Hub now serves etag {} where it listed {} (the revision changed while downloading?)",
          repo.str(), file, served_etag, etag);
    }
    if (std::optional<uint64_t> linked = parse_size(exchange.any_header("x-linked-size")); linked && *linked != size) {
      throw_error(ErrorCode::kLoadFailed, "{}: file '{}': the Hub now gives its size as {} bytes where it listed {}",
                  repo.str(), file, *linked, size);
    }
    const uint64_t got = file_size_or_zero(partial);
    if (got == size) return;
    if (got > size || !retry) {
      throw_error(ErrorCode::kLoadFailed, "{}: file '{}': received {} bytes where the Hub announced {}", repo.str(),
                  file, got, size);
    }
    spdlog::warn("download {}: {}: the connection ended after {} of {} bytes; resuming (attempt {} of {})", repo.str(),
                 file, got, size, attempt + 2, kAttempts);
    back_off(attempt);
  }
}

}  // namespace omni::hub
