// tests/apps/test_train_settings.cpp — what the training programs decide from
// their flags before they train, without running them: flags the chosen data
// does not use, the first line's account of the data, --classes and
// --num-examples on record files, the settings finetune_resnet takes from a
// pretrained checkpoint, the threads of ranks that share a host, the
// --keep-checkpoints default, and the likely cause of a checkpoint that does
// not fit at --resume.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "apps/training/checkpoint_mismatch.h"
#include "apps/training/distributed.h"
#include "apps/training/flags.h"
#include "apps/training/pretrained_settings.h"
#include "apps/training/train_data.h"
#include "apps/training/train_settings.h"
#include "apps/training/training_checkpoint.h"
#include "data/image.h"
#include "data/record_file.h"
#include "engine/error.h"
#include "net/checkpoint.h"
#include "net/dist/launch_env.h"
#include "net/pretrained.h"
#include "net/resnet.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using namespace ember::apps;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::TempDir;
using Strings = std::vector<std::string>;

// The training programs' flags parsed from `args` (finetune: finetune_resnet's
// --num-layers 0, the pretrained file's depth).
struct Parsed {
  TrainSettings s;
  Flags flags{"train_resnet", "test"};
  explicit Parsed(Strings args, bool finetune = false) {
    if (finetune) s.num_layers = 0;
    declare_train_flags(flags, s);
    args.insert(args.begin(), "train_resnet");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    REQUIRE(flags.parse(int(argv.size()), argv.data()));
    validate_train_settings(s);
  }
  Parsed(const Parsed&) = delete;  // flags points into s
  Parsed& operator=(const Parsed&) = delete;
};

// A record file of `per_class` uniform RGB PNGs (size x size) of each of
// four classes "a".."d"; class k's pixels are 20 + 50 k, so a loaded image
// tells its original class.
std::string write_records(const TempDir& dir, const std::string& name, int per_class, int size, int channels = 3) {
  data::RecordFileSettings settings;
  settings.class_names = {"a", "b", "c", "d"};
  settings.num_classes = 4;
  settings.channels = uint32_t(channels);
  const std::string path = dir.file(name);
  data::RecordWriter w(path, settings);
  for (int i = 0; i < 4 * per_class; ++i) {
    const int label = i % 4;
    data::Image img;
    img.height = size, img.width = size, img.channels = channels;
    img.pixels.assign(size_t(size * size * channels), uint8_t(20 + 50 * label));
    std::vector<uint8_t> png;
    data::encode_png(img, png);
    data::RecordInput in;
    in.id = uint64_t(i), in.label = label;
    in.height = uint32_t(size), in.width = uint32_t(size), in.channels = uint32_t(channels);
    in.encoding = data::Encoding::png;
    in.payload = png.data(), in.payload_length = png.size();
    w.add(in);
  }
  w.finish();
  return path;
}

// A small ResNet's state as a pretrained file holding `metadata`.
SafetensorsFile pretrained_file(const net::ResNetConfig& cfg, const std::map<std::string, std::string>& metadata) {
  Generator gen(3);
  net::ResNet model(cfg, gen);
  SafetensorsFile f;
  for (auto& [name, t] : model.state()) f.tensors.emplace_back(name, *t);
  f.metadata = metadata;
  return f;
}

