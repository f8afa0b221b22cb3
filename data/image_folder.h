// data/image_folder.h — where im2rec's images come from, and a way to make
// such a folder: the sources of data/packer.h.
//
// A source is a list of image files with their labels:
//   - an image folder tree, ImageNet/torchvision ImageFolder style:
//     ROOT/<class>/**/<file>; label = the class folder's index among the
//     sorted class folder names;
//   - an MXNet .lst file: "index\tlabel[\tlabel...]\tpath" per line.
// export_image_folder() writes an in-memory ImageSet (Fashion-MNIST) as such
// a folder tree of PNG or JPEG files.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/image_set.h"

namespace ember::data {

// One image to pack.
struct SourceItem {
  uint64_t id = 0;            // the record id: position in the folder listing, or the .lst index column
  std::string path;           // file to read
  std::vector<float> labels;  // one class index, or the .lst label columns
};

struct SourceList {
  std::vector<SourceItem> items;
  std::vector<std::string> class_names;  // folder trees: label i is class_names[i]; empty for .lst files
  // Folder trees: the files left out, counted by lower-case extension ("" for
  // none) in the class folders, and the files directly in the root.
  std::map<std::string, int64_t> skipped_extensions;
  int64_t loose_files = 0;
};

// What list_image_folder left out, one line each: "skipped 4 files with other
// extensions (.heic: 3, .txt: 1)" (most common first), "ignored 2 files
// directly in ROOT (images go in class folders: ROOT/<class>/<image>)".
std::vector<std::string> skipped_files_lines(const SourceList& list, const std::string& root);

// File extensions im2rec takes from a folder tree (lower case, with the dot).
bool is_image_extension(const std::string& path);

// Lists ROOT/<class>/... : every sub-folder of root (not starting with '.')
// is a class, classes sorted by name (byte order); inside a class folder the
// image files (jpg jpeg png bmp gif tga ppm pgm, any case) are found
// recursively (following folder symlinks) and sorted by their path relative
// to the class folder. Files directly in root and other files are left out,
// and counted (skipped_extensions, loose_files).
// Ids are 0..n-1 in that order. A class folder without images keeps its
// label. Errors when root is missing or not a folder, has no class folders,
// or no images at all.
SourceList list_image_folder(const std::string& root);

// Reads an MXNet .lst file: per line "index \t label [\t label ...] \t path",
// fields separated by tabs; index a non-negative integer, labels numbers,
// path relative to `root` (the list's own folder when root is empty) unless
// absolute. Blank lines are skipped, a trailing '\r' is ignored. A bad line is
// an error naming "FILE:LINE". class_names stays empty.
SourceList read_list_file(const std::string& list_path, const std::string& root = "");

enum class ExportFormat { png, jpeg };

// Class folder name of a class name: '/' becomes '_' (Fashion-MNIST's
// "T-shirt/top" -> "T-shirt_top"). Errors for "", "." and "..".
std::string class_folder_name(const std::string& class_name);

struct ExportReport {
  int64_t files = 0;
  uint64_t bytes = 0;
};

// Writes image i of `set` (NCHW, 1 or 3 channels) to
// dir/<class_folder_name(class_names[label])>/<i as 5 digits>.png (or .jpg),
// creating the folders; quality 1..100 for JPEG. class_names must name every
// class of the set, distinctly after sanitising. Files are plain writes (not
// fsynced: an export is reproducible).
ExportReport export_image_folder(const ImageSet& set, const std::vector<std::string>& class_names,
                                 const std::string& dir, ExportFormat format, int quality = 95);

}  // namespace ember::data
