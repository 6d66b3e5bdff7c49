//===- TcpComm.cpp - the TCP backend for torchrun-style launches ----------===//
//
// One socket per pair of ranks. Messages carry (communicator, tag, bytes)
// headers; a receiver stashes messages meant for a later receive, so that
// communicators and tags sharing a socket never mix. Messages wait in a
// per-peer outbox until their socket takes them; every operation writes
// the outboxes while it waits under poll(), so neither rings nor sends to
// a peer that is itself sending can deadlock on full socket buffers.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/tcp/TcpComm.h"

#include "runtime/comm/CommQueue.h"
#include "runtime/comm/Reduce.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace dtcc::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x63637464; // "dtcc"
/// The tag of the collectives' own messages (user tags are >= 0).
constexpr int64_t kCollectiveTag = -1;
/// Bytes per read or write call.
constexpr int64_t kMaxIo = int64_t(1) << 30;

/// What a rank tells rank 0, and rank 0 tells everyone (addresses in
/// network byte order).
struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  uint32_t ip;
  uint16_t port;
  uint16_t pad;
};

struct Address {
  uint32_t ip;
  uint16_t port;
  uint16_t pad;
};

struct Header {
  uint32_t magic;
  uint32_t pad;
  uint64_t comm;
  int64_t tag;
  int64_t bytes;
};

std::string errnoText(int e) { return std::strerror(e); }

int remainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                  Clock::now())
                .count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

Status setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return unavailable("fcntl(O_NONBLOCK): ", errnoText(errno));
  return Status::ok();
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/// Waits until `fd` is ready for `events` or the deadline passes.
Status waitFd(int fd, short events, Clock::time_point deadline,
              const std::string &what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remainingMs(deadline));
    if (rc > 0)
      return Status::ok();
    if (rc == 0)
      return deadlineExceeded("timed out ", what);
    if (errno != EINTR)
      return unavailable("poll while ", what, ": ", errnoText(errno));
  }
}

Status writeAll(int fd, const void *data, size_t bytes,
                Clock::time_point deadline, const std::string &what) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      DTCC_RETURN_IF_ERROR(waitFd(fd, POLLOUT, deadline, what));
    } else if (n < 0 && errno != EINTR) {
      return unavailable(what, ": ", errnoText(errno));
    }
  }
  return Status::ok();
}

Status readAll(int fd, void *data, size_t bytes, Clock::time_point deadline,
               const std::string &what) {
  char *p = static_cast<char *>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= n;
    } else if (n == 0) {
      return unavailable(what, ": the connection closed");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      DTCC_RETURN_IF_ERROR(waitFd(fd, POLLIN, deadline, what));
    } else if (errno != EINTR) {
      return unavailable(what, ": ", errnoText(errno));
    }
  }
  return Status::ok();
}

/// A non-blocking listening socket on all interfaces.
StatusOr<int> listenOn(uint16_t port, int backlog, const std::string &what) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return unavailable("socket: ", errnoText(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0 ||
      ::listen(fd, std::max(backlog, 16)) < 0) {
    int e = errno;
    ::close(fd);
    return unavailable("cannot listen on ", what, ": ", errnoText(e));
  }
  Status s = setNonBlocking(fd);
  if (!s.isOk()) {
    ::close(fd);
    return s;
  }
  return fd;
}

StatusOr<int> acceptOne(int listener, Clock::time_point deadline,
                        const std::string &what) {
  for (;;) {
    int fd =
        ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      setNoDelay(fd);
      return fd;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
        errno == ECONNABORTED) {
      DTCC_RETURN_IF_ERROR(waitFd(listener, POLLIN, deadline, what));
      continue;
    }
    return unavailable("accept while ", what, ": ", errnoText(errno));
  }
}

/// Whether `fd` is connected to itself: TCP's simultaneous open lets a
/// connect to an unbound port in the ephemeral range pick that very port
/// as its source while the peer is not listening yet.
bool connectedToItself(int fd) {
  sockaddr_in local{}, peer{};
  socklen_t a = sizeof(local), b = sizeof(peer);
  return getsockname(fd, reinterpret_cast<sockaddr *>(&local), &a) == 0 &&
         getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &b) == 0 &&
         local.sin_port == peer.sin_port &&
         local.sin_addr.s_addr == peer.sin_addr.s_addr;
}

