// The Hub layer without a network: repository ids, the environment variables, the cache layout
// and its relative links, the files a pipeline needs, sha256, and resolving from the cache alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "base/error.h"
#include "hub/blob_lock.h"
#include "hub/cache_layout.h"
#include "hub/download_progress.h"
#include "hub/file_selection.h"
#include "hub/hub_client.h"
#include "hub/hub_environment.h"
#include "hub/repo_id.h"
#include "hub/sha256.h"
#include "hub/snapshot.h"
#include "support/temp_dir.h"

namespace omni::hub {
namespace {

namespace fs = std::filesystem;
using omni::testing::TempDir;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RepoId, ParsesOrgSlashNameOnly) {
  ASSERT_TRUE(parse_repo_id("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"));
  EXPECT_EQ(parse_repo_id("Qwen/Qwen3-0.6B")->org, "Qwen");
  EXPECT_EQ(parse_repo_id("Qwen/Qwen3-0.6B")->name, "Qwen3-0.6B");
  EXPECT_EQ(parse_repo_id("a_b/c.d")->str(), "a_b/c.d");
  for (const char* text : {"gpt2", "/data/models/x", "./a/b", "a/b/c", "a/", "/b", "../b", "a/..", "a/b.", "-a/b",
                           "a--b/c", "a b/c", "a/b?c", ""}) {
    EXPECT_FALSE(parse_repo_id(text)) << text;
  }
}

TEST(HubEnvironment, CacheRootPrecedenceAsHuggingfaceHub) {
  std::map<std::string, std::string> vars = {{"HOME", "/home/u"}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(hub_environment(getenv).cache_root, "/home/u/.cache/huggingface/hub");
  vars["XDG_CACHE_HOME"] = "/xdg";
  EXPECT_EQ(hub_environment(getenv).cache_root, "/xdg/huggingface/hub");
  vars["HF_HOME"] = "/hf";
  EXPECT_EQ(hub_environment(getenv).cache_root, "/hf/hub");
  vars["HUGGINGFACE_HUB_CACHE"] = "/legacy";
  EXPECT_EQ(hub_environment(getenv).cache_root, "/legacy");
  vars["HF_HUB_CACHE"] = "/cache";
  EXPECT_EQ(hub_environment(getenv).cache_root, "/cache");
  EXPECT_EQ(hub_environment(getenv, "/download").cache_root, "/download") << "--download-dir wins";
}

TEST(HubEnvironment, EndpointTokenOfflineAndTimeout) {
  TempDir dir;
  std::map<std::string, std::string> vars = {{"HOME", "/home/u"}, {"HF_HOME", dir.path().string()}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  HubEnvironment plain = hub_environment(getenv);
  EXPECT_EQ(plain.endpoint, "https://huggingface.co");
  EXPECT_FALSE(plain.token);
  EXPECT_FALSE(plain.offline);
  EXPECT_EQ(plain.download_timeout_s, 10);

  dir.write("token", "hf_from_file\n");
  EXPECT_EQ(hub_environment(getenv).token, "hf_from_file") << "what `huggingface-cli login` saved";
  vars["HUGGING_FACE_HUB_TOKEN"] = "hf_legacy";
  EXPECT_EQ(hub_environment(getenv).token, "hf_legacy");
  vars["HF_TOKEN"] = "hf_env";
  EXPECT_EQ(hub_environment(getenv).token, "hf_env");

  vars["HF_ENDPOINT"] = "http://127.0.0.1:8080//";
  EXPECT_EQ(hub_environment(getenv).endpoint, "http://127.0.0.1:8080");
  for (const char* on : {"1", "true", "YES", "On"}) {
    vars["HF_HUB_OFFLINE"] = on;
    EXPECT_TRUE(hub_environment(getenv).offline) << on;
  }
  vars["HF_HUB_OFFLINE"] = "0";
  EXPECT_FALSE(hub_environment(getenv).offline);

  vars["HF_HUB_DOWNLOAD_TIMEOUT"] = "3";
  EXPECT_EQ(hub_environment(getenv).download_timeout_s, 3);
  vars["HF_HUB_DOWNLOAD_TIMEOUT"] = "soon";
  EXPECT_NE(error_of([&] { hub_environment(getenv); }).find("HF_HUB_DOWNLOAD_TIMEOUT=soon"), std::string::npos);
}

TEST(CacheLayout, PathsOfTheSharedCache) {
  const RepoCache cache("/c", {"Qwen", "Qwen3-0.6B"});
  EXPECT_EQ(repo_folder_name(cache.repo()), "models--Qwen--Qwen3-0.6B");
  EXPECT_EQ(cache.dir(), "/c/models--Qwen--Qwen3-0.6B");
  EXPECT_EQ(cache.blob("abc"), "/c/models--Qwen--Qwen3-0.6B/blobs/abc");
  EXPECT_EQ(cache.incomplete_blob("abc"), "/c/models--Qwen--Qwen3-0.6B/blobs/abc.incomplete");
  EXPECT_EQ(cache.blob_lock("abc"), "/c/.locks/models--Qwen--Qwen3-0.6B/abc.lock");
  EXPECT_EQ(cache.snapshot(kCommit), fs::path("/c/models--Qwen--Qwen3-0.6B/snapshots") / kCommit);
  EXPECT_EQ(cache.ref("main"), "/c/models--Qwen--Qwen3-0.6B/refs/main");
  EXPECT_EQ(cache.ref("refs/pr/1"), "/c/models--Qwen--Qwen3-0.6B/refs/refs/pr/1");
  EXPECT_TRUE(is_commit_hash(kCommit));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
}

TEST(CacheLayout, SnapshotEntriesAreRelativeLinksToBlobs) {
  TempDir dir;
  const RepoCache cache(dir.path(), {"org", "name"});
  dir.write("models--org--name/blobs/e1", "weights");
  dir.write("models--org--name/blobs/e2", "codec");
  cache.link_snapshot_file(kCommit, "model.safetensors", "e1");
  cache.link_snapshot_file(kCommit, "speech_tokenizer/model.safetensors", "e2");
  EXPECT_EQ(fs::read_symlink(cache.snapshot(kCommit) / "model.safetensors"), "../../blobs/e1");
  EXPECT_EQ(fs::read_symlink(cache.snapshot(kCommit) / "speech_tokenizer/model.safetensors"), "../../../blobs/e2");
  std::ifstream in(cache.snapshot(kCommit) / "speech_tokenizer/model.safetensors");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "codec");
  // Relinking replaces the entry.
  cache.link_snapshot_file(kCommit, "model.safetensors", "e2");
  EXPECT_EQ(fs::read_symlink(cache.snapshot(kCommit) / "model.safetensors"), "../../blobs/e2");
}

TEST(CacheLayout, RefsAndCachedCommits) {
  TempDir dir;
  const RepoCache cache(dir.path(), {"org", "name"});
  EXPECT_FALSE(cache.read_ref("main"));
  EXPECT_FALSE(cache.cached_commit("main"));
  cache.write_ref("main", kCommit);
  EXPECT_EQ(cache.read_ref("main"), kCommit);
  EXPECT_EQ(cache.cached_commit("main"), kCommit);
  EXPECT_FALSE(cache.cached_commit(kCommit)) << "a commit counts only with its snapshot folder";
  fs::create_directories(cache.snapshot(kCommit));
  EXPECT_EQ(cache.cached_commit(kCommit), kCommit);
  dir.write("models--org--name/refs/broken", "not a commit");
  EXPECT_FALSE(cache.read_ref("broken"));
}

TEST(CacheLayout, RejectsPathsAndEtagsThatLeaveTheCache) {
  const RepoId repo{"org", "name"};
  for (const char* file : {"model.safetensors", "speech_tokenizer/config.json", "a/b/c.json"}) {
    EXPECT_NO_THROW(check_repo_file_path(repo, file)) << file;
  }
  for (const char* file : {"../x.json", "/etc/passwd", "a//b", "a/./b", "a\\b", "a/..", ""}) {
    EXPECT_NE(error_of([&] { check_repo_file_path(repo, file); }).find("org/name: the Hub listed a file named"),
              std::string::npos)
        << file;
  }
  EXPECT_NO_THROW(check_etag(repo, "f", "0a1b2c"));
  EXPECT_NE(error_of([&] { check_etag(repo, "f", "../../x"); }).find("org/name: f: the Hub sent the etag '../../x'"),
            std::string::npos);
}

TEST(FileSelection, OnlyWhatAPipelineReads) {
  for (const char* file : {"config.json",
                           "generation_config.json",
                           "model.safetensors",
                           "model-00001-of-00002.safetensors",
                           "model.safetensors.index.json",
                           "tokenizer.json",
                           "tokenizer_config.json",
                           "vocab.json",
                           "merges.txt",
                           "special_tokens_map.json",
                           "added_tokens.json",
                           "preprocessor_config.json",
                           "processor_config.json",
                           "video_preprocessor_config.json",
                           "chat_template.json",
                           "chat_template.jinja",
                           "speech_tokenizer/config.json",
                           "speech_tokenizer/configuration.json",
                           "speech_tokenizer/model.safetensors",
                           "speech_tokenizer/preprocessor_config.json",
                           "model_index.json",
                           "vae/diffusion_pytorch_model.safetensors",
                           "scheduler/scheduler_config.json",
                           "spk_dict.pt"}) {
    EXPECT_TRUE(wanted_file(file, FileSet::kPipeline)) << file;
  }
  for (const char* file :
       {"pytorch_model.bin", "model.pt", "onnx/model.onnx", "model.gguf", "README.md", "assets/logo.png",
        ".gitattributes", "original/consolidated.safetensors", "LICENSE", "flax_model.msgpack", "tf_model.h5"}) {
    EXPECT_FALSE(wanted_file(file, FileSet::kPipeline)) << file;
  }
  EXPECT_TRUE(wanted_file("config.json", FileSet::kConfig));
  EXPECT_TRUE(wanted_file("speech_tokenizer/config.json", FileSet::kConfig));
  EXPECT_FALSE(wanted_file("tokenizer.json", FileSet::kConfig));
  EXPECT_FALSE(wanted_file("model.safetensors", FileSet::kConfig));
  EXPECT_TRUE(wanted_file("tokenizer.json", FileSet::kTokenizer));
  EXPECT_TRUE(wanted_file("chat_template.jinja", FileSet::kTokenizer));
  EXPECT_FALSE(wanted_file("model.safetensors", FileSet::kTokenizer));
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  TempDir dir;
  const std::string big(3 << 20, 'x');  // more than one read buffer
  EXPECT_EQ(sha256_file_hex(dir.write("big", big)), sha256_hex(big));
  EXPECT_NE(error_of([&] { sha256_file_hex(dir.path() / "missing"); }).find("missing"), std::string::npos);
}

TEST(BlobLock, ASecondHolderWaitsForTheFirst) {
  TempDir dir;
  const fs::path file = dir.path() / ".locks" / "models--org--name" / "e1.lock";
  std::atomic<bool> second_holds{false};
  std::thread second;
  {
    BlobLock first(file, "org/name model.safetensors");
    EXPECT_TRUE(fs::exists(file));
    // flock is per open file: another BlobLock on the same file blocks, in this process as in another.
    second = std::thread([&] {
      BlobLock lock(file, "org/name model.safetensors");
      second_holds = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(second_holds) << "the lock is held";
  }
  second.join();
  EXPECT_TRUE(second_holds) << "released when the first holder went away";
  BlobLock again(file, "org/name model.safetensors");
}

TEST(HubClient, ResolveUrlsAndEtags) {
  HubEnvironment env;
  env.endpoint = "http://hub.test";
  const HubClient client(env);
  EXPECT_EQ(client.resolve_url({"org", "name"}, "main", "speech_tokenizer/model.safetensors"),
            "http://hub.test/org/name/resolve/main/speech_tokenizer/model.safetensors");
  EXPECT_EQ(client.resolve_url({"org", "name"}, "refs/pr/1", "a b.json"),
            "http://hub.test/org/name/resolve/refs%2Fpr%2F1/a%20b.json");
  EXPECT_EQ(normalized_etag("\"abc\""), "abc");
  EXPECT_EQ(normalized_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalized_etag("abc"), "abc");
}

TEST(DownloadProgress, HumanBytes) {
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1500), "1.50 kB");
  EXPECT_EQ(human_bytes(39'000'000), "39.0 MB");
  EXPECT_EQ(human_bytes(1'234'000'000'000), "1.23 TB");
}

// A cache written the way a download leaves it: blobs, links and refs/main.
class CachedSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.cache_root = dir_.path();
    env_.offline = true;
    request_.repo = {"org", "name"};
    cache_.write_ref("main", kCommit);
    add("config.json", "{}");
    add("tokenizer.json", "{}");
    add("model.safetensors.index.json",
        R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
    add("model-00001-of-00002.safetensors", "w1");
    add("model-00002-of-00002.safetensors", "w2");
    add("README.md", "#");
  }
  void add(const std::string& file, const std::string& text) {
    const std::string etag = sha256_hex(text);
    dir_.write("models--org--name/blobs/" + etag, text);
    cache_.link_snapshot_file(kCommit, file, etag);
  }

  TempDir dir_;
  HubEnvironment env_;
  SnapshotRequest request_;
  RepoCache cache_{dir_.path(), {"org", "name"}};
};

TEST_F(CachedSnapshotTest, ACompleteSnapshotResolvesThroughItsRef) {
  const Snapshot snapshot = cached_snapshot(env_, request_);
  EXPECT_EQ(snapshot.dir, cache_.snapshot(kCommit));
  EXPECT_EQ(snapshot.commit, kCommit);
  EXPECT_EQ(snapshot.files, (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                      "model-00002-of-00002.safetensors",
                                                      "model.safetensors.index.json", "tokenizer.json"}));
  request_.revision = kCommit;
  EXPECT_EQ(cached_snapshot(env_, request_).dir, cache_.snapshot(kCommit)) << "a commit hash needs no ref";
  EXPECT_EQ(fetch_snapshot(env_, request_).dir, cache_.snapshot(kCommit)) << "offline: no network";
}

