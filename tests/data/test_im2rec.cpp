// tests/data/test_im2rec.cpp — im2rec's library: listing folder trees and .lst
// files, packing (labels, class names, pass-through bytes, re-encoding and
// resizing, skipped corrupt files, shuffle, thread-count independence,
// train/val split, shards), verify, exporting an ImageSet as a folder, and
// converting MXNet RecordIO written here by hand as dmlc-core writes it
// (split records included).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/image_folder.h"
#include "data/mxnet_recordio.h"
#include "data/packer.h"
#include "data/record_file.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/rng.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using namespace ember::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;
using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::contains;
using ember::testing::expect_error;
using ember::testing::write_bytes;

// A smooth image with some texture (JPEG-friendly); seed changes it.
Image make_image(int h, int w, int c, uint64_t seed) {
  Image img;
  img.height = h, img.width = w, img.channels = c;
  PhiloxStream rng(seed, 3);
  const int base = int(rng.below(100));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch)
        img.pixels.push_back(uint8_t(base + (x * 90) / w + (y * 60) / h + ch * 20 + int(rng.below(4))));
  return img;
}

Bytes png_of(const Image& img) {
  Bytes b;
  encode_png(img, b);
  return b;
}

Bytes jpeg_of(const Image& img, int quality = 90) {
  Bytes b;
  encode_jpeg(img, quality, b);
  return b;
}

// Encoded bytes decoded to `channels` (0: as stored); `what` names them in errors.
Image decoded(const Bytes& bytes, int channels, const std::string& what) {
  Image img;
  decode_image(bytes.data(), bytes.size(), channels, img, what);
  return img;
}

// The folder tree most tests pack:
//   cat/a.png 20x30x3, cat/b.jpg 24x16x3, cat/sub/c.PNG 10x12x1,
//   dog/d.jpeg 18x18x3, dog/notes.txt (ignored), empty_class/ (no images),
//   zebra/f.png (corrupt), zebra/g.png 15x25x3,
//   .hidden/x.png and top.png (ignored).
struct Tree {
  TempDir dir;
  std::string root;
  Tree() {
    root = dir.file("tree");
    write_bytes(root + "/cat/a.png", png_of(make_image(20, 30, 3, 1)));
    write_bytes(root + "/cat/b.jpg", jpeg_of(make_image(24, 16, 3, 2)));
    write_bytes(root + "/cat/sub/c.PNG", png_of(make_image(10, 12, 1, 3)));
    write_bytes(root + "/dog/d.jpeg", jpeg_of(make_image(18, 18, 3, 4)));
    write_bytes(root + "/dog/notes.txt", {'h', 'i'});
    fs::create_directories(root + "/empty_class");
    write_bytes(root + "/zebra/f.png", {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3, 4, 5});
    write_bytes(root + "/zebra/g.png", png_of(make_image(15, 25, 3, 5)));
    write_bytes(root + "/.hidden/x.png", png_of(make_image(4, 4, 3, 6)));
    write_bytes(root + "/top.png", png_of(make_image(4, 4, 3, 7)));
  }
  std::string path(const std::string& rel) const { return root + "/" + rel; }
};

// n small PNGs in k classes (class<c>/img<i>.png), all decodable.
std::string make_flat_tree(const TempDir& dir, int n, int k) {
  const std::string root = dir.file("flat");
  for (int i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "/class%d/img%03d.png", i % k, i);
    write_bytes(root + name, png_of(make_image(6 + i % 5, 7 + i % 3, 3, uint64_t(100 + i))));
  }
  return root;
}

std::vector<Record> read_all(const std::string& path) {
  RecordFile f(path);
  std::vector<Record> out(size_t(f.size()));
  for (int64_t i = 0; i < f.size(); ++i) f.read(i, out[size_t(i)]);
  return out;
}

std::vector<uint64_t> ids_of(const std::vector<Record>& recs) {
  std::vector<uint64_t> ids;
  for (const auto& r : recs) ids.push_back(r.id);
  return ids;
}

PackOptions quiet(PackOptions o = {}) {
  o.on_skip = [](const std::string&, const std::string&) {};
  return o;
}


}  // namespace

// ------------------------------------------------------------------ sources

TEST_CASE("im2rec: list_image_folder sorts classes and files, recursively") {
  Tree t;
  const SourceList list = list_image_folder(t.root);
  CHECK(list.class_names == std::vector<std::string>{"cat", "dog", "empty_class", "zebra"});
  const std::vector<std::string> want_paths = {t.path("cat/a.png"),  t.path("cat/b.jpg"),   t.path("cat/sub/c.PNG"),
                                               t.path("dog/d.jpeg"), t.path("zebra/f.png"), t.path("zebra/g.png")};
  const std::vector<float> want_labels = {0, 0, 0, 1, 3, 3};
  REQUIRE(list.items.size() == want_paths.size());
  for (size_t i = 0; i < want_paths.size(); ++i) {
    INFO("item ", i);
    CHECK(fs::path(list.items[i].path) == fs::path(want_paths[i]));
    CHECK(list.items[i].labels == std::vector<float>{want_labels[i]});
    CHECK(list.items[i].id == i);
  }
  CHECK(is_image_extension("x/Y.JPEG"));
  CHECK(is_image_extension("a.tga"));
  CHECK_FALSE(is_image_extension("a.txt"));
  CHECK_FALSE(is_image_extension("png"));

  expect_error([&] { list_image_folder(t.dir.file("missing")); }, "not found");
  const std::string no_classes = t.dir.file("no_classes");
  write_bytes(no_classes + "/only.png", png_of(make_image(4, 4, 3, 1)));
  expect_error([&] { list_image_folder(no_classes); }, "no class folders");
  const std::string no_images = t.dir.file("no_images");
  write_bytes(no_images + "/a/readme.txt", {'x'});
  expect_error([&] { list_image_folder(no_images); }, "no image files");
  expect_error([&] { list_image_folder(t.path("cat/a.png")); }, "not a folder");
}

