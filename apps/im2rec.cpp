// apps/im2rec.cpp — pack images into ember record files (MXNet's im2rec).
//
//   build/im2rec [options] OUT_PREFIX SOURCE        SOURCE: a folder of class folders, or a .lst file
//   build/im2rec --verify FILE...                    check every CRC, decode every image
//   build/im2rec --from-mxnet X.rec [X.idx] [Y.rec ...] OUT.erec  convert MXNet RecordIO (image bytes kept)
//
// The work is data/packer.h (packing, verify) and data/mxnet_recordio.h
// (conversion); this file parses the command line (apps/training/flags.h for
// the options, positional arguments taken out first), prints progress
// ("packed 5000/60000 images, 812 img/s" every 1000 images or 2 s) and a
// summary. Errors: one line "im2rec: <message>", exit 1.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "apps/training/flags.h"
#include "data/image_folder.h"
#include "data/mxnet_recordio.h"
#include "data/packer.h"
#include "engine/error.h"

namespace {

using namespace ember;

struct Settings {
  int resize = 0;
  int quality = 95;
  bool pass_through = false;
  std::string encoding = "jpeg";
  int channels = 3;
  int num_thread = 0;
  bool shuffle = true;
  int64_t seed = 0;
  double train_ratio = 1.0;
  int shards = 1;
  std::string root;
};

const char* kSummary =
    "Pack images into ember record files (.erec, data/FORMAT.md), as MXNet's im2rec.\n"
    "\n"
    "  im2rec [options] OUT_PREFIX SOURCE\n"
    "      SOURCE: a folder of class folders (ROOT/<class>/.../<image>; labels = sorted class index)\n"
    "      or an MXNet .lst file (index<TAB>label[<TAB>label...]<TAB>path).\n"
    "      Writes OUT_PREFIX.erec (a trailing .erec of OUT_PREFIX is dropped); with --train-ratio < 1\n"
    "      OUT_PREFIX_train.erec + OUT_PREFIX_val.erec; with --shards K > 1 OUT_PREFIX-00000-of-0000K.erec\n"
    "      ... (record j of a split goes to shard j % K). Corrupt images are reported and skipped.\n"
    "  im2rec --verify FILE...\n"
    "      check every CRC and decode every image; exit 1 if anything is bad.\n"
    "  im2rec --from-mxnet X.rec [X.idx] [Y.rec [Y.idx] ...] OUT.erec\n"
    "      convert MXNet RecordIO (image bytes kept after a decode check; .idx gives the order). Several\n"
    "      .rec files (im2rec --chunks parts) become one file, in the order given; X.idx pairs with X.rec.";

void declare(apps::Flags& f, Settings& s) {
  f.group("packing");
  f.add("resize", &s.resize, "resize the shorter side to N pixels (0: keep the size)");
  f.add("quality", &s.quality, "JPEG quality of re-encoded images (1-100)");
  f.add("pass-through", &s.pass_through, "1: keep each file's original bytes (checked by decoding; no --resize)");
  f.add("encoding", &s.encoding, "re-encoding: jpeg, png or raw (u8 pixels)");
  f.add("channels", &s.channels, "re-encoding: 3 (RGB), 1 (grey) or 0 (as stored)");
  f.add("root", &s.root, "folder the paths of a .lst file are relative to (default: the list's folder)");
  f.group("order and outputs");
  f.add("shuffle", &s.shuffle, "shuffle the list (deterministic for --seed) before splitting and sharding");
  f.add("seed", &s.seed, "seed of --shuffle");
  f.add("train-ratio", &s.train_ratio,
        "fraction of images in PREFIX_train.erec, the rest in PREFIX_val.erec (1: no split)");
  f.add("shards", &s.shards, "files per split");
  f.group("run");
  f.add("num-thread", &s.num_thread, "threads decoding and encoding (0: all cores)");
}

std::string megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", double(bytes) / 1e6);
  return buf;
}

// Prints "packed D/N images, R img/s" every 1000 images or 2 seconds.
struct ProgressPrinter {
  int64_t last_done = 0;
  double last_seconds = 0;
  void operator()(const data::PackProgress& p) {
    if (p.done == p.total) return;  // the summary follows
    if (p.done - last_done < 1000 && p.seconds - last_seconds < 2.0) return;
    last_done = p.done;
    last_seconds = p.seconds;
    std::printf("packed %lld/%lld images, %.0f img/s\n", (long long)p.done, (long long)p.total,
                p.seconds > 0 ? double(p.done) / p.seconds : 0.0);
    std::fflush(stdout);
  }
};

