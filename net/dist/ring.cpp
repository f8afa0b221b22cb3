// net/dist/ring.cpp — pipelined ring collectives over two non-blocking
// sockets (net/dist/ring.h).
#include "net/dist/ring.h"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#include "data/crc32c.h"
#include "engine/error.h"
#include "net/dist/buffer_math.h"
#include "net/dist/socket.h"

namespace ember::net::dist {

// ------------------------------------------------------------- AbortSignal

AbortSignal::AbortSignal() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  EMBER_CHECK(fd_ >= 0, "eventfd: ", std::strerror(errno));
}
AbortSignal::~AbortSignal() { ::close(fd_); }

void AbortSignal::set(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (set_.load()) return;
    reason_ = reason;
    set_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(fd_, &one, sizeof one);
}

std::string AbortSignal::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

// -------------------------------------------------------------------- Ring

Ring::Ring(int rank, int world, UniqueFd to_next, UniqueFd from_prev, RingPeer next, RingPeer prev,
           const RingOptions& options, const AbortSignal* abort_signal)
    : rank_(rank),
      world_(world),
      to_next_(std::move(to_next)),
      from_prev_(std::move(from_prev)),
      next_(std::move(next)),
      prev_(std::move(prev)),
      options_(options),
      abort_signal_(abort_signal) {
  EMBER_CHECK(world >= 2 && rank >= 0 && rank < world, "ring: rank ", rank, " of world ", world);
  EMBER_CHECK(options.timeout_s > 0, "--comm-timeout must be positive");
  EMBER_CHECK(options.segment_bytes >= 4096, "ring: segments of at least 4 KiB");
  set_nonblocking(to_next_.get(), true);
  set_nonblocking(from_prev_.get(), true);
}

std::string Ring::where(const Collective& c) const {
  std::string s = describe_collective(c.op, c.seq, c.count, c.dtype, c.reduce, c.root);
  if (!c.what.empty()) s += " [" + c.what + "]";
  return s;
}

void Ring::fail_with(const std::string& message, int told_already) {
  failure_ = message;
  told_ = told_already;
  throw Error(message);
}

namespace {

// Element range [begin, end) of part i when n elements are cut into parts.
uint64_t part_begin(uint64_t n, uint64_t parts, uint64_t i) { return n / parts * i + std::min(i, n % parts); }

// Result of one non-blocking write or read attempt.
enum class Io { progress, would_block, closed, error };

template <typename Out>
Io write_some(int fd, Out& out, int& err) {
  iovec iov[2];
  int n = 0;
  const size_t H = sizeof out.header;
  if (out.done < H) iov[n++] = {reinterpret_cast<char*>(&out.header) + out.done, H - out.done};
  const size_t pdone = out.done > H ? out.done - H : 0;
  if (out.header.payload_bytes > pdone)
    iov[n++] = {const_cast<char*>(out.payload) + pdone, out.header.payload_bytes - pdone};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = size_t(n);
  const ssize_t k = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k > 0) {
    out.done += size_t(k);
    return Io::progress;
  }
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Io::would_block;
  err = errno;
  return Io::error;
}

Io read_some(int fd, void* dst, size_t n, size_t& got, int& err) {
  const ssize_t k = ::recv(fd, dst, n, MSG_DONTWAIT);
  if (k > 0) {
    got = size_t(k);
    return Io::progress;
  }
  if (k == 0) return Io::closed;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Io::would_block;
  err = errno;
  return Io::error;
}

// A frame being read: header, then a payload into `dst` (or into `text`
// for abort frames), with its CRC computed as the bytes arrive.
struct Incoming {
  FrameHeader header;
  size_t header_got = 0;
  bool in_payload = false;
  char* dst = nullptr;
  size_t payload_got = 0;
  uint32_t crc = 0;
  std::string text;
  void reset() { *this = Incoming(); }
};

std::string io_error_text(Io io, int err) {
  if (io == Io::closed) return "connection closed";
  return std::strerror(err);
}

}  // namespace