/// Connects to `addr`, retrying while nobody listens yet (the peer may
/// start later), until the deadline.
StatusOr<int> connectTo(const sockaddr_in &addr, Clock::time_point deadline,
                        const std::string &what) {
  int lastError = 0;
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return unavailable("socket: ", errnoText(errno));
    int rc =
        ::connect(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr));
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, std::min(remainingMs(deadline), 1000));
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
          err == 0 && !connectedToItself(fd)) {
        setNoDelay(fd);
        return fd;
      }
      lastError = rc > 0 ? (err ? err : ECONNREFUSED) : ETIMEDOUT;
    } else if (rc == 0 && !connectedToItself(fd)) {
      setNoDelay(fd);
      return fd;
    } else if (rc == 0) {
      lastError = ECONNREFUSED;
    } else {
      lastError = errno;
    }
    ::close(fd);
    if (Clock::now() >= deadline)
      return deadlineExceeded("cannot connect to ", what, ": ",
                              errnoText(lastError));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

StatusOr<sockaddr_in> resolve(const std::string &host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || !result)
    return unavailable("cannot resolve MASTER_ADDR '", host,
                       "': ", gai_strerror(rc));
  sockaddr_in addr = *reinterpret_cast<sockaddr_in *>(result->ai_addr);
  ::freeaddrinfo(result);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

//===----------------------------------------------------------------------===//
// The transport
//===----------------------------------------------------------------------===//

/// How a send handed to the transport stands: written whole to its
/// socket, or failed.
struct SendState {
  bool done = false;
  Status error;
};

/// The sockets of one world, the messages received ahead of their receive
/// and the messages waiting to be written. One operation at a time (the
/// lock).
///
/// Sends never wait for their peer to read: a message joins its peer's
/// outbox behind those already there (so that messages to a peer keep
/// their order on its socket) and goes out as the socket takes it, while
/// this rank goes on. Every later operation writes every outbox while it
/// waits, so messages keep moving whatever this rank waits for.
class TcpTransport {
public:
  using Counters = std::shared_ptr<Communicator::TransportCounters>;

  TcpTransport(int rank, int size)
      : rank_(rank), fds_(size, -1), outbox_(size), broken_(size) {}
  ~TcpTransport() {
    for (int fd : fds_)
      if (fd >= 0)
        ::close(fd);
  }

  int rank() const { return rank_; }
  void setPeer(int rank, int fd) { fds_[rank] = fd; }
  int peerFd(int rank) const { return fds_[rank]; }
  std::recursive_mutex &lock() { return mu_; }

  /// Queues `bytes` of `data` for world rank `peer` on communicator `comm`
  /// with `tag`, and writes what the sockets take now. `data` is read until
  /// the state says done. A message to this rank itself is stashed at once.
  /// What the socket writes of the message (header and payload) count
  /// into `counters` (null: not counted).
  StatusOr<std::shared_ptr<SendState>>
  post(int peer, const void *data, int64_t bytes, uint64_t comm, int64_t tag,
       Counters counters);
  /// Writes what the sockets take now of every outbox; never blocks.
  void flushAll();
  /// Copies the payload of the queued message of `state` out of its
  /// sender's buffer, which may then go away: the message still goes out
  /// whole, so the peer's socket keeps its framing.
  void detach(const SendState *state);
  /// Blocks until `sent` (if not null) is written and a message from world
  /// rank `recvPeer` (if >= 0) on `comm` with `tag` is received into
  /// `recvData`, writing every outbox meanwhile.
  Status progress(const SendState *sent, int recvPeer, void *recvData,
                  int64_t recvBytes, uint64_t comm, int64_t tag);

  /// Sends `sendBytes` to world rank `sendPeer` and receives `recvBytes`
  /// from `recvPeer` at once (either may be -1: none), on communicator
  /// `comm` with `tag`.
  Status exchange(int sendPeer, const void *sendData, int64_t sendBytes,
                  int recvPeer, void *recvData, int64_t recvBytes,
                  uint64_t comm, int64_t tag, const Counters &counters);

private:
  using Key = std::tuple<int, uint64_t, int64_t>; // peer, comm, tag

