//===- TokenData.h - memory-mapped token files for training -----*- C++ -*-===//
//
// The token loader of the training ABI (docs/training-abi.md): a flat file of
// little-endian uint16 or uint32 tokens from which each sample's window is
// drawn by splitmix64 of (seed, sample index), so batches depend only on the
// seed and the step.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_TOKENDATA_H
#define DTCC_RUNTIME_EXEC_TOKENDATA_H

#include "runtime/base/HostTensor.h"
#include "runtime/base/Status.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dtcc::runtime {

/// The element type of a token file (`--data-dtype`).
enum class TokenDType { kU16, kU32 };

/// Parses "uint16" / "uint32".
StatusOr<TokenDType> parseTokenDType(const std::string &name);
const char *tokenDTypeName(TokenDType dtype);

/// The window start of sample `k` in a file of `numTokens` tokens, for
/// sequences of `seqLen`: splitmix64(seed ^ splitmix64(k)) % (numTokens -
/// seqLen). Requires numTokens > seqLen.
int64_t tokenSampleOffset(uint64_t seed, uint64_t k, int64_t numTokens,
                          int64_t seqLen);

/// A read-only token file mapped into memory.
class TokenData {
public:
  ~TokenData();
  TokenData(const TokenData &) = delete;
  TokenData &operator=(const TokenData &) = delete;

  /// Maps `path`. Rejects a missing file, a size that is not a whole number
  /// of tokens, and files with fewer than `seqLen + 1` tokens. `vocabSize`
  /// (0: unknown) bounds the token values; they are checked as they are
  /// drawn, so that opening a large file stays cheap.
  static StatusOr<std::unique_ptr<TokenData>> open(const std::string &path,
                                                   TokenDType dtype,
                                                   int64_t seqLen,
                                                   int64_t vocabSize = 0);

  int64_t numTokens() const { return numTokens_; }
  int64_t seqLen() const { return seqLen_; }
  TokenDType dtype() const { return dtype_; }
  const std::string &path() const { return path_; }
  /// Token `i` (0 <= i < numTokens()).
  uint32_t token(int64_t i) const;

  /// Fills `ids` and `labels` (both [rows, seqLen], i32 or i64) with samples
  /// `firstSample` .. `firstSample + rows - 1`: row r holds the window of
  /// sample firstSample + r, labels shifted by one token.
  Status fill(uint64_t seed, uint64_t firstSample, HostTensor &ids,
              HostTensor &labels) const;

private:
  TokenData() = default;

  std::string path_;
  TokenDType dtype_ = TokenDType::kU16;
  int64_t seqLen_ = 0, numTokens_ = 0, vocabSize_ = 0;
  void *mapping_ = nullptr;
  size_t mappingSize_ = 0;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_TOKENDATA_H
