// Models by Hugging Face id end to end: `omnistage download`, `serve` and `config` against a mock
// Hub on loopback (mock_hub.cjs) that serves a demo checkpoint. Checks the shared cache layout
// (blobs named by etag, relative snapshot links, refs), the files left out, serving from the cache
// with HF_HUB_OFFLINE=1 and the mock stopped, a dropped connection resumed with a Range, a download
// killed half-way resumed on the next start, and the 401 and 404 errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "hub/sha256.h"
#include "integration/serve_process.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kRepo = "org/demo";

pid_t spawn(const std::vector<std::string>& argv, const fs::path& log, const std::vector<std::string>& env = {}) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = freopen(log.c_str(), "w", stdout);
    if (out == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(127);
    for (const std::string& entry : env) putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void stop(pid_t& pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  pid = -1;
}

// mock_hub.cjs in a child process; its request log read back as JSON lines.
class MockHub {
 public:
  MockHub(const fs::path& work, const fs::path& repo_dir, Json options = Json::object()) : work_(work) {
    static int count = 0;
    const std::string tag = std::to_string(++count);
    options["dir"] = repo_dir.string();
    options["repo"] = kRepo;
    options["portFile"] = (work / ("hub" + tag + ".port")).string();
    options["logFile"] = log_ = work / ("hub" + tag + ".requests");
    const fs::path config = work / ("hub" + tag + ".json");
    std::ofstream(config) << options.dump();
    pid_ = spawn({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/mock_hub.cjs", config.string()},
                 work / ("hub" + tag + ".log"));
    for (auto deadline = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < deadline;) {
      if (fs::exists(options["portFile"].get<std::string>())) {
        port_ = std::stoi(read_file(options["portFile"].get<std::string>()));
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "the mock Hub did not start: " << read_file(work / ("hub" + tag + ".log"));
  }
  ~MockHub() { stop(pid_); }
  void shut_down() { stop(pid_); }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::vector<Json> requests() const {
    std::vector<Json> out;
    std::istringstream lines(read_file(log_));
    for (std::string line; std::getline(lines, line);) out.push_back(Json::parse(line));
    return out;
  }
  // The requests whose path contains `part`.
  std::vector<Json> requests_for(const std::string& part) const {
    std::vector<Json> out;
    for (const Json& request : requests()) {
      if (request["path"].get<std::string>().find(part) != std::string::npos) out.push_back(request);
    }
    return out;
  }

 private:
  fs::path work_;
  fs::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// Sets environment variables for the processes this test starts itself (ServeProcess inherits the
// environment), and removes them again.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::vector<std::string>& entries) {
    for (const std::string& entry : entries) {
      const size_t equals = entry.find('=');
      names_.push_back(entry.substr(0, equals));
      setenv(names_.back().c_str(), entry.c_str() + equals + 1, 1);
    }
  }
  ~ScopedEnv() {
    for (const std::string& name : names_) unsetenv(name.c_str());
  }

 private:
  std::vector<std::string> names_;
};

std::string git_blob_id(const fs::path& file) {
  ProcessResult result = run_process({"/usr/bin/git", "hash-object", file.string()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return result.out.substr(0, 40);
}

class HubDownloadTest : public ::testing::Test {
 protected:
  // One demo checkpoint for the suite, plus files a pipeline does not need and one in a folder.
  static void SetUpTestSuite() {
    suite_dir_ = std::make_unique<TempDir>();
    ProcessResult made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "qwen3", "--out", repo_dir().string()});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    suite_dir_->write("repo/README.md", "# demo\n");
    suite_dir_->write("repo/pytorch_model.bin", std::string(4096, 'b'));
    suite_dir_->write("repo/onnx/model.onnx", std::string(2048, 'o'));
    suite_dir_->write("repo/assets/logo.png", std::string(512, 'p'));
    suite_dir_->write("repo/speech_tokenizer/config.json", "{\"model_type\": \"demo_codec\"}\n");
  }
  static void TearDownTestSuite() { suite_dir_.reset(); }
  static fs::path repo_dir() { return suite_dir_->path() / "repo"; }

  fs::path cache() const { return dir_.path() / "cache"; }
  fs::path repo_cache() const { return cache() / "models--org--demo"; }

  // The environment of every omnistage run: this test's cache and Hub, no token from the machine;
  // `extra` entries replace these.
  std::vector<std::string> env(const MockHub& hub, const std::vector<std::string>& extra = {}) const {
    std::map<std::string, std::string> vars = {{"HF_ENDPOINT", hub.endpoint()},
                                               {"HF_HUB_CACHE", cache().string()},
                                               {"HF_HOME", (dir_.path() / "hf_home").string()},
                                               {"HF_TOKEN", ""},
                                               {"HF_HUB_OFFLINE", ""},
                                               {"HF_HUB_DOWNLOAD_TIMEOUT", "5"}};
    for (const std::string& entry : extra) vars[entry.substr(0, entry.find('='))] = entry.substr(entry.find('=') + 1);
    std::vector<std::string> out;
    for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
    return out;
  }

  ProcessResult download(const MockHub& hub, std::vector<std::string> args = {}, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {OMNISTAGE_BINARY, "download", kRepo};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env(hub, std::move(extra)));
  }

  // The snapshot entry of `file` resolves to the checkpoint's bytes through a relative link to the
  // blob named by `etag`.
  void expect_linked(const fs::path& snapshot, const std::string& file, const std::string& etag) {
    const fs::path link = snapshot / file;
    ASSERT_TRUE(fs::is_symlink(link)) << file;
    const fs::path target = fs::read_symlink(link);
    EXPECT_TRUE(target.is_relative()) << file << " -> " << target;
    std::string ups;
    for (auto part = fs::path(file).parent_path(); !part.empty(); part = part.parent_path()) ups += "../";
    EXPECT_EQ(target.string(), ups + "../../blobs/" + etag) << file;
    EXPECT_TRUE(fs::equivalent(link, repo_cache() / "blobs" / etag)) << file;
    EXPECT_EQ(read_file(link), read_file(repo_dir() / file)) << file;
  }

  TempDir dir_;
  static inline std::unique_ptr<TempDir> suite_dir_;
};

TEST_F(HubDownloadTest, DownloadsTheNeededFilesIntoTheSharedCacheLayout) {
  MockHub hub(dir_.path(), repo_dir());
  ProcessResult first = download(hub);
  ASSERT_EQ(first.exit_code, 0) << first.err;

  const std::string commit = read_file(repo_cache() / "refs" / "main");
  ASSERT_EQ(commit.size(), 40u) << commit;
  const fs::path snapshot = repo_cache() / "snapshots" / commit;
  EXPECT_EQ(first.out, snapshot.string() + "\n") << "download prints the snapshot folder";

  // LFS files are named by their sha256, the others by their git blob id: the etags the Hub gives.
  const std::string weights_sha = hub::sha256_hex(read_file(repo_dir() / "model.safetensors"));
  expect_linked(snapshot, "model.safetensors", weights_sha);
  for (const char* file : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "speech_tokenizer/config.json"}) {
    expect_linked(snapshot, file, git_blob_id(repo_dir() / file));
  }
  for (const char* file : {"README.md", "pytorch_model.bin", "onnx/model.onnx", "assets/logo.png"}) {
    EXPECT_FALSE(fs::exists(snapshot / file)) << file << " is not needed by a pipeline";
    EXPECT_TRUE(hub.requests_for(file).empty()) << file << " was requested";
  }
  EXPECT_TRUE(fs::exists(cache() / ".locks" / "models--org--demo" / (weights_sha + ".lock")));
  for (const auto& entry : fs::directory_iterator(repo_cache() / "blobs")) {
    EXPECT_NE(entry.path().extension(), ".incomplete") << entry.path();
  }
  EXPECT_NE(first.err.find("download org/demo:"), std::string::npos) << "log lines off a terminal:\n" << first.err;

  // A second run finds every blob in the cache: it asks for the revision and downloads nothing.
  const size_t before = hub.requests().size();
  ProcessResult second = download(hub);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, first.out);
  const std::vector<Json> requests = hub.requests();
  ASSERT_EQ(requests.size(), before + 1);
  EXPECT_EQ(requests.back()["path"], "/api/models/org/demo/revision/main");

  // A Hub that cannot be reached at all: the complete cached snapshot serves, with a warning.
  ProcessResult unreachable = download(hub, {}, {"HF_ENDPOINT=http://127.0.0.1:9"});
  ASSERT_EQ(unreachable.exit_code, 0) << unreachable.err;
  EXPECT_EQ(unreachable.out, first.out);
  EXPECT_NE(unreachable.err.find("cannot reach http://127.0.0.1:9"), std::string::npos) << unreachable.err;
  EXPECT_NE(unreachable.err.find("using the cached snapshot " + snapshot.string()), std::string::npos)
      << unreachable.err;
}