  /// A message in an outbox. Deque elements stay in place, so the header
  /// can be written from here.
  struct Outgoing {
    Header header;
    const char *data;
    int64_t written; ///< of the header and payload
    std::shared_ptr<SendState> state;
    std::vector<char> owned; ///< the payload, once detached
    Counters counters;       ///< the sending communicator's
  };

  /// Writes what `peer`'s socket takes of its outbox. A socket error fails
  /// every message of the outbox, and every later one to that peer.
  void flush(int peer);

  Status closed(int peer) const {
    return peerLost("rank ", peer,
                    " closed its connection (it exited or crashed)");
  }
  Status ioError(int peer, int e) const {
    return unavailable("connection to rank ", peer, ": ", errnoText(e));
  }

  int rank_;
  std::vector<int> fds_;
  std::recursive_mutex mu_;
  std::map<Key, std::deque<std::vector<uint8_t>>> stash_;
  /// By world rank: the messages not yet written whole, oldest first.
  std::vector<std::deque<Outgoing>> outbox_;
  /// By world rank: why its socket can no longer be written to.
  std::vector<Status> broken_;
};

StatusOr<std::shared_ptr<SendState>>
TcpTransport::post(int peer, const void *data, int64_t bytes, uint64_t comm,
                   int64_t tag, Counters counters) {
  auto state = std::make_shared<SendState>();
  if (peer == rank_) { // a message to oneself
    const uint8_t *p = static_cast<const uint8_t *>(data);
    stash_[{rank_, comm, tag}].emplace_back(p, p + bytes);
    state->done = true;
    return state;
  }
  DTCC_RETURN_IF_ERROR(broken_[peer]);
  outbox_[peer].push_back({Header{kMagic, 0, comm, tag, bytes},
                           static_cast<const char *>(data), 0, state, {},
                           std::move(counters)});
  flush(peer);
  return state;
}

