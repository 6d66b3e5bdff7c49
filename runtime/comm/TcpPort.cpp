//===- TcpPort.cpp - choosing rank 0's port on this host ------------------===//

#include "runtime/comm/TcpPort.h"

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <unistd.h>

namespace dtcc::runtime {

namespace {
/// Binds a TCP socket to `port` on all interfaces (as listenOn does); the
/// port bound (the kernel's choice for 0), or -1.
int bindProbe(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  socklen_t len = sizeof(addr);
  int bound = -1;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
    bound = ntohs(addr.sin_port);
  ::close(fd);
  return bound;
}
} // namespace

int pickFreeTcpPort() {
  int ephemeralLow = 32768;
  if (std::FILE *f =
          std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int lo = 0, hi = 0;
    if (std::fscanf(f, "%d %d", &lo, &hi) == 2 && lo > 0)
      ephemeralLow = lo;
    std::fclose(f);
  }
  // Up to 16384 ports below the ephemeral range, none under 1024.
  const int high = ephemeralLow, low = std::max(1024, high - 16384);
  if (high - low >= 64) {
    std::mt19937 rng(
        std::random_device{}() ^ static_cast<unsigned>(::getpid()) ^
        static_cast<unsigned>(
            std::chrono::steady_clock::now().time_since_epoch().count()));
    std::uniform_int_distribution<int> pick(low, high - 1);
    for (int tries = 0; tries < 64; ++tries) {
      const int port = pick(rng);
      if (bindProbe(static_cast<uint16_t>(port)) == port)
        return port;
    }
  }
  const int any = bindProbe(0);
  return any > 0 ? any : 29500;
}

} // namespace dtcc::runtime