TEST_CASE("im2rec: files with other extensions and files outside the class folders are counted, not dropped silently") {
  Tree t;  // dog/notes.txt, and top.png directly in the root
  write_bytes(t.path("cat/IMG_0001.HEIC"), {'x'});
  write_bytes(t.path("cat/sub/IMG_0002.heic"), {'x'});
  write_bytes(t.path("zebra/README"), {'x'});
  const SourceList list = list_image_folder(t.root);
  CHECK(list.items.size() == 6);
  CHECK(list.skipped_extensions == std::map<std::string, int64_t>{{".heic", 2}, {".txt", 1}, {"", 1}});
  CHECK(list.loose_files == 1);
  CHECK(skipped_files_lines(list, t.root) ==
        std::vector<std::string>{"skipped 4 files with other extensions (.heic: 2, no extension: 1, .txt: 1)",
                                 "ignored 1 file directly in " + t.root + " (images go in class folders: " + t.root +
                                     "/<class>/<image>)"});
  const TempDir other;
  CHECK(skipped_files_lines(list_image_folder(make_flat_tree(other, 4, 2)), "flat").empty());
}

TEST_CASE("im2rec: read_list_file with multi-column labels and its errors") {
  TempDir d;
  const std::string lst = d.file("lists/data.lst");
  write_bytes(lst, {});
  {
    std::ofstream f(lst);
    f << "7\t0.5\t1.25\t-2\tcat/a.png\n"
      << "\n"
      << "3\t1\t2\t3\tsub dir/b c.jpg\r\n"
      << "12\t4e-1\t0\t1\t/abs/path.png\n";
  }
  SourceList list = read_list_file(lst);
  REQUIRE(list.items.size() == 3);
  CHECK(list.class_names.empty());
  CHECK(list.items[0].id == 7);
  CHECK(list.items[0].labels == std::vector<float>{0.5f, 1.25f, -2.0f});
  CHECK(fs::path(list.items[0].path) == fs::path(d.file("lists/cat/a.png")));
  CHECK(list.items[1].id == 3);
  CHECK(fs::path(list.items[1].path) == fs::path(d.file("lists/sub dir/b c.jpg")));
  CHECK(list.items[2].labels == std::vector<float>{0.4f, 0.0f, 1.0f});
  CHECK(list.items[2].path == "/abs/path.png");
  list = read_list_file(lst, "/data/root");
  CHECK(fs::path(list.items[0].path) == fs::path("/data/root/cat/a.png"));

  auto bad = [&](const std::string& body, const std::string& part) {
    const std::string p = d.file("bad.lst");
    write_bytes(p, Bytes(body.begin(), body.end()));
    const std::string msg = error_of([&] { read_list_file(p); });
    INFO("message: ", msg);
    CHECK(contains(msg, part));
  };
  bad("0\t1\ta.png\n1\tx\tb.png\n", "bad.lst:2: label 1 'x' is not a number");
  bad("0\t1\ta.png\n\n-1\t1\tb.png\n", "bad.lst:3: index '-1'");
  bad("zero\t1\ta.png\n", "bad.lst:1: index 'zero'");
  bad(" -1\t1\ta.png\n", "bad.lst:1: index ' -1'");  // strtoull would skip the space and wrap -1
  bad("+1\t1\ta.png\n", "bad.lst:1: index '+1'");
  bad("0 1 a.png\n", "bad.lst:1: expected 'index<TAB>label");
  bad("0\t1\n", "bad.lst:1: expected");
  bad("0\t1\t\n", "bad.lst:1: empty image path");
  bad("0\tnan\ta.png\n", "bad.lst:1: label 1 'nan'");
  bad("\n\n", "no entries");
  expect_error([&] { read_list_file(d.file("missing.lst")); }, "cannot open list file");
}

// ------------------------------------------------------------------ packing

