// data/image_folder.cpp — listing image folder trees and .lst files for the
// packer, and exporting an ImageSet as a folder tree of PNG/JPEG files.
#include "data/image_folder.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/image.h"
#include "engine/error.h"

namespace ember::data {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits on tabs, keeping empty fields.
std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return out;
}

// Writes bytes to path (plain write, no fsync); errors name the path.
void write_plain_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail(cat(path, ": cannot create (", std::strerror(errno), ")"));
  const size_t n = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;
  if (n != bytes.size() || !closed)
    fail(cat(path, ": write failed (", std::strerror(n != bytes.size() ? saved : errno), ")"));
}

}  // namespace

bool is_image_extension(const std::string& path) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tga", ".ppm", ".pgm"};
  const std::string ext = lower(fs::path(path).extension().string());
  for (const char* e : kExtensions)
    if (ext == e) return true;
  return false;
}

SourceList list_image_folder(const std::string& root) {
  std::error_code ec;
  EMBER_CHECK(fs::exists(root, ec), root, ": image folder not found");
  EMBER_CHECK(fs::is_directory(root, ec), root, ": not a folder (give a folder of class folders, or a .lst file)");
  SourceList out;
  std::vector<fs::path> class_dirs;
  fs::directory_iterator it(root, ec);
  EMBER_CHECK(!ec, root, ": cannot list (", ec.message(), ")");
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code e2;
    if (entry.is_directory(e2))
      class_dirs.push_back(entry.path());
    else if (entry.is_regular_file(e2))
      ++out.loose_files;
  }
  EMBER_CHECK(!class_dirs.empty(), root, ": no class folders (expected ROOT/<class>/<image files>)");
  std::sort(class_dirs.begin(), class_dirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });

  for (size_t label = 0; label < class_dirs.size(); ++label) {
    const fs::path& dir = class_dirs[label];
    out.class_names.push_back(dir.filename().string());
    std::vector<std::string> files;  // relative to dir
    fs::recursive_directory_iterator rit(dir, fs::directory_options::follow_directory_symlink, ec);
    EMBER_CHECK(!ec, dir.string(), ": cannot list (", ec.message(), ")");
    for (auto end = fs::recursive_directory_iterator(); rit != end; rit.increment(ec)) {
      EMBER_CHECK(!ec, dir.string(), ": cannot list (", ec.message(), ")");
      std::error_code e2;
      if (!rit->is_regular_file(e2)) continue;
      if (!is_image_extension(rit->path().string())) {
        ++out.skipped_extensions[lower(rit->path().extension().string())];
        continue;
      }
      files.push_back(rit->path().lexically_relative(dir).generic_string());
    }
    EMBER_CHECK(!ec, dir.string(), ": cannot list (", ec.message(), ")");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      SourceItem item;
      item.id = uint64_t(out.items.size());
      item.path = (dir / f).string();
      item.labels = {float(label)};
      out.items.push_back(std::move(item));
    }
  }
  EMBER_CHECK(!out.items.empty(), root, ": no image files (jpg jpeg png bmp gif tga ppm pgm) in its ",
              class_dirs.size(), " class folders");
  return out;
}

std::vector<std::string> skipped_files_lines(const SourceList& list, const std::string& root) {
  std::vector<std::string> lines;
  if (!list.skipped_extensions.empty()) {
    std::vector<std::pair<std::string, int64_t>> by_count(list.skipped_extensions.begin(), list.skipped_extensions.end());
    std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    int64_t total = 0;
    std::string counts;
    for (const auto& [ext, n] : by_count) {
      total += n;
      counts += cat(counts.empty() ? "" : ", ", ext.empty() ? std::string("no extension") : ext, ": ", n);
    }
    lines.push_back(cat("skipped ", total, total == 1 ? " file" : " files", " with other extensions (", counts, ")"));
  }
  if (list.loose_files > 0)
    lines.push_back(cat("ignored ", list.loose_files, list.loose_files == 1 ? " file" : " files", " directly in ", root,
                        " (images go in class folders: ", root, "/<class>/<image>)"));
  return lines;
}

