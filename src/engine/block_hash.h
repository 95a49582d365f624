// Prefix-cache keys for full KV blocks. A block's hash covers its kKvBlockSize tokens and the hash
// of the block before it, so two blocks with equal hashes hold the KV of equal token prefixes
// (up to a 64-bit collision, which the block pool rules out by also comparing the tokens).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace omni::engine {

using BlockHash = uint64_t;

// The parent hash of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0x6f6d6e6973746167ull;

// The hash of one full block of tokens (exactly model::kKvBlockSize of them) after `parent`.
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens);

// Appends to `hashes` the hashes of the full blocks of `tokens` that it does not cover yet, so that
// it ends with one hash per full block. `hashes` must be the chain of a prefix of `tokens`.
void extend_block_hashes(std::span<const int32_t> tokens, std::vector<BlockHash>& hashes);

}  // namespace omni::engine