TEST_CASE("im2rec: pass-through keeps the bytes, labels and class names; corrupt files are skipped") {
  Tree t;
  const SourceList list = list_image_folder(t.root);
  PackOptions o;
  o.pass_through = true;
  o.threads = 2;
  std::vector<std::string> skipped_paths, reasons;
  o.on_skip = [&](const std::string& p, const std::string& r) {
    skipped_paths.push_back(p);
    reasons.push_back(r);
  };
  std::vector<int64_t> done;
  const std::string prefix = t.dir.file("out/pt");
  const PackReport rep =
      pack(list.items, list.class_names, prefix, o, [&](const PackProgress& p) { done.push_back(p.done); });
  CHECK(rep.packed == 5);
  REQUIRE(rep.skipped.size() == 1);
  CHECK(fs::path(rep.skipped[0].path) == fs::path(t.path("zebra/f.png")));
  CHECK_MESSAGE(contains(rep.skipped[0].reason, "not a decodable image"), rep.skipped[0].reason);
  CHECK_FALSE(contains(rep.skipped[0].reason, "f.png"));  // the path is not repeated in the reason
  CHECK(skipped_paths == std::vector<std::string>{rep.skipped[0].path});
  CHECK(done == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  REQUIRE(rep.outputs.size() == 1);
  CHECK(rep.outputs[0].path == prefix + ".erec");
  CHECK(rep.outputs[0].records == 5);
  CHECK(rep.output_bytes == fs::file_size(prefix + ".erec"));
  uint64_t source = 0;
  for (const auto& it : list.items) source += fs::file_size(it.path);
  CHECK(rep.source_bytes == source);

  RecordFile f(prefix + ".erec");
  CHECK(f.class_names() == list.class_names);
  CHECK(f.header().num_classes == 4);
  CHECK(f.header().label_type == uint32_t(LabelType::class_index));
  CHECK(f.header().packer_quality == 0);
  CHECK(f.header().packer_resize == 0);
  CHECK(f.header().packer_channels == 0);
  const auto recs = read_all(prefix + ".erec");
  // The items without the corrupt one (item 4), in list order.
  const std::vector<size_t> items = {0, 1, 2, 3, 5};
  const std::vector<int64_t> labels = {0, 0, 0, 1, 3};
  const std::vector<std::array<uint32_t, 3>> shapes = {{20, 30, 3}, {24, 16, 3}, {10, 12, 1}, {18, 18, 3}, {15, 25, 3}};
  const std::vector<Encoding> encodings = {Encoding::png, Encoding::jpeg, Encoding::png, Encoding::jpeg, Encoding::png};
  REQUIRE(recs.size() == 5);
  for (size_t k = 0; k < 5; ++k) {
    INFO("record ", k);
    const auto& r = recs[k];
    CHECK(r.id == items[k]);
    CHECK(r.label == labels[k]);
    CHECK(r.payload == read_file(list.items[items[k]].path));
    CHECK(r.height == shapes[k][0]);
    CHECK(r.width == shapes[k][1]);
    CHECK(r.channels == shapes[k][2]);
    CHECK(r.encoding == encodings[k]);
  }
}

TEST_CASE("im2rec: truncated JPEG and PNG files are skipped, bytes after the image are kept") {
  TempDir d;
  const Bytes jpeg = jpeg_of(make_image(40, 48, 3, 8)), png = png_of(make_image(30, 20, 3, 9));
  Bytes trailing = jpeg;
  trailing.insert(trailing.end(), {0xFF, 0x00, 1, 2, 3});
  write_bytes(d.file("tree/a/full.jpg"), jpeg);
  write_bytes(d.file("tree/a/trailing.jpg"), trailing);
  const std::vector<size_t> jpeg_cuts = {jpeg.size() - 2, jpeg.size() * 3 / 4, jpeg.size() / 2};
  const std::vector<size_t> png_cuts = {png.size() - 12, png.size() * 3 / 4, png.size() / 2};
  for (size_t k = 0; k < 3; ++k) {
    write_bytes(d.file("tree/b/cut" + std::to_string(k) + ".jpg"),
                Bytes(jpeg.begin(), jpeg.begin() + long(jpeg_cuts[k])));
    write_bytes(d.file("tree/b/cut" + std::to_string(k) + ".png"), Bytes(png.begin(), png.begin() + long(png_cuts[k])));
  }
  const SourceList list = list_image_folder(d.file("tree"));
  REQUIRE(list.items.size() == 8);
  PackOptions o = quiet();
  o.pass_through = true;
  const PackReport rep = pack(list.items, list.class_names, d.file("t"), o);
  CHECK(rep.packed == 2);
  CHECK(rep.skipped.size() == 6);
  for (const auto& s : rep.skipped) {
    INFO(s.path, ": ", s.reason);
    CHECK(fs::path(s.path).parent_path().filename() == "b");
    CHECK(contains(s.reason, "not a decodable image"));
  }
  const auto recs = read_all(d.file("t.erec"));
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].payload == jpeg);
  CHECK(recs[1].payload == trailing);
}

TEST_CASE("im2rec: re-encoding, resizing, channels and raw pixels") {
  Tree t;
  SourceList list = list_image_folder(t.root);
  list.items.erase(list.items.begin() + 4);  // the corrupt file
  const std::vector<std::pair<int, int>> sizes = {{20, 30}, {24, 16}, {10, 12}, {18, 18}, {15, 25}};

  SUBCASE("JPEG, short side 8") {
    PackOptions o = quiet();
    o.resize = 8;
    o.quality = 90;
    const PackReport rep = pack(list.items, list.class_names, t.dir.file("re"), o);
    CHECK(rep.packed == 5);
    RecordFile f(t.dir.file("re.erec"));
    CHECK(f.header().packer_resize == 8);
    CHECK(f.header().packer_quality == 90);
    CHECK(f.header().packer_channels == 3);
    const auto recs = read_all(t.dir.file("re.erec"));
    REQUIRE(recs.size() == 5);
    for (size_t k = 0; k < 5; ++k) {
      INFO("record ", k);
      const auto [h, w] = sizes[k];
      const int want_h = h <= w ? 8 : h * 8 / w, want_w = h <= w ? w * 8 / h : 8;
      CHECK(recs[k].height == uint32_t(want_h));
      CHECK(recs[k].width == uint32_t(want_w));
      CHECK(recs[k].channels == 3);
      CHECK(recs[k].encoding == Encoding::jpeg);
      const Image img = decoded(recs[k].payload, 0, "record");
      CHECK(img.height == want_h);
      CHECK(img.width == want_w);
      CHECK(img.channels == 3);
    }
  }
  SUBCASE("PNG is lossless; grey") {
    PackOptions o = quiet();
    o.encoding = PackEncoding::png;
    o.channels = 1;
    pack(list.items, list.class_names, t.dir.file("png"), o);
    const auto recs = read_all(t.dir.file("png.erec"));
    REQUIRE(recs.size() == 5);
    for (size_t k = 0; k < 5; ++k) {
      INFO("record ", k);
      CHECK(recs[k].encoding == Encoding::png);
      CHECK(recs[k].channels == 1);
      const Image want = decoded(read_file(list.items[k].path), 1, "source");
      const Image got = decoded(recs[k].payload, 0, "record");
      CHECK(got.channels == 1);
      CHECK(got.pixels == want.pixels);
    }
  }
  SUBCASE("raw pixels") {
    PackOptions o = quiet();
    o.encoding = PackEncoding::raw;
    o.resize = 12;
    pack(list.items, list.class_names, t.dir.file("raw"), o);
    const auto recs = read_all(t.dir.file("raw.erec"));
    REQUIRE(recs.size() == 5);
    for (size_t k = 0; k < 5; ++k) {
      INFO("record ", k);
      CHECK(recs[k].encoding == Encoding::raw);
      Image want;
      resize_short_side(decoded(read_file(list.items[k].path), 3, "source"), 12, want);
      CHECK(recs[k].height == uint32_t(want.height));
      CHECK(recs[k].width == uint32_t(want.width));
      CHECK(recs[k].payload == want.pixels);
    }
  }
}