TEST_F(HubDownloadTest, ServesAHubIdThenServesItOfflineFromTheCache) {
  const Json chat = {{"model", kModelName},
                     {"messages", Json::array({{{"role", "user"}, {"content", "Hello"}}})},
                     {"max_tokens", 4},
                     {"temperature", 0}};
  std::string first_reply;
  {
    MockHub hub(dir_.path(), repo_dir());
    ScopedEnv scoped(env(hub));
    // --tokenizer may name a repository too (here the same one: its tokenizer files are in place).
    ServeProcess server(kRepo, dir_.path() / "serve1.log", {"--tokenizer", kRepo});
    ASSERT_GT(server.port(), 0);
    EXPECT_NE(server.log().find("model org/demo (revision main, commit "), std::string::npos) << server.log();
    HttpResult reply = curl(server, "/v1/chat/completions", chat.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    first_reply = Json::parse(reply.body)["choices"][0]["message"]["content"];
    EXPECT_EQ(Json::parse(reply.body)["usage"]["completion_tokens"], 4);
    ASSERT_EQ(server.terminate(30s), 0);
    EXPECT_FALSE(hub.requests_for("/cdn/").empty());
  }
  // The mock Hub is gone: offline, the snapshot comes from the cache alone.
  ScopedEnv scoped({"HF_ENDPOINT=http://127.0.0.1:9", "HF_HUB_CACHE=" + cache().string(),
                    "HF_HOME=" + (dir_.path() / "hf_home").string(), "HF_HUB_OFFLINE=1"});
  // A commit hash needs no ref: it names the snapshot folder.
  const std::string commit = read_file(repo_cache() / "refs" / "main");
  ServeProcess offline(kRepo, dir_.path() / "serve2.log", {"--revision", commit});
  ASSERT_GT(offline.port(), 0);
  EXPECT_NE(offline.log().find("model org/demo (revision " + commit + ", commit " + commit + "): " +
                               (repo_cache() / "snapshots" / commit).string() + " (HF_HUB_OFFLINE: from the cache)"),
            std::string::npos)
      << offline.log();
  HttpResult reply = curl(offline, "/v1/chat/completions", chat.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(Json::parse(reply.body)["choices"][0]["message"]["content"], first_reply) << "greedy, same weights";
  EXPECT_EQ(offline.terminate(30s), 0);
}

TEST_F(HubDownloadTest, OfflineWithoutTheFilesNamesWhatIsMissing) {
  MockHub hub(dir_.path(), repo_dir());
  ProcessResult empty = download(hub, {}, {"HF_HUB_OFFLINE=1"});
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_NE(empty.err.find("org/demo: revision 'main' is not in the Hub cache"), std::string::npos) << empty.err;
  EXPECT_NE(empty.err.find("HF_HUB_OFFLINE is set: run `omnistage download org/demo`"), std::string::npos) << empty.err;
  EXPECT_TRUE(hub.requests().empty()) << "offline means no request at all";

  ASSERT_EQ(download(hub).exit_code, 0);
  const std::string weights_sha = hub::sha256_hex(read_file(repo_dir() / "model.safetensors"));
  fs::remove(repo_cache() / "blobs" / weights_sha);
  ProcessResult partial = download(hub, {}, {"HF_HUB_OFFLINE=1"});
  EXPECT_NE(partial.exit_code, 0);
  EXPECT_NE(partial.err.find("of revision 'main' lacks *.safetensors (no weights), model.safetensors"),
            std::string::npos)
      << partial.err;
}

TEST_F(HubDownloadTest, ADroppedConnectionResumesWithARangeAndChecksTheSha256) {
  const uint64_t size = fs::file_size(repo_dir() / "model.safetensors");
  const uint64_t drop_at = size / 2;
  // Without sizes and etags in the listing, every file's metadata comes from a HEAD request.
  MockHub hub(dir_.path(), repo_dir(),
              {{"noBlobMetadata", true}, {"drop", {{"file", "model.safetensors"}, {"bytes", drop_at}}}});
  ProcessResult result = download(hub);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("resuming"), std::string::npos) << result.err;

  const std::string sha = hub::sha256_hex(read_file(repo_dir() / "model.safetensors"));
  const std::vector<Json> heads = hub.requests_for("/resolve/");
  EXPECT_TRUE(std::any_of(heads.begin(), heads.end(), [](const Json& r) { return r["method"] == "HEAD"; }));
  const std::vector<Json> transfers = hub.requests_for("/cdn/" + sha);
  ASSERT_EQ(transfers.size(), 2u);
  EXPECT_TRUE(transfers[0]["range"].is_null());
  ASSERT_TRUE(transfers[1]["range"].is_string());
  const std::string range = transfers[1]["range"];
  ASSERT_TRUE(range.starts_with("bytes=") && range.ends_with("-")) << range;
  const uint64_t resumed_at = std::stoull(range.substr(6));
  EXPECT_GT(resumed_at, 0u);
  EXPECT_LE(resumed_at, drop_at);
  EXPECT_EQ(hub::sha256_file_hex(repo_cache() / "blobs" / sha), sha);
}

TEST_F(HubDownloadTest, ADownloadKilledHalfWayResumesOnTheNextStart) {
  const uint64_t size = fs::file_size(repo_dir() / "model.safetensors");
  const std::string sha = hub::sha256_hex(read_file(repo_dir() / "model.safetensors"));
  const fs::path partial = repo_cache() / "blobs" / (sha + ".incomplete");
  uint64_t kept = 0;
  {
    MockHub stalling(dir_.path(), repo_dir(), {{"stall", {{"file", "model.safetensors"}, {"bytes", size / 2}}}});
    pid_t pid = spawn({OMNISTAGE_BINARY, "download", kRepo}, dir_.path() / "killed.log", env(stalling));
    for (auto deadline = std::chrono::steady_clock::now() + 20s;
         std::chrono::steady_clock::now() < deadline && kept < size / 4;) {
      std::error_code ec;
      kept = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
      std::this_thread::sleep_for(20ms);
    }
    stop(pid);  // SIGTERM mid-file
    ASSERT_GE(kept, size / 4) << read_file(dir_.path() / "killed.log");
    kept = fs::file_size(partial);
    EXPECT_LE(kept, size / 2);
  }
  MockHub hub(dir_.path(), repo_dir());
  ProcessResult result = download(hub);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("model.safetensors: resuming at byte " + std::to_string(kept)), std::string::npos)
      << result.err;
  const std::vector<Json> transfers = hub.requests_for("/cdn/" + sha);
  ASSERT_EQ(transfers.size(), 1u);
  EXPECT_EQ(transfers[0]["range"], "bytes=" + std::to_string(kept) + "-");
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_EQ(hub::sha256_file_hex(repo_cache() / "blobs" / sha), sha);
}