void TcpTransport::flush(int peer) {
  std::deque<Outgoing> &box = outbox_[peer];
  while (!box.empty()) {
    Outgoing &m = box.front();
    const int64_t headerBytes = sizeof(Header);
    const int64_t payload = m.header.bytes;
    iovec iov[2];
    int count = 0;
    if (m.written < headerBytes) {
      iov[count++] = {reinterpret_cast<char *>(&m.header) + m.written,
                      size_t(headerBytes - m.written)};
      if (payload > 0)
        iov[count++] = {const_cast<char *>(m.data),
                        size_t(std::min(payload, kMaxIo))};
    } else {
      const int64_t off = m.written - headerBytes;
      iov[count++] = {const_cast<char *>(m.data) + off,
                      size_t(std::min(payload - off, kMaxIo))};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t w = ::sendmsg(fds_[peer], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      // What the socket took, as the socket said: the measured traffic.
      if (m.counters) {
        m.counters->bytes.fetch_add(w);
        m.counters->headers.fetch_add(
            std::min<int64_t>(w, std::max<int64_t>(0, headerBytes - m.written)));
      }
      m.written += w;
      if (m.written == headerBytes + payload) {
        m.state->done = true;
        box.pop_front();
      }
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w == 0 || errno == EAGAIN || errno == EWOULDBLOCK)
      return; // the socket is full: later
    Status error = errno == EPIPE || errno == ECONNRESET ? closed(peer)
                                                         : ioError(peer, errno);
    broken_[peer] = error;
    for (Outgoing &o : box)
      o.state->error = error;
    box.clear();
  }
}

void TcpTransport::flushAll() {
  for (int peer = 0; peer < static_cast<int>(outbox_.size()); ++peer)
    if (!outbox_[peer].empty())
      flush(peer);
}

void TcpTransport::detach(const SendState *state) {
  for (std::deque<Outgoing> &box : outbox_)
    for (Outgoing &m : box)
      if (m.state.get() == state && m.owned.empty()) {
        m.owned.assign(m.data, m.data + m.header.bytes);
        m.data = m.owned.data();
        return;
      }
}

Status TcpTransport::exchange(int sendPeer, const void *sendData,
                              int64_t sendBytes, int recvPeer, void *recvData,
                              int64_t recvBytes, uint64_t comm, int64_t tag,
                              const Counters &counters) {
  std::shared_ptr<SendState> sent;
  if (sendPeer >= 0) {
    DTCC_ASSIGN_OR_RETURN(
        sent, post(sendPeer, sendData, sendBytes, comm, tag, counters));
  }
  Status status =
      progress(sent.get(), recvPeer, recvData, recvBytes, comm, tag);
  // Failed on the receive with the send still queued: the caller's buffer
  // (often a collective's temporary) goes away with this call.
  if (!status.isOk() && sent && !sent->done && sent->error.isOk())
    detach(sent.get());
  return status;
}

Status TcpTransport::progress(const SendState *sent, int recvPeer,
                              void *recvData, int64_t recvBytes, uint64_t comm,
                              int64_t tag) {
  bool recvDone = recvPeer < 0;
  if (!recvDone) {
    auto it = stash_.find({recvPeer, comm, tag});
    if (it != stash_.end() && !it->second.empty()) {
      std::vector<uint8_t> &m = it->second.front();
      if (static_cast<int64_t>(m.size()) != recvBytes)
        return invalidArgument("rank ", recvPeer, " sent ", m.size(),
                               " bytes with tag ", tag, ", expected ",
                               recvBytes);
      std::memcpy(recvData, m.data(), m.size());
      it->second.pop_front();
      if (it->second.empty())
        stash_.erase(it);
      recvDone = true;
    } else if (recvPeer == rank_) {
      return invalidArgument("receiving from this rank itself with tag ", tag,
                             " before sending it");
    }
  }

  Header header{};
  int64_t headerGot = 0, payloadBytes = 0, payloadGot = 0;
  bool inPayload = false, matched = false;
  uint8_t *dst = nullptr;
  std::vector<uint8_t> early;
  std::vector<pollfd> fds;
  std::vector<int> peers;

  for (;;) {
    if (sent && !sent->error.isOk())
      return sent->error;
    if ((!sent || sent->done) && recvDone)
      return Status::ok();
    // Every outbox with something to write, and the socket to read.
    fds.clear();
    peers.clear();
    int ri = -1;
    for (int p = 0; p < static_cast<int>(fds_.size()); ++p) {
      short events = outbox_[p].empty() ? 0 : POLLOUT;
      if (!recvDone && p == recvPeer) {
        events |= POLLIN;
        ri = static_cast<int>(fds.size());
      }
      if (events) {
        fds.push_back({fds_[p], events, 0});
        peers.push_back(p);
      }
    }
    if (fds.empty())
      return internalError("rank ", rank_,
                           ": a send is neither written nor queued");
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR)
        continue;
      return unavailable("poll: ", errnoText(errno));
    }
    for (size_t i = 0; i < fds.size(); ++i)
      if ((fds[i].revents & (POLLOUT | POLLERR | POLLHUP)) &&
          !outbox_[peers[i]].empty())
        flush(peers[i]);

    if (ri >= 0 && (fds[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
      const int fd = fds_[recvPeer];
      Status error;
      // Bytes read into p (up to n); 0 when the socket is dry or on error.
      auto readSome = [&](void *p, int64_t n) -> int64_t {
        for (;;) {
          ssize_t r = ::recv(fd, p, size_t(std::min(n, kMaxIo)), 0);
          if (r > 0)
            return r;
          if (r == 0)
            error = closed(recvPeer);
          else if (errno == EINTR)
            continue;
          else if (errno != EAGAIN && errno != EWOULDBLOCK)
            error = errno == ECONNRESET ? closed(recvPeer)
                                        : ioError(recvPeer, errno);
          return 0;
        }
      };
      // Read whole messages until ours is complete or the socket is dry.
      while (!recvDone) {
        if (!inPayload) {
          int64_t r = readSome(reinterpret_cast<char *>(&header) + headerGot,
                               sizeof(Header) - headerGot);
          if (r == 0)
            break;
          headerGot += r;
          if (headerGot < int64_t(sizeof(Header)))
            continue;
          if (header.magic != kMagic || header.bytes < 0)
            return dataLoss("corrupt message header from rank ", recvPeer);
          matched = header.comm == comm && header.tag == tag;
          if (matched && header.bytes != recvBytes)
            return invalidArgument("rank ", recvPeer, " sent ", header.bytes,
                                   " bytes with tag ", tag, ", expected ",
                                   recvBytes);
          if (matched) {
            dst = static_cast<uint8_t *>(recvData);
          } else {
            early.resize(header.bytes);
            dst = early.data();
          }
          payloadBytes = header.bytes;
          payloadGot = 0;
          inPayload = true;
        }
        if (payloadGot < payloadBytes) {
          int64_t r = readSome(dst + payloadGot, payloadBytes - payloadGot);
          if (r == 0)
            break;
          payloadGot += r;
          if (payloadGot < payloadBytes)
            continue;
        }
        inPayload = false;
        headerGot = 0;
        if (matched) {
          recvDone = true;
        } else {
          stash_[{recvPeer, header.comm, header.tag}].push_back(
              std::move(early));
          early = {};
        }
      }
      DTCC_RETURN_IF_ERROR(error);
    }
  }
}

/// A send in a peer's outbox.
class TcpPendingSend final : public PendingSend {
public:
  TcpPendingSend(std::shared_ptr<TcpTransport> transport,
                 std::shared_ptr<SendState> state)
      : t_(std::move(transport)), state_(std::move(state)) {}
  /// Abandoned unfinished: the message goes out from a copy.
  ~TcpPendingSend() override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    if (!state_->done && state_->error.isOk())
      t_->detach(state_.get());
  }

  StatusOr<bool> test() override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    if (!state_->done && state_->error.isOk())
      t_->flushAll();
    DTCC_RETURN_IF_ERROR(state_->error);
    return state_->done;
  }
  Status wait() override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    return t_->progress(state_.get(), -1, nullptr, 0, 0, 0);
  }

