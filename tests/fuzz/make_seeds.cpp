// tests/fuzz/make_seeds.cpp — writes the seed corpora of the fuzz targets
// (tests/fuzz/corpus/<target>/seed-*) with ember's own writers where it has
// them: RecordWriter (.erec), encode_jpeg/encode_png (stb_image_write),
// save_training_checkpoint (.states), json::write; IDX, MXNet RecordIO, list
// files and the PNG variants stb_image_write cannot make (16-bit, palette
// with transparency, interlaced) are laid out byte by byte as their formats
// say. Every seed is small (the corpus stays well under 1 MB).
// usage: make fuzz-seeds   (runs $(BUILD)/fuzz_make_seeds tests/fuzz/corpus)
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "apps/training/training_checkpoint.h"
#include "data/image.h"
#include "data/record_file.h"
#include "net/json.h"
#include "net/dist/frame.h"
#include "net/dist/ring.h"
#include "net/dist/store.h"
#include "net/layers.h"
#include "net/sgd.h"

using namespace ember;
using namespace ember::data;
using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

namespace {

std::string g_root;

void put(const std::string& target, const std::string& name, const Bytes& b) {
  const fs::path dir = fs::path(g_root) / target;
  fs::create_directories(dir);
  std::FILE* f = std::fopen((dir / name).c_str(), "wb");
  if (!f || std::fwrite(b.data(), 1, b.size(), f) != b.size() || std::fclose(f) != 0) fail(cat("cannot write ", name));
}
void put_text(const std::string& target, const std::string& name, const std::string& s) {
  put(target, name, Bytes(s.begin(), s.end()));
}
Bytes with_mode(uint8_t mode, const Bytes& b) {
  Bytes out{mode};
  out.insert(out.end(), b.begin(), b.end());
  return out;
}
Bytes file_bytes(const std::string& path) { return read_file(path); }

Image make_image(int h, int w, int c, int seed) {
  Image img{h, w, c, {}};
  img.pixels.resize(size_t(h * w * c));
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = uint8_t((i * 37 + size_t(seed) * 91) ^ (i >> 3));
  return img;
}
Bytes jpeg_of(const Image& img, int q = 90) {
  Bytes b;
  encode_jpeg(img, q, b);
  return b;
}
Bytes png_of(const Image& img) {
  Bytes b;
  encode_png(img, b);
  return b;
}

void put_be32(Bytes& b, uint32_t v) {
  for (int k = 3; k >= 0; --k) b.push_back(uint8_t(v >> (8 * k)));
}
void put_le32(Bytes& b, uint32_t v) {
  for (int k = 0; k < 4; ++k) b.push_back(uint8_t(v >> (8 * k)));
}
void put_le64(Bytes& b, uint64_t v) {
  for (int k = 0; k < 8; ++k) b.push_back(uint8_t(v >> (8 * k)));
}

// A PNG chunk: length, type, data, CRC-32 of type and data.
void png_chunk(Bytes& out, const char* type, const Bytes& data) {
  put_be32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, uint32_t(crc32(0, out.data() + start, uInt(out.size() - start))));
}
// A PNG of raw filtered scanlines (each starting with its filter byte).
Bytes png_raw(int w, int h, uint8_t depth, uint8_t color, uint8_t interlace, const Bytes& scanlines,
              const Bytes& plte = {}, const Bytes& trns = {}) {
  Bytes out = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  Bytes ihdr;
  put_be32(ihdr, uint32_t(w));
  put_be32(ihdr, uint32_t(h));
  ihdr.insert(ihdr.end(), {depth, color, 0, 0, interlace});
  png_chunk(out, "IHDR", ihdr);
  if (!plte.empty()) png_chunk(out, "PLTE", plte);
  if (!trns.empty()) png_chunk(out, "tRNS", trns);
  uLongf n = compressBound(uLong(scanlines.size()));
  Bytes z(n);
  compress2(z.data(), &n, scanlines.data(), uLong(scanlines.size()), 9);
  z.resize(n);
  png_chunk(out, "IDAT", z);
  png_chunk(out, "IEND", {});
  return out;
}

