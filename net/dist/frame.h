// net/dist/frame.h — what travels between neighbours of the TCP ring.
//
// Two fixed little-endian structs:
//  * RingHello: the handshake each end of a ring connection sends once
//    (magic, version, run id, rank, world size), checked on both ends;
//  * FrameHeader: in front of every frame. A frame is one segment of one
//    step of one collective (op, dtype, reduce op, root, sequence number,
//    element count of the whole collective, step, segment, payload bytes,
//    CRC-32C of the payload), or a control frame: heartbeat (a waiting rank
//    is alive), abort (the text of why a rank stops), goodbye (a rank closes
//    after N collectives). The header carries its own CRC, so a stray byte
//    stream (a port scanner, another program) is told apart from a peer
//    that disagrees about the collective.
#pragma once
#include <cstdint>
#include <string>

#include "engine/dtype.h"

namespace ember::net::dist {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the ring's wire format is little-endian");

constexpr uint32_t kRingMagic = 0x524d4245;   // "EBMR": ring handshake
constexpr uint32_t kFrameMagic = 0x464d4245;  // "EBMF": frame header
constexpr uint16_t kWireVersion = 1;

enum class FrameOp : uint8_t {
  all_reduce = 1,
  broadcast = 2,
  barrier = 3,
  heartbeat = 10,
  abort = 11,
  goodbye = 12,
};
const char* frame_op_name(FrameOp op);
inline bool is_control(FrameOp op) { return op == FrameOp::heartbeat || op == FrameOp::abort || op == FrameOp::goodbye; }

enum class ReduceOp : uint8_t { sum = 0, average = 1 };
const char* reduce_op_name(ReduceOp op);

struct RingHello {
  uint32_t magic = kRingMagic;
  uint16_t version = kWireVersion;
  uint16_t role = 0;  // 0: sent by the connecting side (the previous rank), 1: the reply
  uint32_t rank = 0, world = 0;
  char run_id[64] = {};
  uint32_t crc = 0;  // CRC-32C of the bytes before it
};
static_assert(sizeof(RingHello) == 84);
RingHello make_ring_hello(uint16_t role, int rank, int world, const std::string& run_id);
// Empty when the hello is well formed (magic, version, CRC), else why not.
std::string ring_hello_problem(const RingHello& h);
std::string run_id_of(const RingHello& h);
// Empty when `h` is a well-formed hello of this run from `rank` in the
// expected role (0: the connecting side, 1: the reply), else why not.
std::string ring_hello_mismatch(const RingHello& h, uint16_t role, int rank, int world, const std::string& run_id);

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint8_t version = uint8_t(kWireVersion);
  FrameOp op = FrameOp::heartbeat;
  uint8_t dtype = 0;      // engine DType
  uint8_t reduce = 0;     // ReduceOp (all_reduce)
  uint32_t root = 0;      // broadcast root
  uint32_t step = 0;      // ring step of the collective
  uint64_t seq = 0;       // collective number on this communicator (1, 2, ...)
  uint64_t count = 0;     // elements of the whole collective (goodbye: collectives done)
  uint32_t segment = 0;   // segment within the step
  uint32_t payload_bytes = 0;
  uint32_t payload_crc = 0;
  uint32_t header_crc = 0;  // CRC-32C of the bytes before it
};
static_assert(sizeof(FrameHeader) == 48);

// Fills header_crc (and payload_crc from the payload).
void seal_frame(FrameHeader& h, const void* payload);
// Empty when magic, version and header CRC are right, else why not.
std::string frame_header_problem(const FrameHeader& h);

// "all_reduce #17 of 1000 f32 (sum)" — how errors describe a collective.
std::string describe_collective(FrameOp op, uint64_t seq, uint64_t count, DType dtype, ReduceOp reduce, int root);
std::string describe_frame(const FrameHeader& h);

// Largest text an abort frame carries.
constexpr uint32_t kMaxAbortText = 2048;

}  // namespace ember::net::dist
