// tests/fuzz/fuzz_ring.cpp — libFuzzer target of what the TCP ring reads from
// its previous rank (net/dist/ring.cpp, net/dist/frame.cpp): the ring
// handshake and then the frames of one collective.
//
// Input: byte 0 picks the collective (bits 0-1: all-reduce, broadcast,
// barrier; bits 2-3: f32, f16, bf16, f64; bit 4: sum or average; bit 5:
// broadcast root 0 or 1), byte 1 its element count (0-255), then 84 bytes
// checked as the previous rank's RingHello (ring_hello_mismatch, as
// tcp_comm.cpp does), then the byte stream the previous rank sends: frame
// headers (magic, version, header CRC), payloads (CRC-32C), heartbeats,
// aborts, goodbyes. Rank 0 of a world of 2 runs the collective with the
// real Ring over a socket pair that holds those bytes and then ends (a lost
// rank, unless the frames completed the collective).
// Seeds: tests/fuzz/corpus/fuzz_ring (tests/fuzz/make_seeds.cpp: a real
// 2-rank ring's traffic); dictionary tests/fuzz/fuzz_ring.dict.
// Expected: the collective completes, or an ember::Error of one line naming
// the peer. A failure (crash, sanitizer report, an allocation of what a
// header merely claims, a hang past -timeout, an error that does not name
// the previous rank) is a bug.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "engine/file_io.h"
#include "net/dist/frame.h"
#include "net/dist/ring.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;
using namespace ember::net::dist;

namespace {

struct SocketPair {
  UniqueFd ours, theirs;
  SocketPair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      std::perror("socketpair");
      std::abort();
    }
    ours = UniqueFd(fds[0]);
    theirs = UniqueFd(fds[1]);
    // Room for any input and for what rank 0 sends (nobody reads it).
    const int bytes = 1 << 20;
    ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
};

void check_names_peer(const Error& e) {
  fuzz::check_one_line(e);
  if (!std::strstr(e.what(), "rank 1")) fuzz::fuzz_fail(std::string("the error does not name the peer: ") + e.what());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 + sizeof(RingHello)) return 0;
  const uint8_t pick = data[0];
  const uint64_t count = data[1];
  RingHello hello;
  std::memcpy(&hello, data + 2, sizeof hello);
  // The handshake: a hello that is not this run's rank 1 ends here, as in tcp_comm.cpp.
  const std::string problem = ring_hello_mismatch(hello, 0, 1, 2, "fuzz-run");
  if (!problem.empty()) {
    if (problem.find('\n') != std::string::npos) fuzz::fuzz_fail("a hello problem on two lines: " + problem);
    return 0;
  }
  const uint8_t* stream = data + 2 + sizeof hello;
  const size_t stream_size = size - 2 - sizeof hello;

  SocketPair to_next, from_prev;
  size_t written = 0;
  while (written < stream_size) {
    const ssize_t w = ::write(from_prev.theirs.get(), stream + written, stream_size - written);
    if (w <= 0) {
      std::perror("write");
      std::abort();
    }
    written += size_t(w);
  }
  ::shutdown(from_prev.theirs.get(), SHUT_WR);  // then the previous rank is gone

  static const DType kTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  const DType dtype = kTypes[(pick >> 2) & 3];
  std::vector<uint8_t> buffer(size_t(count) * dtype_size(dtype) + 1, 0x3c);
  RingOptions options;
  options.timeout_s = 0.25;  // a silent peer ends the collective well within libFuzzer's -timeout
  options.segment_bytes = 4096;
  Ring ring(0, 2, std::move(to_next.ours), std::move(from_prev.ours), RingPeer{1, "fuzz-next:1"},
            RingPeer{1, "fuzz-prev:1"}, options);
  try {
    switch (pick & 3) {
      case 0:
        ring.all_reduce(buffer.data(), count, dtype, (pick & 16) ? ReduceOp::average : ReduceOp::sum, "fuzz buffer");
        break;
      case 1:
        ring.broadcast(buffer.data(), count, dtype, (pick & 32) ? 1 : 0, "fuzz buffer");
        break;
      default:
        ring.barrier("fuzz barrier");
        break;
    }
    // The neighbours go away first, so that close() finds them gone at once
    // (it waits up to half a second for a peer that stays).
    to_next.theirs.reset();
    from_prev.theirs.reset();
    ring.close(true);
  } catch (const Error& e) {
    check_names_peer(e);
    ring.send_abort(e.what());
    to_next.theirs.reset();
    from_prev.theirs.reset();
    ring.close(false);
  }
  return 0;
}