TEST_F(HubDownloadTest, TwoProcessesSharingTheCacheDownloadEachBlobOnce) {
  MockHub hub(dir_.path(), repo_dir());
  pid_t a = spawn({OMNISTAGE_BINARY, "download", kRepo}, dir_.path() / "a.log", env(hub));
  pid_t b = spawn({OMNISTAGE_BINARY, "download", kRepo}, dir_.path() / "b.log", env(hub));
  int status_a = 0;
  int status_b = 0;
  waitpid(a, &status_a, 0);
  waitpid(b, &status_b, 0);
  ASSERT_TRUE(WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0) << read_file(dir_.path() / "a.log");
  ASSERT_TRUE(WIFEXITED(status_b) && WEXITSTATUS(status_b) == 0) << read_file(dir_.path() / "b.log");
  const std::string sha = hub::sha256_hex(read_file(repo_dir() / "model.safetensors"));
  EXPECT_EQ(hub.requests_for("/cdn/" + sha).size(), 1u) << "the second process waited for the first one's blob";
  EXPECT_EQ(hub.requests_for("/tokenizer.json").size(), 1u) << "small files go through the lock too";
  EXPECT_EQ(hub::sha256_file_hex(repo_cache() / "blobs" / sha), sha);
}

TEST_F(HubDownloadTest, GenerateTakesAHubId) {
  MockHub hub(dir_.path(), repo_dir());
  ProcessResult result = run_process({OMNISTAGE_BINARY, "generate", "--model", kRepo, "--prompt-token-ids", "1,2,3",
                                      "--max-tokens", "2", "--temperature", "0"},
                                     env(hub));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("model org/demo (revision main, commit "), std::string::npos) << result.err;
  EXPECT_FALSE(hub.requests_for("/cdn/").empty());
}