void Ring::run(Collective& c) {
  if (!failure_.empty()) throw Error(failure_);
  if (next_gone_ && !c.sends.empty()) fail_with(cat(next_.str(), " ", next_gone_why_, " before ", where(c)));
  const double timeout = options_.timeout_s;
  const auto timeout_dur = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  const auto heartbeat = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(timeout / 10, 0.02, 1.0)));
  const size_t nsend = c.sends.size(), nrecv = c.recvs.size();
  const size_t esize = dtype_size(c.dtype);

  Outgoing& out = out_;  // the frame on its way to the next rank
  out = Outgoing();
  size_t sent = 0, received = 0;
  Incoming in, rev;  // from the previous rank; control frames from the next rank
  auto last_recv = Clock::now(), last_send_progress = Clock::now(), last_send_any = Clock::now();
  bool watch_next = !next_gone_;

  auto lost = [&](const RingPeer& p, const std::string& why) {
    fail_with(cat("lost ", p.str(), ": ", why, " during ", where(c)));
  };
  auto start_frame = [&](FrameOp op, const char* payload, uint32_t bytes, uint32_t step, uint32_t segment) {
    out = Outgoing();
    out.header.op = op;
    out.header.dtype = uint8_t(c.dtype);
    out.header.reduce = uint8_t(c.reduce);
    out.header.root = uint32_t(c.root);
    out.header.step = step;
    out.header.seq = c.seq;
    out.header.count = c.count;
    out.header.segment = segment;
    out.header.payload_bytes = bytes;
    out.payload = payload;
    out.done = 0;
    seal_frame(out.header, payload);
  };
  // Handles a complete control frame from `peer` (heartbeat, abort, goodbye).
  auto on_control = [&](const FrameHeader& h, const std::string& text, const RingPeer& peer, bool needed) {
    if (h.op == FrameOp::abort) fail_with(cat(peer.str(), " reported: ", text), peer.rank);
    if (h.op == FrameOp::goodbye) {
      const std::string why = cat("closed the ring after ", h.count, " collectives");
      if (needed)
        fail_with(cat(peer.str(), " ", why, " while this rank is in ", where(c),
                      ": the ranks ran different sequences of collectives"));
      next_gone_ = true;
      next_gone_why_ = why;
    }
  };
  // Reads a control frame's header/text from `fd` into `st`; true when one is complete.
  auto read_control = [&](int fd, Incoming& st, const RingPeer& peer, bool& closed) -> bool {
    int err = 0;
    size_t got = 0;
    if (st.header_got < sizeof st.header) {
      const Io io = read_some(fd, reinterpret_cast<char*>(&st.header) + st.header_got,
                              sizeof st.header - st.header_got, got, err);
      if (io == Io::closed || io == Io::error) {
        closed = true;
        if (io == Io::error && err != ECONNRESET) lost(peer, io_error_text(io, err));
        return false;
      }
      if (io == Io::would_block) return false;
      st.header_got += got;
      if (st.header_got < sizeof st.header) return false;
      const std::string problem = frame_header_problem(st.header);
      if (!problem.empty()) fail_with(cat(peer.str(), " sent ", problem, " during ", where(c)));
      if (st.header.op == FrameOp::abort) {
        if (st.header.payload_bytes > kMaxAbortText)
          fail_with(cat(peer.str(), " sent an abort message of ", st.header.payload_bytes, " bytes during ", where(c)));
        st.text.resize(st.header.payload_bytes);
      } else if (st.header.payload_bytes != 0) {
        fail_with(cat(peer.str(), " sent a ", frame_op_name(st.header.op), " frame with a payload where only control "
                      "frames are expected, during ", where(c)));
      }
    }
    while (st.payload_got < st.text.size()) {
      const Io io = read_some(fd, st.text.data() + st.payload_got, st.text.size() - st.payload_got, got, err);
      if (io == Io::closed || io == Io::error) {
        closed = true;
        return false;
      }
      if (io == Io::would_block) return false;
      st.payload_got += got;
    }
    return true;
  };

  for (;;) {
    const bool send_ready = sent < nsend && received >= c.sends[sent].needs_received;
    if (!out.active() && sent == nsend && received == nrecv) break;

    // Start the next frame: a data frame when its input has arrived, else a heartbeat when due.
    const auto now = Clock::now();
    if (!out.active()) {
      if (send_ready) {
        const SendFrame& f = c.sends[sent];
        start_frame(c.op, f.data, f.bytes, f.step, f.segment);
        ++sent;
      } else if (now - last_send_any >= heartbeat && (sent < nsend || received < nrecv)) {
        start_frame(FrameOp::heartbeat, nullptr, 0, 0, 0);
      }
    }
    // Time-outs: nothing from the previous rank while waiting on it, or the next one not reading.
    if (received < nrecv && now - last_recv >= timeout_dur)
      fail_with(cat(prev_.str(), " sent nothing for ", timeout, " s during ", where(c),
                    ": it is hung, stopped, much slower than this rank, or unreachable (--comm-timeout)"));
    if (out.active() && now - last_send_progress >= timeout_dur)
      fail_with(cat(next_.str(), " took no data for ", timeout, " s during ", where(c),
                    ": it is hung, stopped, or unreachable (--comm-timeout)"));

    pollfd fds[3];
    int nfds = 0;
    const int next_i = watch_next ? nfds++ : -1;
    if (next_i >= 0) fds[next_i] = {to_next_.get(), short(POLLIN | (out.active() ? POLLOUT : 0)), 0};
    const int prev_i = received < nrecv ? nfds++ : -1;
    if (prev_i >= 0) fds[prev_i] = {from_prev_.get(), POLLIN, 0};
    const int abort_i = abort_signal_ ? nfds++ : -1;
    if (abort_i >= 0) fds[abort_i] = {abort_signal_->fd(), POLLIN, 0};
    auto wake = std::min(last_recv, last_send_progress) + timeout_dur;
    wake = std::min(wake, last_send_any + heartbeat);
    if (out.active() && next_i < 0) lost(next_, cat(next_gone_why_.empty() ? "connection closed" : next_gone_why_));
    const int rc = ::poll(fds, nfds_t(nfds), std::max(1, ms_until(wake)));
    if (rc < 0 && errno != EINTR) fail_with(cat("poll: ", std::strerror(errno)));
    if (rc <= 0) continue;

    if (abort_i >= 0 && (fds[abort_i].revents & POLLIN)) fail_with(abort_signal_->reason());

    // ---- to the next rank: write, and read its control frames
    if (next_i >= 0 && (fds[next_i].revents & (POLLOUT | POLLERR | POLLHUP)) && out.active()) {
      int err = 0;
      const Io io = write_some(to_next_.get(), out, err);
      if (io == Io::progress) last_send_progress = last_send_any = Clock::now();
      if (io == Io::error) lost(next_, std::strerror(err));
    }
    if (next_i >= 0 && (fds[next_i].revents & (POLLIN | POLLERR | POLLHUP))) {
      bool closed = false;
      while (!closed && read_control(to_next_.get(), rev, next_, closed)) {
        on_control(rev.header, rev.text, next_, out.active() || sent < nsend);
        rev.reset();
      }
      if (closed) {
        if (out.active() || sent < nsend) lost(next_, "connection closed");
        watch_next = false;
        next_gone_ = true;
        next_gone_why_ = "closed its connection";
      }
    }

    // ---- from the previous rank: frames of this collective (and control frames)
    if (prev_i >= 0 && (fds[prev_i].revents & (POLLIN | POLLERR | POLLHUP))) {
      for (int reads = 0; reads < 64 && received < nrecv; ++reads) {
        int err = 0;
        size_t got = 0;
        if (in.header_got < sizeof in.header) {
          const Io io = read_some(from_prev_.get(), reinterpret_cast<char*>(&in.header) + in.header_got,
                                  sizeof in.header - in.header_got, got, err);
          if (io == Io::would_block) break;
          if (io != Io::progress) lost(prev_, io_error_text(io, err));
          last_recv = Clock::now();
          in.header_got += got;
          if (in.header_got < sizeof in.header) continue;
          const FrameHeader& h = in.header;
          const std::string problem = frame_header_problem(h);
          if (!problem.empty()) fail_with(cat(prev_.str(), " sent ", problem, " during ", where(c)));
          if (is_control(h.op)) {
            if (h.op == FrameOp::abort) {
              if (h.payload_bytes > kMaxAbortText)
                fail_with(cat(prev_.str(), " sent an abort message of ", h.payload_bytes, " bytes during ", where(c)));
              in.text.resize(h.payload_bytes);
            } else if (h.payload_bytes != 0) {
              fail_with(cat(prev_.str(), " sent a ", frame_op_name(h.op), " frame with a payload during ", where(c)));
            }
          } else {
            const RecvFrame& f = c.recvs[received];
            if (h.op != c.op || h.seq != c.seq || h.count != c.count || h.dtype != uint8_t(c.dtype) ||
                h.reduce != uint8_t(c.reduce) || h.root != uint32_t(c.root))
              fail_with(cat("collective mismatch: ", prev_.str(), " is in ", describe_frame(h), ", this rank (",
                            rank_, ") is in ", where(c)));
            if (h.step != f.step || h.segment != f.segment || h.payload_bytes != f.bytes)
              fail_with(cat(prev_.str(), " sent step ", h.step, " segment ", h.segment, " (", h.payload_bytes,
                            " bytes) where step ", f.step, " segment ", f.segment, " (", f.bytes,
                            " bytes) was due, during ", where(c)));
            in.dst = f.action == Arrival::copy ? f.data : staging_.data();
          }
          in.in_payload = true;
        }
        // payload
        const FrameHeader& h = in.header;
        const bool control = is_control(h.op);
        char* dst = control ? in.text.data() : in.dst;
        const size_t want = control ? in.text.size() : h.payload_bytes;
        if (in.payload_got < want) {
          const Io io = read_some(from_prev_.get(), dst + in.payload_got, want - in.payload_got, got, err);
          if (io == Io::would_block) break;
          if (io != Io::progress) lost(prev_, io_error_text(io, err));
          last_recv = Clock::now();
          if (!control) in.crc = data::crc32c(dst + in.payload_got, got, in.crc);
          in.payload_got += got;
          if (in.payload_got < want) continue;
        }
        // a whole frame
        if (control) {
          on_control(h, in.text, prev_, true);
        } else {
          if (in.crc != h.payload_crc)
            fail_with(cat("payload CRC mismatch in a frame from ", prev_.str(), " during ", where(c),
                          ": the data was corrupted on the way"));
          const RecvFrame& f = c.recvs[received];
          const uint64_t n = f.bytes / esize;
          if (f.action != Arrival::copy) add_into(c.dtype, f.data, staging_.data(), n);
          if (f.action == Arrival::reduce_then_scale) scale_in_place(c.dtype, f.data, n, 1.0 / world_);
          ++received;
        }
        in.reset();
      }
    }
  }
}

