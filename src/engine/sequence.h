// One sequence as the scheduler and the KV cache manager see it: its tokens, how many of them have
// KV in the cache, and the blocks holding that KV. (A request with n completions has n sequences.)
// Owned by the engine; the scheduler and the KV cache manager keep pointers to it while it is
// unfinished. Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/block_hash.h"

namespace omni::engine {

// waiting -> running -> finished; running -> preempted (KV freed, back at the head of the waiting
// queue) -> running (recomputes its prompt and output so far) -> ...; any -> finished on abort.
enum class SequenceStatus { kWaiting, kRunning, kPreempted, kFinished };

// What token_ids holds at the positions of an embedded prompt.
inline constexpr int32_t kNoToken = -1;

struct Sequence {
  int64_t id = 0;                  // unique in its engine, increasing in arrival order
  std::vector<int32_t> token_ids;  // the prompt, then every sampled token
  int num_prompt_tokens = 0;
  // The leading tokens whose KV is in block_ids: written by a finished forward or found in the prefix
  // cache. The rest (at least the last sampled token while running) are fed to the next forward.
  int num_computed_tokens = 0;
  std::vector<int32_t> block_ids;  // block i holds positions [i*kKvBlockSize, (i+1)*kKvBlockSize)
  // Prefix-cache bookkeeping: the hash chain of the full blocks of token_ids (extended lazily) and
  // how many leading blocks of block_ids are already registered in or taken from the cache.
  std::vector<BlockHash> block_hashes;
  int num_cached_blocks = 0;
  // Tokens sampled by a step still on the device (async scheduling): not in token_ids yet, but
  // scheduled as if they were (0 or 1).
  int num_placeholders = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  int num_preemptions = 0;
  // The prompt is rows the model builds (model/embedding_input_lm.h), not token ids: token_ids holds
  // kNoToken at its positions, prompt_token_ids() is empty, and no block of it is prefix-cached.
  bool embedded_prompt = false;
  // The prompt holds media placeholders (whose KV depends on the media, not on the ids): none of
  // its blocks is prefix-cached.
  bool media_prompt = false;
  // Every row of it is computed for a downstream stage (CausalLm::downstream_layer): none of its
  // blocks is taken from or given to the prefix cache.
  bool feeds_downstream = false;
  // Its model cannot build its next step until more streamed input comes
  // (EmbeddingInputLm::ready): the scheduler passes it over.
  bool awaiting_input = false;
  // > 0: admission takes blocks for this many tokens at once, so that the sequence never grows its
  // KV and is never preempted (a model that cannot recompute it).
  int reserved_tokens = 0;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt_token_ids() const {
    return {token_ids.data(), embedded_prompt ? 0 : size_t(num_prompt_tokens)};
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span<const int32_t>(token_ids).subspan(num_prompt_tokens);
  }
};

}  // namespace omni::engine