TEST_F(HubDownloadTest, AGatedRepositorySaysToSetHfToken) {
  MockHub hub(dir_.path(), repo_dir(), {{"token", "hf_secret"}});
  ProcessResult refused = download(hub);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("org/demo: revision 'main': HTTP 401 from " + hub.endpoint()), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("the repository is gated: accept its terms on its Hub page, then set HF_TOKEN"),
            std::string::npos)
      << refused.err;

  ProcessResult wrong = download(hub, {}, {"HF_TOKEN=hf_wrong"});
  EXPECT_NE(wrong.err.find("the token in HF_TOKEN was refused"), std::string::npos) << wrong.err;

  ProcessResult allowed = download(hub, {}, {"HF_TOKEN=hf_secret"});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  const std::vector<Json> resolves = hub.requests_for("/resolve/");
  ASSERT_FALSE(resolves.empty());
  for (const Json& request : resolves) EXPECT_EQ(request["auth"], "Bearer hf_secret") << request.dump();
}

TEST_F(HubDownloadTest, AMissingRepositoryOrRevisionIsA404NamingIt) {
  MockHub hub(dir_.path(), repo_dir());
  ProcessResult repo = run_process({OMNISTAGE_BINARY, "download", "org/missing"}, env(hub));
  EXPECT_NE(repo.exit_code, 0);
  EXPECT_NE(repo.err.find("org/missing: HTTP 404 from " + hub.endpoint() +
                          ": repository 'org/missing' or revision 'main' not found"),
            std::string::npos)
      << repo.err;

  ProcessResult revision = download(hub, {"--revision", "v9"});
  EXPECT_NE(revision.exit_code, 0);
  EXPECT_NE(revision.err.find("org/demo: HTTP 404 from " + hub.endpoint() + ": revision 'v9' not found"),
            std::string::npos)
      << revision.err;
  EXPECT_FALSE(fs::exists(repo_cache() / "refs" / "v9"));

  ProcessResult local = run_process({OMNISTAGE_BINARY, "download", "./not/an/id"}, env(hub));
  EXPECT_NE(local.exit_code, 0);
  EXPECT_NE(local.err.find("'./not/an/id' is not a Hugging Face repository id"), std::string::npos) << local.err;
}