void print_summary(const data::PackReport& r, const char* verb) {
  const double rate = r.seconds > 0 ? double(r.packed) / r.seconds : 0.0;
  std::printf("%s %lld images in %.2f s, %.0f img/s; skipped %zu\n", verb, (long long)r.packed, r.seconds, rate,
              r.skipped.size());
  std::printf("source %s -> packed %s (%.2fx) in %zu file%s\n", megabytes(r.source_bytes).c_str(),
              megabytes(r.output_bytes).c_str(), r.source_bytes ? double(r.output_bytes) / double(r.source_bytes) : 0.0,
              r.outputs.size(), r.outputs.size() == 1 ? "" : "s");
  for (const auto& o : r.outputs)
    std::printf("  %s: %lld records, %s%s\n", o.path.c_str(), (long long)o.records, megabytes(o.bytes).c_str(),
                o.records == 0 ? " (empty: too few images for this split/shard)" : "");
}

int run_verify(const std::vector<std::string>& files, int threads) {
  EMBER_CHECK(!files.empty(), "--verify needs at least one record file");
  int failed = 0;
  for (const auto& path : files) {
    const data::VerifyReport r = data::verify_record_file(path, threads);
    if (r.ok()) {
      const std::string labels = r.float_labels ? cat(r.label_width, " f32 label", r.label_width == 1 ? "" : "s")
                                                : cat(r.num_classes, " classes");
      std::printf("%s: OK, %lld records, %s, %s, all CRCs and images good (%.2f s, %.0f img/s)\n", path.c_str(),
                  (long long)r.records, labels.c_str(), megabytes(r.bytes).c_str(), r.seconds,
                  r.seconds > 0 ? double(r.records) / r.seconds : 0.0);
    } else {
      ++failed;
      if (r.bad > 0)
        std::printf("%s: FAILED, %lld of %lld records bad\n", path.c_str(), (long long)r.bad, (long long)r.records);
      else
        std::printf("%s: FAILED, unreadable\n", path.c_str());
      for (const auto& p : r.problems) std::printf("  %s\n", p.c_str());
      if (r.bad > int64_t(r.problems.size()))
        std::printf("  ... and %lld more\n", (long long)(r.bad - int64_t(r.problems.size())));
    }
  }
  if (failed > 0) std::printf("%d of %zu files failed verification\n", failed, files.size());
  return failed > 0 ? 1 : 0;
}

// Arguments: one or more X.rec, each with an optional X.idx (paired by
// name, in any position), then OUT.erec.
int run_from_mxnet(const std::vector<std::string>& args, int threads) {
  EMBER_CHECK(args.size() >= 2, "--from-mxnet takes X.rec [X.idx] [Y.rec [Y.idx] ...] OUT.erec, got ", args.size(),
              " argument", args.size() == 1 ? "" : "s");
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  const std::string out = args.back();
  EMBER_CHECK(ends_with(out, ".erec"), "--from-mxnet: the output '", out, "' should end in .erec");
  std::vector<data::MxnetSource> sources;
  std::vector<std::string> indexes;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (ends_with(args[i], ".idx"))
      indexes.push_back(args[i]);
    else
      sources.push_back({args[i], ""});
  }
  EMBER_CHECK(!sources.empty(), "--from-mxnet: no .rec file among the inputs (only .idx files)");
  const auto stem = [](const std::string& path) {
    const size_t dot = path.rfind('.'), slash = path.rfind('/');
    return dot == std::string::npos || (slash != std::string::npos && dot < slash) ? path : path.substr(0, dot);
  };
  for (const std::string& idx : indexes) {
    data::MxnetSource* match = nullptr;
    for (auto& s : sources)
      if (stem(s.rec) == stem(idx)) match = &s;
    EMBER_CHECK(match, "--from-mxnet: ", idx, " has no matching ", stem(idx), ".rec among the inputs");
    EMBER_CHECK(match->idx.empty(), "--from-mxnet: ", match->rec, " is given two index files (", match->idx, " and ",
                idx, ")");
    match->idx = idx;
  }
  data::MxnetConvertOptions o;
  o.threads = threads;
  ProgressPrinter printer;
  for (const auto& s : sources)
    std::printf("converting %s%s%s\n", s.rec.c_str(), s.idx.empty() ? " (file order)" : " in the order of ",
                s.idx.c_str());
  std::printf("-> %s, %d threads\n", out.c_str(), threads);
  const auto r = data::convert_mxnet(sources, out, o, std::ref(printer));
  if (r.unlisted > 0)
    std::printf("note: %lld records are not named by their .idx file and were not converted\n",
                (long long)r.unlisted);
  print_summary(r, "converted");
  return 0;
}

