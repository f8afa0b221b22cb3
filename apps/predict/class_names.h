// apps/predict/class_names.h — the names of a classifier's classes, for
// build/predict: from a labels file (one name per line), or from the JSON
// array a checkpoint's metadata carries under "class_names".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::apps {

// A labels file: line i (0-based) is the name of class i. A '\r' before the
// newline is dropped (CRLF files), the last line needs no newline, blank
// lines inside the file are empty names (the line number is the class
// index), blank lines at the very end are ignored. Errors name the file:
// unreadable, or a count other than num_classes (both counts given).
std::vector<std::string> read_labels_file(const std::string& path, int64_t num_classes);

// The checkpoint metadata's "class_names": a JSON array of num_classes
// strings. Errors name `model_path` (not JSON, not an array of strings, a
// count other than num_classes).
std::vector<std::string> class_names_from_json(const std::string& text, const std::string& model_path,
                                               int64_t num_classes);

}  // namespace ember::apps