private:
  std::shared_ptr<TcpTransport> t_;
  std::shared_ptr<SendState> state_;
};

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

int mod(int a, int n) { return ((a % n) + n) % n; }

class TcpCommunicator final : public Communicator {
public:
  TcpCommunicator(std::string name, int rank, std::vector<int> worldRanks,
                  std::shared_ptr<TcpTransport> transport, uint64_t id)
      : Communicator(std::move(name), rank, std::move(worldRanks)),
        t_(std::move(transport)), id_(id) {}

  const char *transportName() const override { return "tcp"; }

protected:
  Status doAllReduce(const void *in, void *out, int64_t count, DType dtype,
                     ReduceKind kind) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    const int64_t esz = dtypeSize(dtype);
    const int n = size(), r = rank();
    char *o = static_cast<char *>(out);
    if (in != out)
      std::memcpy(out, in, count * esz);
    // Ring: reduce-scatter of n blocks, then all-gather of the results.
    auto lo = [&](int b) { return count * b / n; };
    auto len = [&](int b) { return lo(b + 1) - lo(b); };
    std::vector<char> tmp((count / n + 1) * esz);
    for (int s = 0; s < n - 1; ++s) {
      int sb = mod(r - s, n), rb = mod(r - s - 1, n);
      DTCC_RETURN_IF_ERROR(
          step(o + lo(sb) * esz, len(sb) * esz, tmp.data(), len(rb) * esz));
      DTCC_RETURN_IF_ERROR(
          comm::combine(o + lo(rb) * esz, tmp.data(), len(rb), dtype, kind));
    }
    for (int s = 0; s < n - 1; ++s) {
      int sb = mod(r + 1 - s, n), rb = mod(r - s, n);
      DTCC_RETURN_IF_ERROR(step(o + lo(sb) * esz, len(sb) * esz,
                                o + lo(rb) * esz, len(rb) * esz));
    }
    return Status::ok();
  }

  Status doAllGather(const void *in, void *out, int64_t countPerRank,
                     DType dtype) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    const int64_t b = countPerRank * dtypeSize(dtype);
    const int n = size(), r = rank();
    char *o = static_cast<char *>(out);
    if (in != o + r * b)
      std::memcpy(o + r * b, in, b);
    for (int s = 0; s < n - 1; ++s) {
      int sb = mod(r - s, n), rb = mod(r - s - 1, n);
      DTCC_RETURN_IF_ERROR(step(o + sb * b, b, o + rb * b, b));
    }
    return Status::ok();
  }

  Status doReduceScatter(const void *in, void *out, int64_t countPerRank,
                         DType dtype, ReduceKind kind) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    const int64_t b = countPerRank * dtypeSize(dtype);
    const int n = size(), r = rank();
    const char *i = static_cast<const char *>(in);
    // Ring: at step s this rank receives the partial sum of block r-s-2,
    // adds its own, and passes it on; the last one received is block r.
    std::vector<char> bufs(2 * b);
    const char *sendPtr = i + mod(r - 1, n) * b;
    char *recvPtr = nullptr;
    for (int s = 0; s < n - 1; ++s) {
      int rb = mod(r - s - 2, n);
      recvPtr = bufs.data() + (s % 2) * b;
      DTCC_RETURN_IF_ERROR(step(sendPtr, b, recvPtr, b));
      DTCC_RETURN_IF_ERROR(
          comm::combine(recvPtr, i + rb * b, countPerRank, dtype, kind));
      sendPtr = recvPtr;
    }
    std::memcpy(out, recvPtr, b);
    return Status::ok();
  }

  Status doAllToAll(const void *in, void *out, int64_t countPerRank,
                    DType dtype) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    const int64_t b = countPerRank * dtypeSize(dtype);
    const int n = size(), r = rank();
    std::vector<char> copy;
    const char *src = static_cast<const char *>(in);
    char *o = static_cast<char *>(out);
    if (in == out) {
      copy.assign(src, src + n * b);
      src = copy.data();
    }
    std::memcpy(o + r * b, src + r * b, b);
    for (int s = 1; s < n; ++s) {
      int to = mod(r + s, n), from = mod(r - s, n);
      DTCC_RETURN_IF_ERROR(t_->exchange(worldRanks()[to], src + to * b, b,
                                        worldRanks()[from], o + from * b, b,
                                        id_, kCollectiveTag,
                                        transportCounters()));
    }
    return Status::ok();
  }

  Status doBroadcast(void *data, int64_t count, DType dtype,
                     int root) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    const int64_t b = count * dtypeSize(dtype);
    if (rank() != root)
      return t_->exchange(-1, nullptr, 0, worldRanks()[root], data, b, id_,
                          kCollectiveTag, nullptr);
    for (int i = 0; i < size(); ++i)
      if (i != root)
        DTCC_RETURN_IF_ERROR(t_->exchange(worldRanks()[i], data, b, -1, nullptr,
                                          0, id_, kCollectiveTag,
                                          transportCounters()));
    return Status::ok();
  }

  StatusOr<std::unique_ptr<PendingSend>>
  doStartSend(const void *data, int64_t bytes, int peer, int64_t tag) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    DTCC_ASSIGN_OR_RETURN(std::shared_ptr<SendState> state,
                          t_->post(worldRanks()[peer], data, bytes, id_, tag,
                                   transportCounters()));
    DTCC_RETURN_IF_ERROR(state->error);
    if (state->done)
      return std::unique_ptr<PendingSend>();
    return std::unique_ptr<PendingSend>(
        std::make_unique<TcpPendingSend>(t_, std::move(state)));
  }

  Status doRecv(void *data, int64_t bytes, int peer, int64_t tag) override {
    std::lock_guard<std::recursive_mutex> lock(t_->lock());
    return t_->exchange(-1, nullptr, 0, worldRanks()[peer], data, bytes, id_,
                        tag, nullptr);
  }

  Status doBarrier() override {
    std::vector<uint8_t> in(1, 1), out(size());
    return doAllGather(in.data(), out.data(), 1, DType::kU8);
  }

