// net/dist/frame.cpp — building and checking ring handshakes and frame headers.
#include "net/dist/frame.h"

#include <cstddef>
#include <cstring>

#include "data/crc32c.h"
#include "engine/error.h"
#include "net/json.h"

namespace ember::net::dist {

const char* frame_op_name(FrameOp op) {
  switch (op) {
    case FrameOp::all_reduce: return "all_reduce";
    case FrameOp::broadcast: return "broadcast";
    case FrameOp::barrier: return "barrier";
    case FrameOp::heartbeat: return "heartbeat";
    case FrameOp::abort: return "abort";
    case FrameOp::goodbye: return "goodbye";
  }
  return "unknown op";
}

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "average"; }

RingHello make_ring_hello(uint16_t role, int rank, int world, const std::string& run_id) {
  RingHello h;
  h.role = role;
  h.rank = uint32_t(rank);
  h.world = uint32_t(world);
  std::memcpy(h.run_id, run_id.data(), std::min(run_id.size(), sizeof h.run_id - 1));
  h.crc = data::crc32c(&h, offsetof(RingHello, crc));
  return h;
}

std::string ring_hello_problem(const RingHello& h) {
  if (h.magic != kRingMagic) return cat("not an ember ring handshake (magic 0x", std::hex, h.magic, ")");
  if (h.version != kWireVersion)
    return cat("ring protocol version ", h.version, ", this build speaks ", kWireVersion);
  if (h.crc != data::crc32c(&h, offsetof(RingHello, crc))) return "handshake CRC mismatch";
  if (h.run_id[sizeof h.run_id - 1] != '\0') return "run id not terminated";
  return "";
}

std::string run_id_of(const RingHello& h) { return std::string(h.run_id, strnlen(h.run_id, sizeof h.run_id)); }

std::string ring_hello_mismatch(const RingHello& h, uint16_t role, int rank, int world, const std::string& run_id) {
  if (std::string problem = ring_hello_problem(h); !problem.empty()) return problem;
  // (The peer's run id as messages show it: escaped onto one line.)
  if (run_id_of(h) != run_id) return cat("run id ", json::shown(run_id_of(h)), " (this run is '", run_id, "')");
  if (int64_t(h.world) != world) return cat("world size ", h.world, " (this run has ", world, ")");
  if (int64_t(h.rank) != rank || h.role != role)
    return cat(role == 0 ? "rank " : "an answer as rank ", h.rank, " (role ", h.role, ") where rank ", rank,
               " was expected");
  return "";
}

void seal_frame(FrameHeader& h, const void* payload) {
  h.payload_crc = h.payload_bytes ? data::crc32c(payload, h.payload_bytes) : 0;
  h.header_crc = data::crc32c(&h, offsetof(FrameHeader, header_crc));
}

std::string frame_header_problem(const FrameHeader& h) {
  if (h.magic != kFrameMagic) return cat("bytes that are not an ember frame (magic 0x", std::hex, h.magic, ")");
  if (h.version != kWireVersion) return cat("a frame of protocol version ", int(h.version), ", this build speaks ", kWireVersion);
  if (h.header_crc != data::crc32c(&h, offsetof(FrameHeader, header_crc))) return "a frame header with a bad CRC";
  return "";
}

std::string describe_collective(FrameOp op, uint64_t seq, uint64_t count, DType dtype, ReduceOp reduce, int root) {
  std::string s = cat(frame_op_name(op), " #", seq);
  if (op == FrameOp::barrier) return s;
  s += cat(" of ", count, " ", dtype_name(dtype));
  if (op == FrameOp::all_reduce) s += cat(" (", reduce_op_name(reduce), ")");
  if (op == FrameOp::broadcast) s += cat(" (root ", root, ")");
  return s;
}

std::string describe_frame(const FrameHeader& h) {
  const DType dt = h.dtype < kNumDTypes ? DType(h.dtype) : DType::u8;
  return describe_collective(h.op, h.seq, h.count, dt, ReduceOp(h.reduce & 1), int(h.root));
}

}  // namespace ember::net::dist