TEST_CASE("im2rec: a list file with float labels packs f32 label vectors") {
  Tree t;
  const std::string lst = t.dir.file("tree/multi.lst");
  {
    std::ofstream f(lst);
    f << "40\t0.5\t-1.5\t3\tcat/a.png\n"
      << "41\t2.75\t0\t1\tdog/d.jpeg\n"
      << "42\t1\t1\t1\tzebra/f.png\n"  // corrupt
      << "43\t-3.5\t2\t0.25\t" << t.path("zebra/g.png") << "\n";
  }
  const SourceList list = read_list_file(lst);
  const PackReport rep = pack(list.items, list.class_names, t.dir.file("multi"), quiet([] {
                                PackOptions o;
                                o.pass_through = true;
                                return o;
                              }()));
  CHECK(rep.packed == 3);
  CHECK(rep.skipped.size() == 1);
  RecordFile f(t.dir.file("multi.erec"));
  CHECK(f.header().label_type == uint32_t(LabelType::f32_vector));
  CHECK(f.header().label_width == 3);
  CHECK(f.header().num_classes == 0);
  CHECK(f.class_names().empty());
  const auto recs = read_all(t.dir.file("multi.erec"));
  REQUIRE(recs.size() == 3);
  CHECK(ids_of(recs) == std::vector<uint64_t>{40, 41, 43});
  CHECK(recs[0].label_values == std::vector<float>{0.5f, -1.5f, 3.0f});
  CHECK(recs[0].label == 0);
  CHECK(recs[1].label_values == std::vector<float>{2.75f, 0.0f, 1.0f});
  CHECK(recs[1].label == 2);
  CHECK(recs[2].label_values == std::vector<float>{-3.5f, 2.0f, 0.25f});
  CHECK(recs[2].label == -3);
  CHECK(recs[1].payload == read_file(t.path("dog/d.jpeg")));

  // One integer label per line: class indices, num_classes = max + 1.
  const std::string lst2 = t.dir.file("tree/classes.lst");
  {
    std::ofstream f2(lst2);
    f2 << "0\t4\tcat/a.png\n1\t0\tdog/d.jpeg\n";
  }
  const SourceList l2 = read_list_file(lst2);
  pack(l2.items, l2.class_names, t.dir.file("classes"), quiet());
  RecordFile f2(t.dir.file("classes.erec"));
  CHECK(f2.header().label_type == uint32_t(LabelType::class_index));
  CHECK(f2.header().num_classes == 5);
  const auto r2 = read_all(t.dir.file("classes.erec"));
  REQUIRE(r2.size() == 2);
  CHECK(r2[0].label == 4);
  CHECK(r2[1].label == 0);

  // Different label counts cannot share a file.
  std::vector<SourceItem> mixed = list.items;
  mixed[1].labels.pop_back();
  expect_error([&] { pack(mixed, {}, t.dir.file("mixed"), quiet()); }, "every image needs the same number");
  CHECK_FALSE(fs::exists(t.dir.file("mixed.erec")));
}

TEST_CASE("im2rec: shuffle is deterministic for a seed; threads do not change the output") {
  TempDir d;
  const std::string root = make_flat_tree(d, 24, 3);
  const SourceList list = list_image_folder(root);
  REQUIRE(list.items.size() == 24);
  auto packed_ids = [&](bool shuffle, uint64_t seed, const std::string& name) {
    PackOptions o = quiet();
    o.shuffle = shuffle;
    o.seed = seed;
    o.pass_through = true;
    pack(list.items, list.class_names, d.file(name), o);
    return ids_of(read_all(d.file(name + ".erec")));
  };
  std::vector<uint64_t> sorted(24);
  for (size_t i = 0; i < 24; ++i) sorted[i] = i;
  CHECK(packed_ids(false, 0, "plain") == sorted);
  const auto a = packed_ids(true, 7, "s7a"), b = packed_ids(true, 7, "s7b"), c = packed_ids(true, 8, "s8");
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != sorted);
  auto as = a;
  std::sort(as.begin(), as.end());
  CHECK(as == sorted);

  // Re-encoding with resize and a split into shards on 1 and 3 threads: the
  // same files apart from the header (creation time).
  auto pack_with = [&](int threads, const std::string& name) {
    PackOptions o = quiet();
    o.threads = threads;
    o.resize = 5;
    o.quality = 80;
    o.shuffle = true;
    o.seed = 3;
    o.train_ratio = 0.7;
    o.shards = 2;
    return pack(list.items, list.class_names, d.file(name), o);
  };
  const PackReport r1 = pack_with(1, "t1"), r3 = pack_with(3, "t3");
  REQUIRE(r1.outputs.size() == 4);
  REQUIRE(r3.outputs.size() == 4);
  for (size_t k = 0; k < 4; ++k) {
    INFO(r1.outputs[k].path);
    const auto x = read_all(r1.outputs[k].path), y = read_all(r3.outputs[k].path);
    REQUIRE(x.size() == y.size());
    CHECK(x.size() > 0);
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK(x[i].id == y[i].id);
      CHECK(x[i].label == y[i].label);
      CHECK(x[i].payload == y[i].payload);
      CHECK(x[i].height == y[i].height);
    }
    Bytes fx = read_file(r1.outputs[k].path), fy = read_file(r3.outputs[k].path);
    REQUIRE(fx.size() == fy.size());
    CHECK(std::equal(fx.begin() + 256, fx.end(), fy.begin() + 256));
  }
}