private:
  /// One ring step: send to the next rank, receive from the previous.
  Status step(const void *sendData, int64_t sendBytes, void *recvData,
              int64_t recvBytes) {
    return t_->exchange(worldRanks()[mod(rank() + 1, size())], sendData,
                        sendBytes, worldRanks()[mod(rank() - 1, size())],
                        recvData, recvBytes, id_, kCollectiveTag,
                        transportCounters());
  }

  std::shared_ptr<TcpTransport> t_;
  uint64_t id_;
};

//===----------------------------------------------------------------------===//
// The world
//===----------------------------------------------------------------------===//

class TcpWorld final : public World {
public:
  static StatusOr<std::unique_ptr<World>> create(const LaunchInfo &launch,
                                                 double timeoutSeconds);
  ~TcpWorld() override { stopQueue(); }

  Communicator &world() override { return *world_; }

  StatusOr<std::unique_ptr<Communicator>> split(const std::string &name,
                                                int color, int key) override {
    std::vector<int32_t> mine = {color, key}, all(2 * size());
    DTCC_RETURN_IF_ERROR(
        world_->allGather(mine.data(), all.data(), 2, DType::kI32));
    const uint64_t sequence = ++splits_;
    if (color < 0)
      return std::unique_ptr<Communicator>();
    std::vector<std::pair<int, int>> members; // (key, world rank)
    for (int w = 0; w < size(); ++w)
      if (all[2 * w] == color)
        members.push_back({all[2 * w + 1], w});
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    int me = -1;
    for (auto &[k, w] : members) {
      if (w == rank())
        me = static_cast<int>(ranks.size());
      ranks.push_back(w);
    }
    // Every rank counts splits alike, so (sequence, color) names the group
    // on all of its members.
    uint64_t id = (sequence << 32) | uint32_t(color);
    return std::unique_ptr<Communicator>(std::make_unique<TcpCommunicator>(
        name, me, std::move(ranks), transport_, id));
  }

private:
  explicit TcpWorld(const LaunchInfo &launch) : World(launch) {}
  Status connect(double timeoutSeconds);