void Ring::all_reduce(void* data, uint64_t count, DType dtype, ReduceOp op, const std::string& what) {
  EMBER_CHECK(dtype == DType::f32 || dtype == DType::f64 || is_16bit_float(dtype), "all_reduce: ", dtype_name(dtype),
              " buffers are not supported (f32, f16, bf16, f64)");
  Collective c{FrameOp::all_reduce, dtype, op, 0, count, ++seq_, what, {}, {}};
  const uint64_t P = uint64_t(world_), r = uint64_t(rank_);
  const size_t esize = dtype_size(dtype);
  char* base = static_cast<char*>(data);
  if (op == ReduceOp::average && is_16bit_float(dtype)) scale_in_place(dtype, data, count, 1.0 / double(P));
  const uint64_t max_chunk = (count + P - 1) / P;
  const uint64_t seg_elems = std::max<uint64_t>(1, options_.segment_bytes / esize);
  const uint64_t nseg = std::max<uint64_t>(1, (max_chunk + seg_elems - 1) / seg_elems);
  staging_.resize(size_t((max_chunk + nseg - 1) / nseg * esize));
  // Segment j of chunk k: [begin, end) in elements.
  auto segment = [&](uint64_t k, uint64_t j, uint64_t& begin, uint64_t& end) {
    const uint64_t c0 = part_begin(count, P, k), c1 = part_begin(count, P, k + 1);
    begin = c0 + part_begin(c1 - c0, nseg, j);
    end = c0 + part_begin(c1 - c0, nseg, j + 1);
  };
  const uint64_t steps = 2 * (P - 1);
  for (uint64_t s = 0; s < steps; ++s) {
    const uint64_t send_chunk = (r + P - s % P) % P, recv_chunk = (r + 2 * P - s % P - 1) % P;
    for (uint64_t j = 0; j < nseg; ++j) {
      uint64_t b, e;
      segment(send_chunk, j, b, e);
      c.sends.push_back({base + b * esize, uint32_t((e - b) * esize), uint32_t(s), uint32_t(j),
                         s == 0 ? 0 : (s - 1) * nseg + j + 1});
      segment(recv_chunk, j, b, e);
      Arrival a = s + 1 < P ? Arrival::reduce : Arrival::copy;
      if (s + 2 == P && op == ReduceOp::average && !is_16bit_float(dtype)) a = Arrival::reduce_then_scale;
      c.recvs.push_back({base + b * esize, uint32_t((e - b) * esize), uint32_t(s), uint32_t(j), a});
    }
  }
  run(c);
}