TEST_F(HubDownloadTest, ServeChecksTheConfigurationBeforeDownloadingWeights) {
  // A repository whose pipeline omnistage cannot serve yet: serve stops before fetching weights.
  dir_.write("omni/config.json", R"({"model_type": "qwen2_5_omni"})");
  dir_.write("omni/model.safetensors", std::string(1 << 20, 'w'));
  MockHub hub(dir_.path(), dir_.path() / "omni");
  ProcessResult result = run_process({OMNISTAGE_BINARY, "serve", kRepo, "--port", "0"}, env(hub));
  EXPECT_EQ(result.exit_code, 69) << result.err;
  EXPECT_NE(result.err.find("pipeline 'qwen2_5_omni' is configured and valid, but it cannot be served yet"),
            std::string::npos)
      << result.err;
  EXPECT_FALSE(hub.requests_for("/config.json").empty());
  EXPECT_TRUE(hub.requests_for("/cdn/").empty()) << "no weights were downloaded";
}

TEST_F(HubDownloadTest, ConfigOfAHubIdDownloadsOnlyTheConfigFiles) {
  MockHub hub(dir_.path(), repo_dir());
  ProcessResult result = run_process({OMNISTAGE_BINARY, "config", kRepo, "--format", "json"}, env(hub));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(Json::parse(result.out)["pipeline"], "qwen3") << result.out;
  EXPECT_FALSE(hub.requests_for("/config.json").empty());
  EXPECT_TRUE(hub.requests_for("model.safetensors").empty()) << "config reads no weights";
  EXPECT_TRUE(hub.requests_for("tokenizer.json").empty());
}

}  // namespace
}  // namespace omni::testing
