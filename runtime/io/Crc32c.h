//===- Crc32c.h - CRC-32C (Castagnoli) checksums ----------------*- C++ -*-===//
//
// The checksum of checkpoint files: CRC-32C as in iSCSI, ext4 and gRPC
// (polynomial 0x1EDC6F41, reflected), with the SSE4.2 instruction where the
// CPU has it and an eight-table software loop elsewhere.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_IO_CRC32C_H
#define DTCC_RUNTIME_IO_CRC32C_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtcc::runtime {

/// Extends `crc` (0 to start) by `size` bytes of `data`:
/// crc32c(crc32c(0, a), b) == crc32c(0, a + b).
uint32_t crc32c(uint32_t crc, const void *data, size_t size);
/// The software loop alone (tests compare it with the instruction).
uint32_t crc32cPortable(uint32_t crc, const void *data, size_t size);
/// Whether crc32c() uses the SSE4.2 instruction on this CPU.
bool crc32cHasHardware();

/// "e3069283": eight lowercase hex digits, as checkpoints store it.
std::string crc32cHex(uint32_t crc);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_IO_CRC32C_H
