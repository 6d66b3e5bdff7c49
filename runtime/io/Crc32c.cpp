//===- Crc32c.cpp - CRC-32C (Castagnoli) checksums ------------------------===//

#include "runtime/io/Crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

namespace dtcc::runtime {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u; // 0x1EDC6F41 reflected

/// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i)
        c = (c >> 1) ^ (kPolynomial & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k)
        t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
};

const Tables &tables() {
  static const Tables instance;
  return instance;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32cSse42(uint32_t crc,
                                                        const uint8_t *p,
                                                        size_t n) {
  uint64_t c = ~crc;
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  while (n--)
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}
#endif

} // namespace

uint32_t crc32cPortable(uint32_t crc, const void *data, size_t size) {
  const auto &t = tables().t;
  const uint8_t *p = static_cast<const uint8_t *>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c; // little-endian hosts only, as everywhere in dtcc
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^
        t[4][lo >> 24] ^ t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^
        t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size--)
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

bool crc32cHasHardware() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32c(uint32_t crc, const void *data, size_t size) {
#if defined(__x86_64__)
  if (crc32cHasHardware())
    return crc32cSse42(crc, static_cast<const uint8_t *>(data), size);
#endif
  return crc32cPortable(crc, data, size);
}

std::string crc32cHex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

} // namespace dtcc::runtime