SourceList read_list_file(const std::string& list_path, const std::string& root_arg) {
  std::ifstream in(list_path, std::ios::binary);
  EMBER_CHECK(in.is_open(), list_path, ": cannot open list file (", std::strerror(errno), ")");
  const fs::path root = root_arg.empty() ? fs::path(list_path).parent_path() : fs::path(root_arg);
  SourceList out;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = cat(list_path, ":", line_no, ": ");
    const auto fields = split_tabs(line);
    EMBER_CHECK(fields.size() >= 3, where, "expected 'index<TAB>label[<TAB>label...]<TAB>path', got ", fields.size(),
                " tab-separated field", fields.size() == 1 ? "" : "s");
    SourceItem item;
    {
      const std::string& f = fields[0];
      errno = 0;
      char* end = nullptr;
      const unsigned long long v = std::strtoull(f.c_str(), &end, 10);
      // A digit first: strtoull would skip spaces and take a sign (wrapping " -1" to 2^64 - 1).
      EMBER_CHECK(!f.empty() && f[0] >= '0' && f[0] <= '9' && *end == '\0' && errno == 0, where, "index '", f,
                  "' is not a non-negative integer");
      item.id = uint64_t(v);
    }
    for (size_t k = 1; k + 1 < fields.size(); ++k) {
      const std::string& f = fields[k];
      errno = 0;
      char* end = nullptr;
      const float v = std::strtof(f.c_str(), &end);
      EMBER_CHECK(!f.empty() && *end == '\0' && errno == 0 && std::isfinite(v), where, "label ", k, " '", f,
                  "' is not a number");
      item.labels.push_back(v);
    }
    const std::string& p = fields.back();
    EMBER_CHECK(!p.empty(), where, "empty image path");
    item.path = fs::path(p).is_absolute() ? p : (root / p).string();
    out.items.push_back(std::move(item));
  }
  EMBER_CHECK(!in.bad(), list_path, ": read error");
  EMBER_CHECK(!out.items.empty(), list_path, ": list file has no entries");
  return out;
}

std::string class_folder_name(const std::string& class_name) {
  std::string s = class_name;
  std::replace(s.begin(), s.end(), '/', '_');
  EMBER_CHECK(!s.empty() && s != "." && s != "..", "class name '", class_name, "' cannot be a folder name");
  return s;
}

ExportReport export_image_folder(const ImageSet& set, const std::vector<std::string>& class_names,
                                 const std::string& dir, ExportFormat format, int quality) {
  check_image_set(set);
  EMBER_CHECK(set.channels == 1 || set.channels == 3, set.name, ": cannot export ", set.channels,
              "-channel images (1 or 3)");
  EMBER_CHECK(int64_t(class_names.size()) >= set.num_classes, set.name, ": ", set.num_classes, " classes but ",
              class_names.size(), " class names");
  EMBER_CHECK(format == ExportFormat::png || (quality >= 1 && quality <= 100), "JPEG quality ", quality,
              " is not in 1..100");
  std::vector<std::string> folders;
  std::set<std::string> seen;
  for (const auto& name : class_names) {
    folders.push_back(class_folder_name(name));
    EMBER_CHECK(seen.insert(folders.back()).second, "class names give the folder '", folders.back(), "' twice");
  }
  std::error_code ec;
  for (int c = 0; c < set.num_classes; ++c) {
    const fs::path d = fs::path(dir) / folders[size_t(c)];
    fs::create_directories(d, ec);
    EMBER_CHECK(!ec, d.string(), ": cannot create folder (", ec.message(), ")");
  }
  const char* ext = format == ExportFormat::png ? ".png" : ".jpg";
  const int64_t H = set.height, W = set.width, C = set.channels, plane = H * W;
  ExportReport report;
  Image img;
  img.height = int(H), img.width = int(W), img.channels = int(C);
  img.pixels.resize(size_t(plane * C));
  std::vector<uint8_t> encoded;
  for (int64_t i = 0; i < set.count; ++i) {
    const uint8_t* src = set.pixels.data() + i * plane * C;
    for (int64_t p = 0; p < plane; ++p)  // CHW -> HWC
      for (int64_t c = 0; c < C; ++c) img.pixels[size_t(p * C + c)] = src[c * plane + p];
    if (format == ExportFormat::png)
      encode_png(img, encoded);
    else
      encode_jpeg(img, quality, encoded);
    char name[32];
    std::snprintf(name, sizeof(name), "%05lld%s", (long long)i, ext);
    const fs::path path = fs::path(dir) / folders[size_t(set.labels[size_t(i)])] / name;
    write_plain_file(path.string(), encoded);
    ++report.files;
    report.bytes += encoded.size();
  }
  return report;
}

}  // namespace ember::data