void Ring::broadcast(void* data, uint64_t count, DType dtype, int root, const std::string& what) {
  EMBER_CHECK(root >= 0 && root < world_, "broadcast: root ", root, " is not a rank of ", world_);
  Collective c{FrameOp::broadcast, dtype, ReduceOp::sum, root, count, ++seq_, what, {}, {}};
  const size_t esize = dtype_size(dtype);
  const uint64_t seg_elems = std::max<uint64_t>(1, options_.segment_bytes / esize);
  const uint64_t nseg = std::max<uint64_t>(1, (count + seg_elems - 1) / seg_elems);
  const int position = (rank_ - root + world_) % world_;  // along the chain root -> root+1 -> ...
  char* base = static_cast<char*>(data);
  for (uint64_t j = 0; j < nseg; ++j) {
    const uint64_t b = part_begin(count, nseg, j), e = part_begin(count, nseg, j + 1);
    const uint32_t bytes = uint32_t((e - b) * esize);
    if (position > 0) c.recvs.push_back({base + b * esize, bytes, 0, uint32_t(j), Arrival::copy});
    if (position < world_ - 1) c.sends.push_back({base + b * esize, bytes, 0, uint32_t(j), position == 0 ? 0 : j + 1});
  }
  run(c);
}

void Ring::barrier(const std::string& what) {
  Collective c{FrameOp::barrier, DType::u8, ReduceOp::sum, 0, 0, ++seq_, what, {}, {}};
  const uint64_t steps = 2 * (uint64_t(world_) - 1);
  for (uint64_t s = 0; s < steps; ++s) {
    c.sends.push_back({nullptr, 0, uint32_t(s), 0, s});
    c.recvs.push_back({nullptr, 0, uint32_t(s), 0, Arrival::copy});
  }
  run(c);
}