int run_pack(const Settings& s, const std::vector<std::string>& args, int threads) {
  EMBER_CHECK(args.size() == 2, "expected OUT_PREFIX SOURCE, got ", args.size(), " argument",
              args.size() == 1 ? "" : "s", " (see --help)");
  std::string prefix = args[0];
  const std::string source = args[1];
  if (prefix.size() > 5 && prefix.substr(prefix.size() - 5) == ".erec") prefix.resize(prefix.size() - 5);
  data::PackOptions o;
  o.resize = s.resize;
  o.quality = s.quality;
  o.pass_through = s.pass_through;
  if (s.encoding == "jpeg" || s.encoding == "jpg")
    o.encoding = data::PackEncoding::jpeg;
  else if (s.encoding == "png")
    o.encoding = data::PackEncoding::png;
  else if (s.encoding == "raw")
    o.encoding = data::PackEncoding::raw;
  else
    ember::fail(cat("--encoding '", s.encoding, "' is not jpeg, png or raw"));
  o.channels = s.channels;
  o.threads = threads;
  o.shuffle = s.shuffle;
  o.seed = uint64_t(s.seed);
  o.train_ratio = s.train_ratio;
  o.shards = s.shards;
  data::check_pack_options(o);

  std::error_code ec;
  const bool is_folder = std::filesystem::is_directory(source, ec);
  EMBER_CHECK(is_folder || std::filesystem::exists(source, ec), source, ": no such folder or list file");
  EMBER_CHECK(is_folder || s.root.empty() || std::filesystem::is_directory(s.root, ec), "--root ", s.root,
              ": not a folder");
  const data::SourceList list = is_folder ? data::list_image_folder(source) : data::read_list_file(source, s.root);
  std::printf("%s: %zu images%s; %s, %d threads%s\n", source.c_str(), list.items.size(),
              is_folder ? cat(" in ", list.class_names.size(), " classes").c_str() : "",
              o.pass_through ? "pass-through (original bytes)"
                             : cat("re-encode ", s.encoding,
                                   o.encoding == data::PackEncoding::jpeg ? cat(" q", o.quality) : std::string(),
                                   o.resize > 0 ? cat(", short side ", o.resize) : std::string(), ", ",
                                   o.channels == 0 ? std::string("channels as stored") : cat(o.channels, " channels"))
                                   .c_str(),
              threads, o.shuffle ? cat(", shuffled (seed ", o.seed, ")").c_str() : "");
  for (const std::string& line : data::skipped_files_lines(list, source)) std::printf("%s\n", line.c_str());
  ProgressPrinter printer;
  const data::PackReport r = data::pack(list.items, list.class_names, prefix, o, std::ref(printer));
  print_summary(r, "packed");
  return 0;
}

int run(int argc, char** argv) {
  // Take the mode switches and the positional arguments out; Flags gets the rest.
  enum class Mode { pack, verify, from_mxnet } mode = Mode::pack;
  std::vector<std::string> positional;
  std::vector<char*> flag_args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--verify" || a == "--from-mxnet") {
      const Mode m = a == "--verify" ? Mode::verify : Mode::from_mxnet;
      EMBER_CHECK(mode == Mode::pack || mode == m, "--verify and --from-mxnet cannot be combined");
      mode = m;
    } else if (a == "--help" || a == "-h") {
      flag_args.push_back(argv[i]);
    } else if (a.rfind("--", 0) == 0) {
      flag_args.push_back(argv[i]);
      if (a.find('=') == std::string::npos && i + 1 < argc) flag_args.push_back(argv[++i]);
    } else {
      positional.push_back(a);
    }
  }
  Settings s;
  apps::Flags flags("im2rec", kSummary);
  declare(flags, s);
  if (!flags.parse(int(flag_args.size()), flag_args.data())) return 0;
  EMBER_CHECK(s.num_thread >= 0, "--num-thread must be >= 0");
  const int threads = s.num_thread > 0 ? s.num_thread : int(std::max(1u, std::thread::hardware_concurrency()));
  switch (mode) {
    case Mode::verify:
      return run_verify(positional, threads);
    case Mode::from_mxnet:
      return run_from_mxnet(positional, threads);
    case Mode::pack:
      break;
  }
  return run_pack(s, positional, threads);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // ember::Error and anything the standard library throws
    std::fflush(stdout);
    std::fprintf(stderr, "im2rec: %s\n", e.what());
    return 1;
  }
}