TEST_CASE("im2rec: train/val split and shards") {
  TempDir d;
  const std::string root = make_flat_tree(d, 20, 4);
  const SourceList list = list_image_folder(root);
  CHECK(pack_output_names("out/x", PackOptions{}) == std::vector<std::vector<std::string>>{{"out/x.erec"}});
  PackOptions names;
  names.train_ratio = 0.5;
  names.shards = 3;
  CHECK(pack_output_names("p", names) ==
        std::vector<std::vector<std::string>>{
            {"p_train-00000-of-00003.erec", "p_train-00001-of-00003.erec", "p_train-00002-of-00003.erec"},
            {"p_val-00000-of-00003.erec", "p_val-00001-of-00003.erec", "p_val-00002-of-00003.erec"}});

  SUBCASE("split") {
    PackOptions o = quiet();
    o.pass_through = true;
    o.train_ratio = 0.75;
    o.shuffle = true;
    o.seed = 11;
    const PackReport rep = pack(list.items, list.class_names, d.file("s"), o);
    REQUIRE(rep.outputs.size() == 2);
    CHECK(rep.outputs[0].path == d.file("s_train.erec"));
    CHECK(rep.outputs[1].path == d.file("s_val.erec"));
    const auto train = ids_of(read_all(d.file("s_train.erec"))), val = ids_of(read_all(d.file("s_val.erec")));
    CHECK(train.size() == 15);
    CHECK(val.size() == 5);
    std::set<uint64_t> all(train.begin(), train.end());
    for (uint64_t v : val) CHECK(all.insert(v).second);  // disjoint
    CHECK(all.size() == 20);
    CHECK(RecordFile(d.file("s_val.erec")).class_names() == list.class_names);
  }
  SUBCASE("shards: round robin, union is everything") {
    PackOptions o = quiet();
    o.pass_through = true;
    o.shards = 3;
    const PackReport rep = pack(list.items, list.class_names, d.file("sh"), o);
    REQUIRE(rep.outputs.size() == 3);
    std::set<uint64_t> all;
    size_t total = 0;
    for (int k = 0; k < 3; ++k) {
      const std::string p = d.file("sh-0000" + std::to_string(k) + "-of-00003.erec");
      CHECK(rep.outputs[size_t(k)].path == p);
      const auto ids = ids_of(read_all(p));
      CHECK(ids.size() == (k < 2 ? 7u : 6u));
      for (size_t j = 0; j < ids.size(); ++j) CHECK(ids[j] == uint64_t(k) + 3 * j);  // item i in shard i % 3
      for (uint64_t v : ids) CHECK(all.insert(v).second);
      total += ids.size();
    }
    CHECK(total == 20);
    CHECK(all.size() == 20);
    // The loader's view: the shards as one data set.
    RecordDataset ds(d.file("sh-00000-of-00003.erec") + "," + d.file("sh-00001-of-00003.erec") + "," +
                     d.file("sh-00002-of-00003.erec"));
    CHECK(ds.size() == 20);
    CHECK(ds.num_classes() == 4);
  }
  SUBCASE("split and shards") {
    PackOptions o = quiet();
    o.train_ratio = 0.5;
    o.shards = 2;
    o.encoding = PackEncoding::png;
    const PackReport rep = pack(list.items, list.class_names, d.file("b"), o);
    REQUIRE(rep.outputs.size() == 4);
    std::set<uint64_t> train, val;
    for (size_t k = 0; k < 4; ++k) {
      CHECK(rep.outputs[k].records == 5);
      for (uint64_t v : ids_of(read_all(rep.outputs[k].path))) CHECK((k < 2 ? train : val).insert(v).second);
    }
    CHECK(train == std::set<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(val == std::set<uint64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  }
}

TEST_CASE("im2rec: option errors") {
  TempDir d;
  const std::string root = make_flat_tree(d, 2, 1);
  const SourceList list = list_image_folder(root);
  auto with = [](auto f) {
    PackOptions o;
    f(o);
    return o;
  };
  expect_error([&] { check_pack_options(with([](PackOptions& o) { o.pass_through = true, o.resize = 256; })); },
               "pass-through");
  expect_error([&] { check_pack_options(with([](PackOptions& o) { o.quality = 101; })); }, "quality 101");
  expect_error([&] { check_pack_options(with([](PackOptions& o) { o.channels = 2; })); }, "channels 2");
  expect_error([&] { check_pack_options(with([](PackOptions& o) { o.train_ratio = 0; })); }, "train ratio");
  expect_error([&] { check_pack_options(with([](PackOptions& o) { o.shards = 0; })); }, "shards 0");
  expect_error([&] { check_pack_options(with([](PackOptions& o) { o.threads = 0; })); }, "threads 0");
  expect_error([&] { pack(list.items, list.class_names, d.file("x"), with([](PackOptions& o) { o.resize = -1; })); },
               "resize -1");
  expect_error([&] { pack({}, {}, d.file("x"), PackOptions{}); }, "no images");
  // A class index beyond the class names.
  auto items = list.items;
  items[0].labels = {5};
  expect_error([&] { pack(items, list.class_names, d.file("x"), quiet()); }, "class index below 1");
  CHECK_FALSE(fs::exists(d.file("x.erec")));
}

TEST_CASE("im2rec: run_ordered consumes in order and passes errors on") {
  std::vector<int64_t> slots(5, -1), consumed;
  run_ordered(
      50, 3, 5, [&](int64_t i, size_t s) { slots[s] = i * i; },
      [&](int64_t i, size_t s) {
        CHECK(slots[s] == i * i);
        consumed.push_back(i);
      });
  CHECK(consumed.size() == 50);
  CHECK(std::is_sorted(consumed.begin(), consumed.end()));
  expect_error(
      [&] {
        run_ordered(
            100, 2, 4, [&](int64_t i, size_t) { EMBER_CHECK(i != 37, "work failed at ", i); }, [](int64_t, size_t) {});
      },
      "work failed at 37");
  int seen = 0;
  expect_error(
      [&] {
        run_ordered(
            100, 2, 4, [](int64_t, size_t) {},
            [&](int64_t i, size_t) {
              ++seen;
              EMBER_CHECK(i != 9, "consume failed at ", i);
            });
      },
      "consume failed at 9");
  CHECK(seen == 10);
}

// ------------------------------------------------------------------ verify

TEST_CASE("im2rec: verify passes a packed file and finds a flipped payload byte") {
  TempDir d;
  const std::string root = make_flat_tree(d, 6, 2);
  const SourceList list = list_image_folder(root);
  PackOptions o = quiet();
  o.pass_through = true;
  pack(list.items, list.class_names, d.file("v"), o);
  const std::string path = d.file("v.erec");
  VerifyReport ok = verify_record_file(path, 2);
  CHECK(ok.ok());
  CHECK(ok.records == 6);
  CHECK(ok.num_classes == 2);
  CHECK(ok.bytes == fs::file_size(path));

  // Flip one byte in the middle of record 3's payload.
  uint64_t offset;
  {
    RecordFile f(path);
    offset = f.entry(3).offset + 64 + f.entry(3).payload_length / 2;
  }
  Bytes bytes = read_file(path);
  bytes[offset] ^= 0x01;
  write_bytes(path, bytes);
  const VerifyReport bad = verify_record_file(path, 2);
  CHECK_FALSE(bad.ok());
  CHECK(bad.bad == 1);
  REQUIRE(bad.problems.size() == 1);
  CHECK_MESSAGE(contains(bad.problems[0], "record 3"), bad.problems[0]);
  CHECK_MESSAGE(contains(bad.problems[0], "crc"), bad.problems[0]);

  // A damaged header: the file is unreadable.
  bytes[20] ^= 0x40;
  write_bytes(path, bytes);
  const VerifyReport broken = verify_record_file(path);
  CHECK_FALSE(broken.ok());
  CHECK(broken.problems.size() == 1);
  const VerifyReport missing = verify_record_file(d.file("none.erec"));
  CHECK_FALSE(missing.ok());

  // CRCs fine but the image is not: undecodable bytes, and a wrong stated size.
  {
    RecordFileSettings s;
    s.num_classes = 2;
    RecordWriter w(d.file("w.erec"), s);
    const Bytes good = png_of(make_image(8, 9, 3, 1));
    const Bytes junk = {1, 2, 3, 4, 5, 6, 7, 8};
    RecordInput in;
    in.height = 8, in.width = 9, in.channels = 3, in.encoding = Encoding::png;
    in.payload = good.data(), in.payload_length = good.size();
    w.add(in);
    in.id = 1;
    in.payload = junk.data(), in.payload_length = junk.size();
    w.add(in);
    in.id = 2;
    in.height = 9;  // the PNG is 8 high
    in.payload = good.data(), in.payload_length = good.size();
    w.add(in);
    w.finish();
  }
  const VerifyReport img = verify_record_file(d.file("w.erec"), 3);
  CHECK(img.records == 3);
  CHECK(img.bad == 2);
  REQUIRE(img.problems.size() == 2);
  CHECK_MESSAGE(contains(img.problems[0], "record 1 (id 1): not a decodable image"), img.problems[0]);
  CHECK_MESSAGE(contains(img.problems[1], "decodes to 8x9x3, the record says 9x9x3"), img.problems[1]);
}

// ------------------------------------------------------------------ export

TEST_CASE("im2rec: export_image_folder writes class folders of PNG/JPEG files") {
  TempDir d;
  ImageSet set;
  set.count = 3, set.channels = 3, set.height = 4, set.width = 5, set.num_classes = 2;
  set.name = "tiny";
  PhiloxStream rng(5, 5);
  for (int i = 0; i < 3 * 3 * 4 * 5; ++i) set.pixels.push_back(uint8_t(rng.next_u32()));
  set.labels = {1, 0, 1};
  const std::vector<std::string> names = {"T-shirt/top", "Bag"};
  const ExportReport rep = export_image_folder(set, names, d.file("ex"), ExportFormat::png);
  CHECK(rep.files == 3);
  const std::string p0 = d.file("ex/Bag/00000.png"), p1 = d.file("ex/T-shirt_top/00001.png"),
                    p2 = d.file("ex/Bag/00002.png");
  REQUIRE(fs::exists(p0));
  REQUIRE(fs::exists(p1));
  REQUIRE(fs::exists(p2));
  CHECK(rep.bytes == fs::file_size(p0) + fs::file_size(p1) + fs::file_size(p2));
  // Image 1 decodes to the set's CHW pixels.
  const Image img = decoded(read_file(p1), 0, p1);
  REQUIRE(img.channels == 3);
  bool same = true;
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 20; ++p) same = same && img.pixels[size_t(p * 3 + c)] == set.pixels[size_t(60 + c * 20 + p)];
  CHECK(same);
  // The folder packs back with sorted class names.
  const SourceList list = list_image_folder(d.file("ex"));
  CHECK(list.class_names == std::vector<std::string>{"Bag", "T-shirt_top"});
  CHECK(list.items.size() == 3);

  export_image_folder(set, names, d.file("exj"), ExportFormat::jpeg, 80);
  CHECK(fs::exists(d.file("exj/Bag/00002.jpg")));
  CHECK(class_folder_name("a/b/c") == "a_b_c");
  expect_error([&] { class_folder_name(".."); }, "cannot be a folder name");
  expect_error([&] { export_image_folder(set, {"a/b", "a_b"}, d.file("dup"), ExportFormat::png); }, "twice");
  expect_error([&] { export_image_folder(set, {"only one"}, d.file("few"), ExportFormat::png); }, "class names");
}

// ------------------------------------------------------------------ MXNet RecordIO

namespace {

constexpr uint32_t kMagic = 0xced7230a;

void put_u32(Bytes& b, uint32_t v) {
  for (int k = 0; k < 4; ++k) b.push_back(uint8_t(v >> (8 * k)));
}
void put_u64(Bytes& b, uint64_t v) {
  for (int k = 0; k < 8; ++k) b.push_back(uint8_t(v >> (8 * k)));
}
void put_f32(Bytes& b, float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  put_u32(b, v);
}

// MXNet's recordio.pack: IRHeader 'IfQQ', the labels when flag > 0, the image.
Bytes mx_payload(const std::vector<float>& labels, uint64_t id, const Bytes& image, bool multi) {
  Bytes b;
  put_u32(b, multi ? uint32_t(labels.size()) : 0);
  put_f32(b, multi ? 0.0f : labels[0]);
  put_u64(b, id);
  put_u64(b, 0);
  if (multi)
    for (float l : labels) put_f32(b, l);
  b.insert(b.end(), image.begin(), image.end());
  return b;
}

// dmlc-core's RecordIOWriter::WriteRecord: split at every 4-aligned magic,
// which is left out; returns the number of parts written.
int mx_write_record(Bytes& file, const Bytes& payload) {
  auto lrec = [](uint32_t cflag, uint32_t len) { return (cflag << 29) | len; };
  const uint32_t len = uint32_t(payload.size());
  uint32_t dptr = 0;
  int parts = 0;
  for (uint32_t i = 0; i + 4 <= (len & ~3u); i += 4) {
    uint32_t v;
    std::memcpy(&v, payload.data() + i, 4);
    if (v == kMagic) {
      put_u32(file, kMagic);
      put_u32(file, lrec(dptr == 0 ? 1 : 2, i - dptr));
      file.insert(file.end(), payload.begin() + dptr, payload.begin() + i);
      dptr = i + 4;
      ++parts;
    }
  }
  put_u32(file, kMagic);
  put_u32(file, lrec(dptr != 0 ? 3 : 0, len - dptr));
  file.insert(file.end(), payload.begin() + dptr, payload.end());
  file.resize(file.size() + ((4 - len % 4) % 4), 0);
  return parts + 1;
}

Bytes magic_bytes() {
  Bytes b;
  put_u32(b, kMagic);
  return b;
}

}  // namespace

TEST_CASE("im2rec: MXNet RecordIO, split records and .idx order") {
  TempDir d;
  const Bytes png = png_of(make_image(9, 11, 3, 1));
  const Bytes jpeg = jpeg_of(make_image(12, 10, 3, 2));
  // Record 1: the image, then bytes after it (ignored by decoders) holding the
  // magic at 4-aligned payload offsets twice in a row and at the very end.
  Bytes image1 = jpeg;
  while ((24 + image1.size()) % 4 != 0) image1.push_back(0xAB);
  for (const Bytes& m : {magic_bytes(), magic_bytes()}) image1.insert(image1.end(), m.begin(), m.end());
  image1.insert(image1.end(), {1, 2, 3, 4, 5});
  while ((24 + image1.size()) % 4 != 0) image1.push_back(0xCD);
  const Bytes m = magic_bytes();
  image1.insert(image1.end(), m.begin(), m.end());
  const Bytes junk = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e', 1, 2, 3};

  struct Rec {
    float label;
    uint64_t id;
    Bytes image;
  };
  const std::vector<Rec> recs = {
      {2, 10, png},      // whole record
      {0, 11, image1},   // split in 4 parts (last one empty)
      {1, 12, junk},     // not an image: skipped
      {3, kMagic, png},  // the id's low word is the magic: split inside the IRHeader
  };
  Bytes file;
  std::vector<uint64_t> offsets;
  std::vector<int> parts;
  for (const auto& r : recs) {
    offsets.push_back(file.size());
    parts.push_back(mx_write_record(file, mx_payload({r.label}, r.id, r.image, false)));
  }
  CHECK(parts == std::vector<int>{1, 4, 1, 2});  // the splitting happened
  CHECK(file.size() % 4 == 0);
  const std::string rec_path = d.file("data.rec"), idx_path = d.file("data.idx");
  write_bytes(rec_path, file);
  {
    std::ofstream idx(idx_path);
    for (size_t k : {3, 0, 2, 1}) idx << recs[k].id << "\t" << offsets[k] << "\n";
  }

  // The reader joins the parts.
  const MxnetRecordFile rf(rec_path);
  REQUIRE(rf.size() == 4);
  Bytes payload;
  for (size_t k = 0; k < 4; ++k) {
    INFO("record ", k);
    CHECK(rf.offset(k) == offsets[k]);
    rf.read(k, payload);
    CHECK(payload == mx_payload({recs[k].label}, recs[k].id, recs[k].image, false));
    rf.read(k, payload, 20, 8);  // a slice across the parts
    const Bytes whole = mx_payload({recs[k].label}, recs[k].id, recs[k].image, false);
    CHECK(payload == Bytes(whole.begin() + 20, whole.begin() + 28));
  }
  CHECK(rf.find(offsets[2]) == 2);
  CHECK(rf.find(offsets[2] + 4) == -1);

  SUBCASE("with .idx: its order") {
    std::vector<std::string> skipped;
    MxnetConvertOptions o;
    o.threads = 2;
    o.on_skip = [&](const std::string& what, const std::string&) { skipped.push_back(what); };
    const MxnetConvertReport rep = convert_mxnet(rec_path, idx_path, d.file("out.erec"), o);
    CHECK(rep.used_index);
    CHECK(rep.rec_records == 4);
    CHECK(rep.packed == 3);
    REQUIRE(skipped.size() == 1);
    CHECK_MESSAGE(contains(skipped[0], "data.rec@" + std::to_string(offsets[2]) + " (id 12)"), skipped[0]);
    RecordFile f(d.file("out.erec"));
    CHECK(f.header().label_type == uint32_t(LabelType::class_index));
    CHECK(f.header().num_classes == 4);
    const auto out = read_all(d.file("out.erec"));
    REQUIRE(out.size() == 3);
    CHECK(ids_of(out) == std::vector<uint64_t>{kMagic, 10, 11});
    CHECK(out[0].label == 3);
    CHECK(out[1].label == 2);
    CHECK(out[2].label == 0);
    CHECK(out[0].payload == png);
    CHECK(out[1].payload == png);
    CHECK(out[2].payload == image1);  // the bytes as stored, magic and all
    CHECK(out[2].encoding == Encoding::jpeg);
    CHECK(out[2].height == 12);
    CHECK(out[2].width == 10);
    CHECK(verify_record_file(d.file("out.erec")).ok());
  }
  SUBCASE("without .idx: file order") {
    MxnetConvertOptions o;
    o.on_skip = [](const std::string&, const std::string&) {};
    const MxnetConvertReport rep = convert_mxnet(rec_path, "", d.file("seq.erec"), o);
    CHECK_FALSE(rep.used_index);
    CHECK(ids_of(read_all(d.file("seq.erec"))) == std::vector<uint64_t>{10, 11, kMagic});
  }
}

TEST_CASE("im2rec: MXNet multi-label records (flag > 0) and broken files") {
  TempDir d;
  const Bytes png = png_of(make_image(7, 8, 1, 9));
  Bytes file;
  std::vector<uint64_t> offsets;
  const std::vector<std::vector<float>> labels = {{0.5f, 2.0f, -1.0f}, {3.25f, 0.0f, 7.0f}};
  for (size_t k = 0; k < 2; ++k) {
    offsets.push_back(file.size());
    mx_write_record(file, mx_payload(labels[k], 100 + k, png, true));
  }
  const std::string rec_path = d.file("multi.rec");
  write_bytes(rec_path, file);
  MxnetConvertOptions o;
  const MxnetConvertReport rep = convert_mxnet(rec_path, "", d.file("multi.erec"), o);
  CHECK(rep.packed == 2);
  RecordFile f(d.file("multi.erec"));
  CHECK(f.header().label_type == uint32_t(LabelType::f32_vector));
  CHECK(f.header().label_width == 3);
  const auto out = read_all(d.file("multi.erec"));
  REQUIRE(out.size() == 2);
  CHECK(out[0].label_values == labels[0]);
  CHECK(out[1].label_values == labels[1]);
  CHECK(out[1].label == 3);
  CHECK(out[0].id == 100);
  CHECK(out[0].payload == png);
  CHECK(out[0].channels == 1);

  const MxnetHeader h = parse_mxnet_header(mx_payload(labels[0], 5, png, true).data(), 24 + 12 + png.size(), "x");
  CHECK(h.flag == 3);
  CHECK(h.labels == labels[0]);
  CHECK(h.image_offset == 36);

  auto broken = [&](Bytes bytes, const std::string& part, const std::string& idx = "") {
    const std::string p = d.file("broken.rec");
    write_bytes(p, bytes);
    std::string idx_path;
    if (!idx.empty()) {
      idx_path = d.file("broken.idx");
      write_bytes(idx_path, Bytes(idx.begin(), idx.end()));
    }
    const std::string msg = error_of([&] { convert_mxnet(p, idx_path, d.file("broken.erec"), o); });
    INFO("message: ", msg);
    CHECK(contains(msg, part));
    CHECK_FALSE(fs::exists(d.file("broken.erec")));
  };
  Bytes bad_magic = file;
  bad_magic[offsets[1]] ^= 0xFF;
  broken(bad_magic, "broken.rec: bad RecordIO magic 0xced723f5 at offset " + std::to_string(offsets[1]));
  broken(Bytes(file.begin(), file.begin() + long(offsets[1]) + 5),
         "truncated RecordIO part header at offset " + std::to_string(offsets[1]));
  broken(Bytes(file.begin(), file.end() - 12), "past the end of the file");
  // A middle part without a first part; a file ending inside a split record.
  Bytes orphan;
  put_u32(orphan, kMagic);
  put_u32(orphan, (2u << 29) | 4);
  put_u32(orphan, 0);
  broken(orphan, "middle part at offset 0 without a first part");
  Bytes unfinished;
  put_u32(unfinished, kMagic);
  put_u32(unfinished, (1u << 29) | 4);
  put_u32(unfinished, 0);
  broken(unfinished, "ends inside the split record at offset 0");
  // Payloads too short for their header or labels.
  Bytes short_rec;
  mx_write_record(short_rec, Bytes(10, 1));
  broken(short_rec, "shorter than the 24-byte IRHeader");
  Bytes few_labels;
  Bytes p = mx_payload({1, 2}, 1, {}, true);
  p[0] = 200;  // announces 200 labels
  mx_write_record(few_labels, p);
  broken(few_labels, "IRHeader flag 200 announces 200 labels");
  // Different label counts.
  Bytes mixed = file;
  mx_write_record(mixed, mx_payload({1}, 9, png, false));
  broken(mixed, "has 1 labels, the first record 3");
  // .idx problems.
  broken(file, "broken.idx: key 7: offset 5 is not the start of a record", "7\t5\n");
  broken(file, "is listed twice", "1\t0\n2\t0\n");
  broken(file, "broken.idx:2: offset 'x'", "1\t0\n2\tx\n");
  // A megabyte-long offset is shown by its first 40 bytes: the message stays short.
  broken(file, "broken.idx:1: offset '" + std::string(40, '9') + "...' is not a non-negative integer",
         "1\t" + std::string(40, '9') + std::string(1 << 20, 'x') + "\n");
  broken(file, "broken.idx:1: expected 'key<TAB>offset'", "1 0\n");
}