// MXNet RecordIO: IRHeader 'IfQQ' (+ labels), then the image; parts split at
// 4-aligned magics as dmlc-core's writer does.
constexpr uint32_t kMagic = 0xced7230a;
Bytes mx_payload(const std::vector<float>& labels, uint64_t id, const Bytes& image, bool multi) {
  Bytes b;
  put_le32(b, multi ? uint32_t(labels.size()) : 0);
  float l0 = multi ? 0.0f : labels[0];
  uint32_t v;
  std::memcpy(&v, &l0, 4);
  put_le32(b, v);
  put_le64(b, id);
  put_le64(b, 0);
  if (multi)
    for (float l : labels) std::memcpy(&v, &l, 4), put_le32(b, v);
  b.insert(b.end(), image.begin(), image.end());
  return b;
}
void mx_write(Bytes& file, const Bytes& payload) {
  auto lrec = [](uint32_t cflag, uint32_t len) { return (cflag << 29) | len; };
  const uint32_t len = uint32_t(payload.size());
  uint32_t dptr = 0;
  for (uint32_t i = 0; i + 4 <= (len & ~3u); i += 4) {
    uint32_t v;
    std::memcpy(&v, payload.data() + i, 4);
    if (v == kMagic) {
      put_le32(file, kMagic);
      put_le32(file, lrec(dptr == 0 ? 1 : 2, i - dptr));
      file.insert(file.end(), payload.begin() + dptr, payload.begin() + i);
      dptr = i + 4;
    }
  }
  put_le32(file, kMagic);
  put_le32(file, lrec(dptr != 0 ? 3 : 0, len - dptr));
  file.insert(file.end(), payload.begin() + dptr, payload.end());
  file.resize(file.size() + ((4 - len % 4) % 4), 0);
}

Bytes idx_file(std::vector<uint32_t> dims, int seed) {
  Bytes b = {0, 0, 0x08, uint8_t(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) put_be32(b, d), n *= d;
  for (size_t i = 0; i < n; ++i) b.push_back(uint8_t(i * 13 + size_t(seed)));
  return b;
}
Bytes gzip_of(const Bytes& raw, const std::string& tmp) {
  gzFile f = gzopen(tmp.c_str(), "wb9");
  gzwrite(f, raw.data(), unsigned(raw.size()));
  gzclose(f);
  Bytes b = file_bytes(tmp);
  fs::remove(tmp);
  return b;
}

// fuzz_ring: what rank 1 of a real 2-rank ring sends rank 0 during one
// collective (and its goodbye), recorded by a relay between them, after the
// target's two leading bytes and rank 1's hello.
Bytes ring_traffic(uint8_t pick, uint8_t count) {
  using namespace ember::net::dist;
  auto pair = [] {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) fail("socketpair failed");
    return std::pair<UniqueFd, UniqueFd>{UniqueFd(fds[0]), UniqueFd(fds[1])};
  };
  auto [r0_to_next, r1_from_prev] = pair();
  auto [r1_to_next, relay_in] = pair();
  auto [relay_out, r0_from_prev] = pair();
  Bytes recorded;
  std::thread relay([&, in = std::move(relay_in), out = std::move(relay_out)]() mutable {
    char buf[4096];
    for (ssize_t k; (k = ::read(in.get(), buf, sizeof buf)) > 0;) {
      recorded.insert(recorded.end(), buf, buf + k);
      for (ssize_t done = 0; done < k;) done += std::max<ssize_t>(0, ::write(out.get(), buf + done, size_t(k - done)));
    }
    ::shutdown(out.get(), SHUT_WR);
  });
  static const DType kTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  const DType dtype = kTypes[(pick >> 2) & 3];
  auto run = [&](int rank, UniqueFd to_next, UniqueFd from_prev) {
    std::vector<uint8_t> buffer(size_t(count) * dtype_size(dtype), uint8_t(0x10 + rank));
    RingOptions o;
    o.timeout_s = 10;
    o.segment_bytes = 4096;
    Ring ring(rank, 2, std::move(to_next), std::move(from_prev), RingPeer{1 - rank, "seed"}, RingPeer{1 - rank, "seed"}, o);
    if ((pick & 3) == 0) ring.all_reduce(buffer.data(), count, dtype, (pick & 16) ? ReduceOp::average : ReduceOp::sum, "seed");
    else if ((pick & 3) == 1) ring.broadcast(buffer.data(), count, dtype, (pick & 32) ? 1 : 0, "seed");
    else ring.barrier("seed");
    ring.close(true);
  };
  std::thread rank1(run, 1, std::move(r1_to_next), std::move(r1_from_prev));
  run(0, std::move(r0_to_next), std::move(r0_from_prev));
  rank1.join();
  relay.join();
  const RingHello hello = make_ring_hello(0, 1, 2, "fuzz-run");
  Bytes seed = {pick, count};
  const auto* h = reinterpret_cast<const uint8_t*>(&hello);
  seed.insert(seed.end(), h, h + sizeof hello);
  seed.insert(seed.end(), recorded.begin(), recorded.end());
  return seed;
}