TEST_F(CachedSnapshotTest, NamesTheMissingRefShardAndBlob) {
  request_.revision = "v2";
  std::string message = error_of([&] { cached_snapshot(env_, request_); });
  EXPECT_NE(message.find("org/name: revision 'v2' is not in the Hub cache"), std::string::npos) << message;
  EXPECT_NE(message.find((cache_.dir() / "refs" / "v2").string()), std::string::npos) << message;
  EXPECT_NE(message.find("HF_HUB_OFFLINE is set: run `omnistage download org/name --revision v2` once online"),
            std::string::npos)
      << message;

  request_.revision = "main";
  fs::remove(cache_.snapshot(kCommit) / "model-00002-of-00002.safetensors");
  fs::remove(dir_.path() / "models--org--name/blobs" / sha256_hex("{}"));  // config.json's and tokenizer.json's
  message = error_of([&] { cached_snapshot(env_, request_); });
  EXPECT_NE(message.find("lacks config.json, model-00002-of-00002.safetensors, tokenizer.json"), std::string::npos)
      << message;

  request_.files = FileSet::kConfig;
  message = error_of([&] { cached_snapshot(env_, request_); });
  EXPECT_NE(message.find("lacks config.json"), std::string::npos) << message;
  EXPECT_EQ(message.find("model-00002"), std::string::npos) << "config needs no weights: " << message;
}

}  // namespace
}  // namespace omni::hub