  std::shared_ptr<TcpTransport> transport_;
  std::unique_ptr<TcpCommunicator> world_;
  uint64_t splits_ = 0;
};

Status TcpWorld::connect(double timeoutSeconds) {
  const LaunchInfo &l = launch();
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeoutSeconds));
  const std::string master = strCat("rank 0 at MASTER_ADDR:MASTER_PORT (",
                                    l.masterAddr, ":", l.masterPort, ")");
  transport_ = std::make_shared<TcpTransport>(l.rank, l.size);
  TcpTransport &t = *transport_;

  if (l.rank == 0) {
    DTCC_ASSIGN_OR_RETURN(int listener,
                          listenOn(static_cast<uint16_t>(l.masterPort), l.size,
                                   strCat("MASTER_PORT ", l.masterPort)));
    std::vector<Address> table(l.size);
    std::vector<int> pending;
    Status status;
    for (int joined = 1; joined < l.size && status.isOk(); ++joined) {
      auto fd = acceptOne(listener, deadline, "waiting for the ranks");
      if (!fd.isOk()) {
        std::string missing;
        for (int r = 1; r < l.size; ++r)
          if (t.peerFd(r) < 0)
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        status = deadlineExceeded(
            "rank 0 waited ", timeoutSeconds, " s at MASTER_PORT ",
            l.masterPort, " but rank", l.size - joined > 1 ? "s " : " ",
            missing, " of WORLD_SIZE=", l.size, " never connected");
        break;
      }
      Hello h{};
      status = readAll(fd.value(), &h, sizeof(h), deadline,
                       "reading a rank's hello");
      if (status.isOk() && (h.magic != kMagic || h.rank < 1 ||
                            h.rank >= l.size || t.peerFd(h.rank) >= 0))
        status = invalidArgument("rank 0 got a bad or duplicate hello (rank ",
                                 h.rank, "): is another job using MASTER_PORT ",
                                 l.masterPort, "?");
      else if (status.isOk() && h.size != l.size)
        status = invalidArgument("rank ", h.rank, " has WORLD_SIZE=", h.size,
                                 " but rank 0 has WORLD_SIZE=", l.size);
      if (!status.isOk()) {
        ::close(fd.value());
        break;
      }
      t.setPeer(h.rank, fd.value());
      table[h.rank] = {h.ip, h.port, 0};
    }
    ::close(listener);
    DTCC_RETURN_IF_ERROR(status);
    for (int r = 1; r < l.size; ++r)
      DTCC_RETURN_IF_ERROR(writeAll(t.peerFd(r), table.data(),
                                    table.size() * sizeof(Address), deadline,
                                    strCat("sending addresses to rank ", r)));
    return Status::ok();
  }

  // Listen first, so that higher ranks can connect whenever they get here.
  DTCC_ASSIGN_OR_RETURN(int listener, listenOn(0, l.size, "an ephemeral port"));
  sockaddr_in own{};
  socklen_t len = sizeof(own);
  getsockname(listener, reinterpret_cast<sockaddr *>(&own), &len);

  Status status = [&]() -> Status {
    DTCC_ASSIGN_OR_RETURN(sockaddr_in masterAddr,
                          resolve(l.masterAddr, l.masterPort));
    DTCC_ASSIGN_OR_RETURN(int fd, connectTo(masterAddr, deadline, master));
    t.setPeer(0, fd);
    // The address others reach this rank at: the one its route to rank 0
    // leaves from.
    sockaddr_in local{};
    socklen_t localLen = sizeof(local);
    getsockname(fd, reinterpret_cast<sockaddr *>(&local), &localLen);
    Hello h{kMagic, l.rank, l.size, local.sin_addr.s_addr, own.sin_port, 0};
    DTCC_RETURN_IF_ERROR(
        writeAll(fd, &h, sizeof(h), deadline, "greeting " + master));
    std::vector<Address> table(l.size);
    DTCC_RETURN_IF_ERROR(
        readAll(fd, table.data(), table.size() * sizeof(Address), deadline,
                "waiting for " + master +
                    " to collect every rank (it may have rejected this one)"));
    for (int r = 1; r < l.rank; ++r) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = table[r].ip;
      addr.sin_port = table[r].port;
      DTCC_ASSIGN_OR_RETURN(int peer,
                            connectTo(addr, deadline, strCat("rank ", r)));
      t.setPeer(r, peer);
      Hello hp{kMagic, l.rank, l.size, 0, 0, 0};
      DTCC_RETURN_IF_ERROR(writeAll(peer, &hp, sizeof(hp), deadline,
                                    strCat("greeting rank ", r)));
    }
    for (int joined = l.rank + 1; joined < l.size; ++joined) {
      DTCC_ASSIGN_OR_RETURN(
          int peer,
          acceptOne(listener, deadline, "waiting for higher ranks to connect"));
      Hello hp{};
      Status s = readAll(peer, &hp, sizeof(hp), deadline, "reading a hello");
      if (s.isOk() && (hp.magic != kMagic || hp.rank <= l.rank ||
                       hp.rank >= l.size || t.peerFd(hp.rank) >= 0))
        s = invalidArgument("bad or duplicate hello from rank ", hp.rank);
      if (!s.isOk()) {
        ::close(peer);
        return s;
      }
      t.setPeer(hp.rank, peer);
    }
    return Status::ok();
  }();
  ::close(listener);
  return status;
}

StatusOr<std::unique_ptr<World>> TcpWorld::create(const LaunchInfo &launch,
                                                  double timeoutSeconds) {
  std::unique_ptr<TcpWorld> world(new TcpWorld(launch));
  if (launch.size > 1)
    DTCC_RETURN_IF_ERROR(world->connect(timeoutSeconds)
                             .withContext(strCat("rank ", launch.rank,
                                                 " connecting the ranks "
                                                 "(torchrun-style launch)")));
  else
    world->transport_ = std::make_shared<TcpTransport>(0, 1);
  std::vector<int> ranks(launch.size);
  for (int i = 0; i < launch.size; ++i)
    ranks[i] = i;
  world->world_ = std::make_unique<TcpCommunicator>(
      "world", launch.rank, std::move(ranks), world->transport_, 0);
  return std::unique_ptr<World>(std::move(world));
}

} // namespace

StatusOr<std::unique_ptr<World>> createTcpWorld(const LaunchInfo &launch,
                                                double connectTimeoutSeconds) {
  return TcpWorld::create(launch, connectTimeoutSeconds);
}

} // namespace dtcc::runtime