// fuzz_rendezvous, server side: one chunk [op][length][bytes] per message
// (op: the connection, 0-3).
void chunk(Bytes& b, uint8_t op, const std::string& bytes) {
  b.push_back(op);
  b.push_back(uint8_t(bytes.size()));
  b.insert(b.end(), bytes.begin(), bytes.end());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    g_root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
    const std::string tmp = (fs::temp_directory_path() / ("ember-seeds-" + std::to_string(getpid()))).string();
    fs::create_directories(tmp);

    const Image rgb = make_image(6, 5, 3, 1), grey = make_image(4, 7, 1, 2), wide = make_image(3, 17, 3, 3);
    const Bytes jpg = jpeg_of(rgb), jpg_grey = jpeg_of(grey, 50), jpg_wide = jpeg_of(wide, 100);
    const Bytes png = png_of(rgb), png_grey = png_of(grey), png_rgba = png_of(make_image(3, 4, 4, 4));

    // Record files: class-index labels with class names, f32-vector labels,
    // raw pixels, an empty file. Mode byte 1: the target fixes the CRCs.
    {
      RecordFileSettings s;
      s.class_names = {"cat", "dog", "T-shirt/top"};
      s.num_classes = 3;
      RecordWriter w(tmp + "/a.erec", s);
      RecordInput in;
      in.id = 10, in.label = 2, in.height = 6, in.width = 5, in.channels = 3;
      in.encoding = Encoding::jpeg, in.payload = jpg.data(), in.payload_length = jpg.size();
      w.add(in);
      in.id = 11, in.label = 0, in.height = 4, in.width = 7, in.channels = 1;
      in.encoding = Encoding::raw, in.payload = grey.pixels.data(), in.payload_length = grey.pixels.size();
      w.add(in);
      in.id = 12, in.label = 1, in.encoding = Encoding::png, in.payload = png_grey.data(),
      in.payload_length = png_grey.size();
      w.add(in);
      w.finish();
      const Bytes f = file_bytes(tmp + "/a.erec");
      put("fuzz_record_file", "seed-classes.erec", with_mode(1, f));
      put("fuzz_record_file", "seed-classes-crc.erec", with_mode(0, f));
    }
    {
      RecordFileSettings s;
      s.label_type = LabelType::f32_vector;
      s.label_width = 2;
      RecordWriter w(tmp + "/b.erec", s);
      RecordInput in;
      in.id = 1, in.label_values = {0.5f, -2.0f}, in.height = 3, in.width = 3, in.channels = 1;
      const Bytes px(9, 7);
      in.encoding = Encoding::raw, in.payload = px.data(), in.payload_length = px.size();
      w.add(in);
      in.id = 2, in.label_values = {1.0f, 3.0f}, in.encoding = Encoding::other, in.payload_length = 0;
      w.add(in);
      w.finish();
      put("fuzz_record_file", "seed-f32-labels.erec", with_mode(1, file_bytes(tmp + "/b.erec")));
      RecordWriter e(tmp + "/c.erec", RecordFileSettings{});
      e.finish();
      put("fuzz_record_file", "seed-empty.erec", with_mode(1, file_bytes(tmp + "/c.erec")));
    }

    // JPEG and PNG: mode byte = channels / augmentation / output size (image_target.h).
    put("fuzz_jpeg", "seed-rgb.jpg", with_mode(0x02, jpg));
    put("fuzz_jpeg", "seed-grey-q50.jpg", with_mode(0x15, jpg_grey));
    put("fuzz_jpeg", "seed-wide-q100.jpg", with_mode(0x2c, jpg_wide));
    put("fuzz_jpeg", "seed-rgb-8x8.jpg", with_mode(0x38, jpeg_of(make_image(8, 8, 3, 5), 75)));
    put("fuzz_png", "seed-rgb.png", with_mode(0x02, png));
    put("fuzz_png", "seed-grey.png", with_mode(0x15, png_grey));
    put("fuzz_png", "seed-rgba.png", with_mode(0x28, png_rgba));
    {
      Bytes lines;  // 16-bit grey+alpha 3x2, filters None and Sub
      for (int y = 0; y < 2; ++y) {
        lines.push_back(uint8_t(y));
        for (int x = 0; x < 3 * 4; ++x) lines.push_back(uint8_t(x * 20 + y));
      }
      put("fuzz_png", "seed-16bit-ga.png", with_mode(0x03, png_raw(3, 2, 16, 4, 0, lines)));
      Bytes pal;  // 2-bit palette 5x3 with tRNS, filters Up, Average, Paeth
      for (int y = 0; y < 3; ++y) pal.insert(pal.end(), {uint8_t(2 + y), uint8_t(0x1b), uint8_t(0xe4 >> y)});
      put("fuzz_png", "seed-palette-trns.png",
          with_mode(0x1e, png_raw(5, 3, 2, 3, 0, pal, {255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9}, {0, 128})));
      Bytes adam;  // Adam7-interlaced 8-bit grey 4x4: the 7 passes' sub-images (passes 2 and 3 are empty)
      const int pass_w[7] = {1, 0, 0, 1, 2, 2, 4}, pass_h[7] = {1, 0, 0, 1, 1, 2, 2};
      for (int p = 0; p < 7; ++p)
        for (int y = 0; y < pass_h[p]; ++y) {
          adam.push_back(0);
          for (int x = 0; x < pass_w[p]; ++x) adam.push_back(uint8_t(40 * p + x));
        }
      put("fuzz_png", "seed-interlaced.png", with_mode(0x21, png_raw(4, 4, 8, 0, 1, adam)));
    }

    // IDX: image and label files, plain and gzip'd.
    put("fuzz_idx", "seed-images-idx3-ubyte", idx_file({2, 3, 4}, 1));
    put("fuzz_idx", "seed-labels-idx1-ubyte", idx_file({5}, 2));
    put("fuzz_idx", "seed-images-idx3-ubyte.gz", gzip_of(idx_file({2, 3, 3}, 3), tmp + "/i.gz"));

    // MXNet RecordIO: single-label records (one split around a magic in the
    // image bytes), multi-label records, and a .idx after "EMBERIDX".
    {
      Bytes rec;
      std::vector<uint64_t> offsets;
      offsets.push_back(rec.size());
      mx_write(rec, mx_payload({1}, 100, jpg, false));
      Bytes img2 = png;
      while ((24 + img2.size()) % 4 != 0) img2.push_back(0xAB);
      put_le32(img2, kMagic);
      img2.insert(img2.end(), {1, 2, 3});
      offsets.push_back(rec.size());
      mx_write(rec, mx_payload({0}, 101, img2, false));
      offsets.push_back(rec.size());
      mx_write(rec, mx_payload({2}, 102, Bytes{'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'g'}, false));
      put("fuzz_mxnet_recordio", "seed-single.rec", rec);
      Bytes with_idx = rec;
      const std::string idx = cat("0\t", offsets[2], "\n1\t", offsets[0], "\r\n2\t", offsets[1], "\n");
      with_idx.insert(with_idx.end(), {'E', 'M', 'B', 'E', 'R', 'I', 'D', 'X'});
      with_idx.insert(with_idx.end(), idx.begin(), idx.end());
      put("fuzz_mxnet_recordio", "seed-single-idx.rec", with_idx);
      Bytes multi;
      mx_write(multi, mx_payload({0.5f, 1.5f}, 7, png_grey, true));
      mx_write(multi, mx_payload({2.0f, -1.0f}, 8, jpg_grey, true));
      put("fuzz_mxnet_recordio", "seed-multi-label.rec", multi);
    }

    // MXNet .params: named f32/f16/f64/bf16 arrays (V2), a V3 scalar, a plain list without names.
    {
      Bytes list;
      put_le64(list, 0x112);
      put_le64(list, 0);
      put_le64(list, 4);
      const auto array = [&](uint32_t magic, std::vector<int64_t> shape, int32_t dtype, const Bytes& raw) {
        put_le32(list, magic);
        put_le32(list, 0);
        put_le32(list, uint32_t(shape.size()));
        for (int64_t d : shape) put_le64(list, uint64_t(d));
        put_le32(list, 1);
        put_le32(list, 0);
        put_le32(list, uint32_t(dtype));
        list.insert(list.end(), raw.begin(), raw.end());
      };
      Bytes f32(24), f16(8), f64(16), bf16(4);
      for (size_t i = 0; i < f32.size(); ++i) f32[i] = uint8_t(i * 29 + 3);
      for (size_t i = 0; i < f16.size(); ++i) f16[i] = uint8_t(i * 13 + 60);
      for (size_t i = 0; i < f64.size(); ++i) f64[i] = uint8_t(i * 7 + 63);
      bf16 = {0x80, 0x3f, 0x40, 0xc0};
      array(0xF993fac9, {2, 3}, 0, f32);
      array(0xF993fac9, {4}, 2, f16);
      array(0xF993fac9, {1, 2}, 1, f64);
      array(0xF993fac9, {2}, 12, bf16);
      put_le64(list, 4);
      for (const std::string name : {"arg:conv0_weight", "aux:bn0_moving_mean", "features.0.weight", "output.bias"}) {
        put_le64(list, name.size());
        list.insert(list.end(), name.begin(), name.end());
      }
      put("fuzz_mxnet_params", "seed-named.params", list);
      Bytes plain;
      put_le64(plain, 0x112);
      put_le64(plain, 0);
      put_le64(plain, 1);
      put_le32(plain, 0xF993faca);
      put_le32(plain, 0);
      put_le32(plain, 0);  // V3 ndim 0: a scalar
      put_le32(plain, 1);
      put_le32(plain, 0);
      put_le32(plain, 0);
      plain.insert(plain.end(), {0, 0, 0x80, 0x3f});
      put_le64(plain, 0);
      put("fuzz_mxnet_params", "seed-plain-scalar.params", plain);
    }

    // im2rec list files.
    put_text("fuzz_list_file", "seed-classes.lst", "0\t1\tcat/0001.jpg\n1\t0\tdog/0002.png\n5\t2\t/abs/path/x.jpg\n");
    put_text("fuzz_list_file", "seed-multi-label.lst", "0\t0.5\t-1.25\t3e2\ta b/c.jpg\r\n\n \t\n7\t1\t2\t3\td.png\r\n");

    // JSON: a safetensors-like header and the odd corners of the grammar.
    {
      json::Object o;
      o.emplace_back("__metadata__", json::Object{{"format", "pt"}, {"steps", "12"}});
      o.emplace_back("fc.weight", json::Object{{"dtype", "F32"}, {"shape", json::Array{2, 3}},
                                               {"data_offsets", json::Array{0, 24}}});
      put_text("fuzz_json", "seed-header.json", json::write(json::Value(o)));
      put_text("fuzz_json", "seed-values.json",
               "[null,true,false,-0,1.5e-3,-9223372036854775808,\"\\u00e9\\ud83d\\ude00\\n\\\"\",{\"a\":[{}]},[]]");
      put_text("fuzz_json", "seed-depth.json", std::string("\x03") + "[[[1]]]");
    }

    // .states: a checkpoint of a Linear(3, 2) after setting its momentum.
    {
      net::Linear model(3, 2);
      net::SGD opt(model.named_parameters(), {0.9, 1e-4, false});
      opt.load_state({{"momentum.weight", Tensor::from_vector({1, 2, 3, 4, 5, 6}, Shape({2, 3}))},
                      {"momentum.bias", Tensor::from_vector({0.5, -0.5}, Shape({2}))}},
                     120);
      apps::TrainingPosition p;
      p.epoch = 3, p.batch = 120, p.global_step = 720, p.elapsed_seconds = 12.5, p.seed = 42, p.batch_size = 64;
      const std::string model_path = tmp + "/run-0003-000120.safetensors";
      apps::save_training_checkpoint(model_path, model, opt, {{"network", "linear"}}, p);
      put("fuzz_states", "seed-run.states.safetensors", file_bytes(apps::states_path_of(model_path)));
    }
    // The ring: an all-reduce (f32 sum, 8 elements), a broadcast (f16 from
    // rank 1, 5), a barrier, an all-reduce (bf16 average, 33).
    put("fuzz_ring", "seed-all-reduce-f32.bin", ring_traffic(0, 8));
    put("fuzz_ring", "seed-broadcast-f16.bin", ring_traffic(1 | (1 << 2) | 32, 5));
    put("fuzz_ring", "seed-barrier.bin", ring_traffic(2, 0));
    put("fuzz_ring", "seed-all-reduce-bf16-average.bin", ring_traffic(0 | (2 << 2) | 16, 33));

    // The rendezvous: ranks 1 and 2 join, set and get addresses and finish;
    // a rank of another run; the client's side: the replies to hello, set,
    // get and done, and an error reply.
    {
      using namespace ember::net::dist::store_wire;
      auto hello_of = [](uint32_t rank, uint32_t world, const std::string& run) {
        return message(hello, u32(kVersion) + u32(rank) + u32(world) + str(run) + str("host" + std::to_string(rank)));
      };
      Bytes server = {0};
      chunk(server, 0, hello_of(1, 3, "fuzz-run"));
      chunk(server, 1, hello_of(2, 3, "fuzz-run"));
      chunk(server, 0, message(set, str("addr/1") + str("10.0.0.2:41234")));
      chunk(server, 1, message(get, str("addr/1")));
      chunk(server, 1, message(set, str("addr/2") + str("10.0.0.3:41235")));
      chunk(server, 0, message(get, str("addr/2")));
      chunk(server, 0, message(done, ""));
      chunk(server, 1, message(done, ""));
      put("fuzz_rendezvous", "seed-server-two-ranks.bin", server);
      Bytes other = {0};
      chunk(other, 2, hello_of(1, 3, "another-run"));
      chunk(other, 3, hello_of(2, 4, "fuzz-run"));
      chunk(other, 3 | (3 << 6), "");
      put("fuzz_rendezvous", "seed-server-strangers.bin", other);
      const std::string replies = message(ok, "") + message(ok, "") + message(value, str("10.0.0.3:41235")) + message(ok, "");
      Bytes client = {1};
      client.insert(client.end(), replies.begin(), replies.end());
      put("fuzz_rendezvous", "seed-client.bin", client);
      const std::string refused = message(error, str("run id mismatch: this rank is in run 'x'"));
      Bytes client_error = {1};
      client_error.insert(client_error.end(), refused.begin(), refused.end());
      put("fuzz_rendezvous", "seed-client-error.bin", client_error);
    }

    fs::remove_all(tmp);
    std::printf("wrote the seed corpora under %s\n", g_root.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