net::dist::LaunchEnv env_of(const std::map<std::string, std::string>& vars, const std::string& master_flag = "") {
  return net::dist::detect_launch_env({master_flag, 0, ""}, [&](const char* n) -> const char* {
    const auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("settings: --image-shape on Fashion-MNIST is an error naming it; flags the data does not use are warnings") {
  Parsed fm64({"--image-shape", "3,64,64"});
  CHECK_THROWS_WITH_AS(check_data_flags(fm64.s, fm64.flags),
                       "--image-shape 3,64,64: this run trains on Fashion-MNIST (no --data-train), whose images are "
                       "1x28x28; --image-shape sizes record data (--data-train) and --benchmark 1",
                       Error);
  {
    Parsed fm28({"--image-shape", "1,28,28"});
    CHECK(check_data_flags(fm28.s, fm28.flags).empty());
    Parsed bench({"--image-shape", "3,64,64", "--benchmark", "1", "--val-resize", "80"});
    CHECK(check_data_flags(bench.s, bench.flags).empty());
    Parsed plain({});
    CHECK(check_data_flags(plain.s, plain.flags).empty());
  }
  Parsed fm({"--val-resize", "73", "--skip-bad", "1"});
  CHECK(check_data_flags(fm.s, fm.flags) ==
        Strings{"--val-resize, --skip-bad apply to record data (--data-train) only, and this run trains on "
                "Fashion-MNIST: ignored"});
  Parsed rec({"--data-train", "x.erec", "--dataset", "fashion-mnist", "--pad-size", "4", "--classes", "1,0"});
  CHECK(check_data_flags(rec.s, rec.flags) ==
        Strings{"--dataset applies to Fashion-MNIST only, and this run trains on records x.erec: ignored",
                "--pad-size applies to --random-resized-crop 0 only, and this run takes random-resized crops: ignored"});
  Parsed no_rrc({"--data-train", "x.erec", "--random-resized-crop", "0", "--min-random-area", "0.3", "--pad-size", "4",
                 "--image-shape", "3,64,64"});
  CHECK(check_data_flags(no_rrc.s, no_rrc.flags) ==
        Strings{"--min-random-area applies to random-resized crops only, and --random-resized-crop 0 turns them off: "
                "ignored"});
}

TEST_CASE("settings: the first line's account of the data; --classes and --num-examples select records, grey warns") {
  SUBCASE("Fashion-MNIST") {
    const Parsed all({}), some({"--classes", "5,6", "--num-examples", "100"});
    CHECK(make_training_data(all.s, 0, 1)->summary ==
          "Fashion-MNIST (60000 train / 10000 validation images, 1x28x28, 10 classes)");
    CHECK(make_training_data(some.s, 0, 1)->summary ==
          "Fashion-MNIST classes 5,6 (100 train / 2000 validation images, 1x28x28, 2 classes)");
  }
  SUBCASE("records") {
    TempDir dir;
    const std::string train = write_records(dir, "train.erec", 3, 16), val = write_records(dir, "val.erec", 3, 16);
    Parsed p({"--data-train", train, "--data-val", val, "--classes", "2,0", "--num-examples", "5", "--image-shape",
              "1,16,16", "--data-nthreads", "1", "--batch-size", "8", "--random-resized-crop", "0", "--random-mirror",
              "0", "--pad-size", "0"});
    const auto d = make_training_data(p.s, 0, 1);
    CHECK(d->summary == "records " + train + " classes 2,0 (5 train / 6 validation images, 1x16x16, 2 classes)");
    CHECK(d->num_classes == 2);
    CHECK(d->class_names == Strings{"c", "a"});
    CHECK(d->warnings == Strings{"the image shape 1,16,16 has 1 channel and " + train +
                                 " holds RGB images: they are converted to grey as they load (--image-shape 3,16,16 "
                                 "keeps the colour)"});
    CHECK(contains(d->description, "taking classes 2,0, the first 5: 5 records"));
    // Every image's pixels tell its original class: 2 is now 0, 0 is now 1.
    data::Batch b;
    d->train_loader->start_epoch(0);
    int64_t seen = 0;
    while (d->train_loader->next(b)) {
      REQUIRE(b.images.shape() == Shape{b.size, 1, 16, 16});
      for (int64_t j = 0; j < b.size; ++j, ++seen) {
        const int original = (int(b.images.data<uint8_t>()[j * 256]) - 20 + 25) / 50;
        CHECK(b.labels.data<int64_t>()[j] == (original == 2 ? 0 : 1));
        CHECK((original == 2 || original == 0));
      }
    }
    CHECK(seen == 5);
    // Colour kept: no warning.
    Parsed rgb({"--data-train", train, "--image-shape", "3,16,16"});
    const auto c = make_training_data(rgb.s, 0, 1);
    CHECK(c->warnings.empty());
    CHECK(c->summary == "records " + train + " (12 images, no validation, 3x16x16, 4 classes)");
  }
}

TEST_CASE("settings: without --image-shape, records train at their median short side (at most 224) and channels") {
  TempDir dir;
  const std::string small = write_records(dir, "small.erec", 3, 16), mid = write_records(dir, "mid.erec", 3, 40),
                    big = write_records(dir, "big.erec", 1, 300), grey = write_records(dir, "grey.erec", 2, 24, 1);
  const auto shape_of = [](const std::string& spec) { return default_record_shape(data::RecordDataset(spec)); };
  // 12 images of 16 px, 12 of 40, 4 of 300: the median, not the mean (~80) or the largest.
  const RecordShape mixed = shape_of(small + "," + mid + "," + big);
  CHECK(mixed.median_short_side == 40);
  CHECK(mixed.side == 40);
  CHECK(mixed.channels == 3);
  const RecordShape large = shape_of(big);
  CHECK(large.median_short_side == 300);
  CHECK(large.side == 224);  // ImageNet's crop at most
  CHECK(shape_of(grey).channels == 1);
  CHECK(shape_of(grey).side == 24);

  Parsed p({"--data-train", mid, "--data-nthreads", "1", "--batch-size", "4"});
  const auto d = make_training_data(p.s, 0, 1);
  CHECK(d->image_size == 40);
  CHECK(d->channels == 3);
  CHECK(d->summary == "records " + mid + " (12 images, no validation, 3x40x40, 4 classes)");
  CHECK(d->notes == Strings{"input 3x40x40, the records' median short side (--image-shape C,H,W sets another)"});
  data::Batch b;
  d->train_loader->start_epoch(0);
  REQUIRE(d->train_loader->next(b));
  CHECK(b.images.shape() == Shape{4, 3, 40, 40});
  Parsed q({"--data-train", big, "--data-nthreads", "1", "--batch-size", "4"});
  CHECK(make_training_data(q.s, 0, 1)->notes ==
        Strings{"input 3x224x224, ImageNet's crop (the records' median short side is 300 px; --image-shape C,H,W sets "
                "another)"});
  Parsed given({"--data-train", mid, "--image-shape", "3,32,32"});  // the flag wins, without a note
  const auto g = make_training_data(given.s, 0, 1);
  CHECK(g->image_size == 32);
  CHECK(g->notes.empty());
}

TEST_CASE("finetune settings: the checkpoint's image shape, normalisation, pooling and depth are taken unless flags give them") {
  net::ResNetConfig cfg;
  cfg.num_layers = 8;
  cfg.in_channels = 3;
  cfg.image_size = 32;
  cfg.pool = net::HeadPool::concat;
  const SafetensorsFile file = pretrained_file(
      cfg, {{"in_channels", "3"}, {"image_size", "32"}, {"val_resize", "36"}, {"input_mean", "120,115,100"},
            {"input_std", "60,61,62"}, {"pool", "concat"}, {"num_layers", "8"}});
  const std::string path = "r8-0004.safetensors";
  const net::InferredResNet r = net::infer_resnet_config(file, path);

  Parsed taken({"--data-train", "photos.erec"}, true);
  CHECK(adopt_pretrained_settings(taken.s, taken.flags, file, path, r) ==
        "from checkpoint r8-0004.safetensors: resnet-8, image shape 3,32,32, validation resize 36, mean 120,115,100, "
        "std 60,61,62, pool concat");
  CHECK(taken.s.num_layers == 8);
  CHECK(taken.s.image_shape == "3,32,32");
  CHECK(taken.s.val_resize == 36);
  CHECK(taken.s.rgb_mean == "120,115,100");
  CHECK(taken.s.rgb_std == "60,61,62");
  CHECK(taken.s.pool == "concat");

  Parsed given({"--data-train", "photos.erec", "--image-shape", "3,64,64", "--rgb-mean", "1,2,3", "--pool", "avg"}, true);
  CHECK(adopt_pretrained_settings(given.s, given.flags, file, path, r) ==
        "from checkpoint r8-0004.safetensors: resnet-8, std 60,61,62; from the flags instead: --image-shape 3,64,64 "
        "(trained at 3,32,32), --rgb-mean 1,2,3, --pool avg (trained with concat)");
  CHECK(given.s.image_shape == "3,64,64");
  CHECK(given.s.val_resize == 0);
  CHECK(given.s.rgb_mean == "1,2,3");
  CHECK(given.s.pool == "avg");

  Parsed fashion({}, true);  // Fashion-MNIST is 1x28x28, one channel
  CHECK(adopt_pretrained_settings(fashion.s, fashion.flags, file, path, r) ==
        "from checkpoint r8-0004.safetensors: resnet-8, pool concat; not taken: image shape 3,32,32 (Fashion-MNIST is "
        "1,28,28), mean (3 values; the data has 1 channel), std (3 values; the data has 1 channel)");
  CHECK(fashion.s.image_shape.empty());
  CHECK(fashion.s.rgb_mean.empty());

  Parsed deeper({"--num-layers", "18"});
  CHECK_THROWS_WITH_AS(adopt_pretrained_settings(deeper.s, deeper.flags, file, path, r),
                       "r8-0004.safetensors holds a ResNet-8, not the --num-layers 18 asked for", Error);
  SafetensorsFile bad = file;
  bad.metadata["image_size"] = "big";
  Parsed any({"--data-train", "photos.erec"}, true);
  CHECK_THROWS_WITH_AS(adopt_pretrained_settings(any.s, any.flags, bad, path, r),
                       "r8-0004.safetensors: metadata image_size is not a size: \"big\"", Error);
}

TEST_CASE("finetune settings: a file without training metadata (a torchvision export) keeps ImageNet's 224 and says so") {
  net::ResNetConfig cfg;
  cfg.num_layers = 8;
  cfg.in_channels = 3;
  const SafetensorsFile file = pretrained_file(cfg, {{"format", "pt"}});
  const net::InferredResNet r = net::infer_resnet_config(file, "tv.safetensors");
  // On records the backbone's 224 crop is kept, not train_resnet's records-sized default.
  Parsed p({"--data-train", "photos.erec"}, true);
  CHECK(adopt_pretrained_settings(p.s, p.flags, file, "tv.safetensors", r) ==
        "from checkpoint tv.safetensors: resnet-8 (its tensors); it records no training settings (a torchvision or "
        "timm export?): image shape 3,224,224 (ImageNet's crop); normalisation and pooling keep the defaults");
  CHECK(p.s.num_layers == 8);
  CHECK(p.s.image_shape == "3,224,224");
  CHECK(p.s.rgb_mean.empty());
  CHECK(p.s.pool == "avg");
  Parsed sized({"--data-train", "photos.erec", "--image-shape", "3,96,96"}, true);
  adopt_pretrained_settings(sized.s, sized.flags, file, "tv.safetensors", r);
  CHECK(sized.s.image_shape == "3,96,96");
  Parsed fashion({}, true);  // Fashion-MNIST keeps its own 1x28x28
  CHECK(adopt_pretrained_settings(fashion.s, fashion.flags, file, "tv.safetensors", r) ==
        "from checkpoint tv.safetensors: resnet-8 (its tensors); it records no training settings (a torchvision or "
        "timm export?): image shape, normalisation and pooling keep the defaults");
  CHECK(fashion.s.image_shape.empty());
}

TEST_CASE("dist settings: ranks on one host share its cores; --threads and OMP_NUM_THREADS come first") {
  // Started by hand on one host: the rendezvous on the loopback address says every rank is here.
  const auto by_hand = env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}});
  CHECK(by_hand.local_world == 2);
  CHECK(by_hand.local_world_from == "MASTER_ADDR 127.0.0.1");
  ThreadShare t = rank_threads(0, by_hand, 8, nullptr);
  CHECK(t.threads == 4);
  CHECK(t.why == "8 cores / 2 ranks on this host, MASTER_ADDR 127.0.0.1");
  CHECK(env_of({{"RANK", "0"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "localhost"}}).local_world == 3);

  const auto torchrun = env_of({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "host0"}});
  t = rank_threads(0, torchrun, 8, nullptr);
  CHECK(t.threads == 2);
  CHECK(t.why == "8 cores / 4 ranks on this host, LOCAL_WORLD_SIZE");
  const auto mpi = env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
                          "10.0.0.1");
  t = rank_threads(0, mpi, 2, nullptr);
  CHECK(t.threads == 1);  // at least one
  CHECK(t.why == "2 cores / 3 ranks on this host, OMPI_COMM_WORLD_LOCAL_SIZE");
  const auto slurm = env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "2(x2)"},
                             {"SLURM_JOB_NODELIST", "n[1-2]"}});
  CHECK(rank_threads(0, slurm, 16, nullptr).threads == 8);

  // Several hosts, none of them saying how many ranks share it: all cores, and a hint.
  const auto unknown = env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "host0"}});
  CHECK(unknown.local_world == 1);
  CHECK(unknown.local_world_from.empty());
  t = rank_threads(0, unknown, 8, nullptr);
  CHECK(t.threads == 8);
  CHECK(contains(t.why, "LOCAL_WORLD_SIZE is not set"));
  t = rank_threads(0, env_of({}), 8, nullptr);
  CHECK(t.threads == 8);
  CHECK(t.why == "8 cores");

  CHECK(rank_threads(3, by_hand, 8, "6").threads == 3);
  CHECK(rank_threads(3, by_hand, 8, "6").why == "--threads");
  CHECK(rank_threads(0, by_hand, 8, "6").threads == 6);
  CHECK(rank_threads(0, by_hand, 8, "6").why == "OMP_NUM_THREADS");
  CHECK(rank_threads(0, by_hand, 8, "5,2").threads == 5);  // nested levels: the first
  CHECK(rank_threads(0, by_hand, 8, "many").threads == 4);  // not a number: as if unset
  CHECK(rank_threads(0, by_hand, 8, "").threads == 4);
  CHECK(available_cores() >= 1);
}

