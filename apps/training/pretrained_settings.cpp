// apps/training/pretrained_settings.cpp — taking a pretrained checkpoint's
// training settings into a fine-tuning run (apps/training/pretrained_settings.h).
#include "apps/training/pretrained_settings.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "engine/error.h"
#include "net/json.h"

namespace ember::apps {
namespace {

using Metadata = std::map<std::string, std::string>;

// A size the metadata records (0 when absent); malformed: an error naming the file.
int metadata_size(const Metadata& m, const char* key, const std::string& path) {
  const auto it = m.find(key);
  if (it == m.end()) return 0;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  EMBER_CHECK(!it->second.empty() && *end == '\0' && v > 0 && v <= 65536, path, ": metadata ", key,
              " is not a size: ", json::shown(it->second));
  return int(v);
}

// The number of per-channel values the metadata records (0 when absent).
size_t metadata_values(const Metadata& m, const char* key, const std::string& path) {
  const auto it = m.find(key);
  if (it == m.end()) return 0;
  try {
    return parse_number_list(it->second, key).size();
  } catch (const Error&) {
    fail(cat(path, ": metadata ", key, " ", json::shown(it->second), " is not a comma-separated list of numbers"));
  }
}

// What was taken, what the flags gave instead, and what did not apply.
struct Adoption {
  std::vector<std::string> taken, given, notes;
  std::vector<std::string> assumed;  // defaults chosen because the file records nothing
  void take(const std::string& what) { taken.push_back(what); }
};

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// --image-shape and --val-resize: the size the model was trained at (record data only).
void adopt_shape(TrainSettings& s, const Flags& flags, const Metadata& m, const std::string& path,
                 const net::InferredResNet& r, Adoption& a) {
  const int size = metadata_size(m, "image_size", path), resize = metadata_size(m, "val_resize", path);
  if (size == 0) {
    // A torchvision or timm export: the backbone learnt at ImageNet's 224
    // crop, which fine-tuning keeps (train_resnet's records-sized default
    // would shrink it to small photos' size).
    if (!s.data_train.empty() && !flags.was_set("image-shape")) {
      s.image_shape = cat(r.in_channels, ",224,224");
      a.assumed.push_back(cat("image shape ", s.image_shape, " (ImageNet's crop)"));
    }
    return;
  }
  const std::string shape = cat(r.in_channels, ",", size, ",", size);
  if (s.data_train.empty()) {
    if (shape != "1,28,28") a.notes.push_back(cat("image shape ", shape, " (Fashion-MNIST is 1,28,28)"));
  } else if (flags.was_set("image-shape")) {
    if (s.image_shape != shape) a.given.push_back(cat("--image-shape ", s.image_shape, " (trained at ", shape, ")"));
  } else {
    s.image_shape = shape;
    a.take(cat("image shape ", shape));
    if (resize > 0 && !flags.was_set("val-resize")) {
      s.val_resize = resize;
      a.take(cat("validation resize ", resize));
    }
  }
}

// --rgb-mean / --rgb-std: the normalisation the backbone learnt with.
void adopt_norm(TrainSettings& s, const Flags& flags, const Metadata& m, const std::string& path, Adoption& a) {
  // On record data adopt_shape has set the image shape (the checkpoint's, ImageNet's or the flag's).
  const int channels = s.data_train.empty() ? 1 : int(parse_image_shape(s.image_shape)[0]);
  const struct {
    const char *key, *flag, *name;
    std::string* value;
  } stats[] = {{"input_mean", "rgb-mean", "mean", &s.rgb_mean}, {"input_std", "rgb-std", "std", &s.rgb_std}};
  for (const auto& st : stats) {
    const size_t n = metadata_values(m, st.key, path);
    if (n == 0) continue;
    if (flags.was_set(st.flag)) {
      a.given.push_back(cat("--", st.flag, " ", *st.value));
    } else if (n != size_t(channels)) {
      a.notes.push_back(cat(st.name, " (", n, " values; the data has ", channels,
                            channels == 1 ? " channel)" : " channels)"));
    } else {
      *st.value = m.at(st.key);
      a.take(cat(st.name, " ", *st.value));
    }
  }
}

}  // namespace

std::string adopt_pretrained_settings(TrainSettings& s, const Flags& flags, const SafetensorsFile& file,
                                      const std::string& path, const net::InferredResNet& r) {
  EMBER_CHECK(s.num_layers == 0 || s.num_layers == r.num_layers, path, " holds a ResNet-", r.num_layers,
              ", not the --num-layers ", s.num_layers, " asked for");
  s.num_layers = r.num_layers;
  const Metadata& m = file.metadata;
  Adoption a;
  a.take(cat("resnet-", r.num_layers));
  adopt_shape(s, flags, m, path, r, a);
  adopt_norm(s, flags, m, path, a);
  if (m.count("pool")) {
    const std::string pool = net::head_pool_name(r.pool);
    if (!flags.was_set("pool")) {
      s.pool = pool;
      a.take(cat("pool ", pool));
    } else if (s.pool != pool) {
      a.given.push_back(cat("--pool ", s.pool, " (trained with ", pool, ")"));
    }
  }
  if (a.taken.size() == 1 && a.given.empty() && a.notes.empty())
    return cat("from checkpoint ", path, ": ", a.taken[0], " (its tensors); it records no training settings (a "
               "torchvision or timm export?): ",
               a.assumed.empty() ? "image shape, " : cat(joined(a.assumed), "; "),
               "normalisation and pooling keep the defaults");
  std::string line = cat("from checkpoint ", path, ": ", joined(a.taken));
  if (!a.assumed.empty()) line += cat("; none recorded, so ", joined(a.assumed));
  if (!a.given.empty()) line += cat("; from the flags instead: ", joined(a.given));
  if (!a.notes.empty()) line += cat("; not taken: ", joined(a.notes));
  return line;
}

}  // namespace ember::apps
