// apps/predict/class_names.cpp — class names from a labels file or checkpoint metadata.
#include "apps/predict/class_names.h"

#include "engine/error.h"
#include "engine/file_io.h"
#include "net/json.h"

namespace ember::apps {

std::vector<std::string> read_labels_file(const std::string& path, int64_t num_classes) {
  const std::vector<uint8_t> bytes = read_file(path);
  const std::string text(bytes.begin(), bytes.end());
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(std::move(line));
    begin = end + 1;
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  EMBER_CHECK(int64_t(names.size()) == num_classes, path, ": ", names.size(), " class names (one per line) for the model's ",
              num_classes, " classes");
  return names;
}

std::vector<std::string> class_names_from_json(const std::string& text, const std::string& model_path,
                                               int64_t num_classes) {
  json::Value v;
  try {
    v = json::parse(text);
  } catch (const Error& e) {
    fail(cat(model_path, ": metadata class_names is not JSON (", e.what(), ")"));
  }
  EMBER_CHECK(v.is_array(), model_path, ": metadata class_names is a JSON ", json::type_name(v.type()),
              ", not an array of strings");
  std::vector<std::string> names;
  for (const json::Value& n : v.as_array()) {
    EMBER_CHECK(n.is_string(), model_path, ": metadata class_names holds a ", json::type_name(n.type()),
                ", not only strings");
    names.push_back(n.as_string());
  }
  EMBER_CHECK(int64_t(names.size()) == num_classes, model_path, ": metadata class_names has ", names.size(),
              " names for the model's ", num_classes, " classes");
  return names;
}

}  // namespace ember::apps