namespace {

// Writes one control frame whole, within `deadline`; false if it could not.
bool send_control(int fd, FrameOp op, uint64_t seq, uint64_t count, const std::string& text, Deadline deadline) {
  FrameHeader h;
  h.op = op;
  h.seq = seq;
  h.count = count;
  h.payload_bytes = uint32_t(std::min<size_t>(text.size(), kMaxAbortText));
  seal_frame(h, text.data());
  try {
    send_exact(fd, &h, sizeof h, deadline);
    if (h.payload_bytes) send_exact(fd, text.data(), h.payload_bytes, deadline);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// After shutdown(SHUT_WR): reads and drops what the peer still sends until
// it closes too (end of file) or `deadline`, so that closing sends FIN rather
// than RST. A reset would make the peer's kernel drop what it has not read
// yet — an abort frame this rank just sent it, explaining the failure — and
// report "connection reset by peer" instead. Only what has arrived by then
// is read; a peer that neither sends nor closes costs the wait until
// `deadline`.
void drain(int fd, Deadline deadline) {
  char buf[4096];
  for (;;) {
    const ssize_t k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) continue;
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
    pollfd p{fd, POLLIN, 0};
    const int ms = ms_until(deadline);
    if (ms <= 0 || ::poll(&p, 1, ms) <= 0) return;
  }
}

}  // namespace

void Ring::send_abort(const std::string& reason) {
  const Deadline deadline = deadline_in(2.0);
  // Finish a frame that the failure cut off, so the abort starts at a frame boundary.
  bool next_ok = told_ != next_.rank && !next_gone_;
  while (next_ok && out_.active()) {
    int err = 0;
    const Io io = write_some(to_next_.get(), out_, err);
    if (io == Io::error) next_ok = false;
    if (io == Io::would_block) {
      pollfd p{to_next_.get(), POLLOUT, 0};
      if (::poll(&p, 1, ms_until(deadline)) <= 0) next_ok = false;
    }
  }
  if (next_ok) send_control(to_next_.get(), FrameOp::abort, seq_, 0, reason, deadline);
  // Nothing but control frames ever goes back to the previous rank.
  if (told_ != prev_.rank) send_control(from_prev_.get(), FrameOp::abort, seq_, 0, reason, deadline);
}

void Ring::close(bool goodbye) {
  if (goodbye && failure_.empty()) {
    const Deadline deadline = deadline_in(2.0);
    if (!next_gone_) send_control(to_next_.get(), FrameOp::goodbye, seq_, seq_, "", deadline);
    send_control(from_prev_.get(), FrameOp::goodbye, seq_, seq_, "", deadline);
  }
  for (int fd : {to_next_.get(), from_prev_.get()})
    if (fd >= 0) ::shutdown(fd, SHUT_WR);
  const Deadline linger = deadline_in(0.5);
  for (int fd : {to_next_.get(), from_prev_.get()})
    if (fd >= 0) drain(fd, linger);
  to_next_.reset();
  from_prev_.reset();
}

}  // namespace ember::net::dist