TEST_CASE("long runs: --keep-checkpoints keeps the newest 3 by default (0: all); a checkpoint's size") {
  Parsed defaults({});
  CHECK(defaults.s.keep_checkpoints == 3);
  CHECK(contains(defaults.flags.help(), "--keep-checkpoints 3"));
  CHECK(Parsed({"--keep-checkpoints", "0"}).s.keep_checkpoints == 0);
  TempDir dir;
  const std::string model = dir.file("m-0001.safetensors");
  testing::write_bytes(model, std::vector<uint8_t>(1'500'000, 1));
  CHECK(checkpoint_size_text(model) == "1.5 MB");
  testing::write_bytes(states_path_of(model), std::vector<uint8_t>(340'000, 2));
  CHECK(checkpoint_size_text(model) == "1.8 MB");
}

TEST_CASE("settings: a checkpoint that does not fit at --resume says the likely cause (depth, classes, stem)") {
  TempDir dir;
  auto model_of = [](int layers, int64_t classes, int64_t channels, int64_t size, int64_t width) {
    net::ResNetConfig cfg;
    cfg.num_layers = layers, cfg.num_classes = classes, cfg.in_channels = channels, cfg.image_size = size;
    cfg.width = width;
    Generator gen(1);
    return net::ResNet(cfg, gen);
  };
  const std::map<std::string, std::string> r8_meta = {{"num_layers", "8"}, {"num_classes", "10"}, {"in_channels", "1"},
                                                      {"width", "16"}, {"stem_kernel", "3"}, {"image_size", "28"}};
  net::ResNet r8 = model_of(8, 10, 1, 28, 0);
  const std::string with_meta = dir.file("meta-0002.safetensors"), bare = dir.file("bare-0002.safetensors");
  net::save_model(with_meta, r8, r8_meta);
  net::save_model(bare, r8);

  net::ResNet r14 = model_of(14, 10, 1, 28, 0);
  std::string msg = error_of([&] { load_resume_checkpoint(with_meta, r14); });
  CHECK(msg.rfind(with_meta + ": ", 0) == 0);  // load_model's tensor first
  CHECK(contains(msg, ": the checkpoint was written by resnet-8 (its metadata) and this run builds resnet-14: pass "
                      "--num-layers 8"));
  CHECK(contains(error_of([&] { load_resume_checkpoint(bare, r14); }),
                 "the checkpoint was written by resnet-8 (its tensors) and this run builds resnet-14: pass --num-layers 8"));
  net::ResNet four = model_of(8, 4, 1, 28, 0);
  CHECK(contains(error_of([&] { load_resume_checkpoint(with_meta, four); }),
                 "the checkpoint has a 10-class head (its metadata) and this run's data has 4 classes"));
  net::ResNet rgb = model_of(8, 10, 3, 28, 0);
  CHECK(contains(error_of([&] { load_resume_checkpoint(bare, rgb); }),
                 "the checkpoint takes 1-channel input (its tensors) and this run's data has 3 channels: pass "
                 "--image-shape 1,H,W"));
  // An ImageNet-style model trained at 64x64 (7x7 stem) resumed at 32x32 (3x3 stem).
  net::ResNet at64 = model_of(18, 10, 3, 64, 8);
  const std::string r18 = dir.file("r18-0001.safetensors");
  net::save_model(r18, at64, {{"num_layers", "18"}, {"stem_kernel", "7"}, {"image_size", "64"}, {"width", "8"}});
  net::ResNet at32 = model_of(18, 10, 3, 32, 8);
  CHECK(contains(error_of([&] { load_resume_checkpoint(r18, at32); }),
                 "the checkpoint has a 7x7 stem (its metadata; it was trained at 64x64) and this run builds a 3x3 stem "
                 "for 32x32 input: pass --image-shape 3,64,64"));
  // A checkpoint that fits loads.
  net::ResNet same = model_of(8, 10, 1, 28, 0);
  CHECK_NOTHROW(load_resume_checkpoint(with_meta, same));
  CHECK(checkpoint_mismatch_cause(load_safetensors(with_meta), same).empty());
}

TEST_CASE("settings: --cuda-graph 1 asks for one GPU and refuses what it cannot capture; --layout nhwc for GPUs") {
  CHECK(Parsed({"--gpus", "0", "--cuda-graph", "1"}).s.cuda_graph);
  CHECK(contains(error_of([] { Parsed p({"--cuda-graph", "1"}); }),
                 "--cuda-graph 1 replays a step on one GPU in one process: give one --gpus, got 0"));
  CHECK(contains(error_of([] { Parsed p({"--gpus", "0,1", "--cuda-graph", "1"}); }), "give one --gpus, got 2"));
  CHECK(contains(error_of([] { Parsed p({"--gpus", "0", "--cuda-graph", "1", "--mixup-alpha", "0.2"}); }),
                 "--cuda-graph 1 does not capture --mixup-alpha/--cutmix-alpha"));
  CHECK(contains(error_of([] { Parsed p({"--gpus", "0", "--cuda-graph", "1", "--dropout", "0.5"}); }),
                 "--cuda-graph 1 does not capture --dropout"));
  CHECK(Parsed({"--gpus", "0", "--layout", "nhwc"}).s.gpu.layout == "nhwc");
  CHECK(contains(error_of([] { Parsed p({"--layout", "nhwc"}); }), "--layout nhwc is for GPUs (add --gpus)"));
}
