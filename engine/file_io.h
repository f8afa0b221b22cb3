// engine/file_io.h — crash-safe file writing and bounds-checked file reading.
//
// write_file_atomic() is how every durable file of ember (checkpoints, record
// shards, ...) reaches the disk: the bytes go to `path.tmp.<pid>` in the same
// directory, the file is fsynced, renamed over `path`, and the directory is
// fsynced. A crash at any moment leaves either the old `path` or the complete
// new one, never a torn file. FileReader reads exact byte ranges and turns a
// short read into an error instead of trusting a length. Every failure is an
// ember::Error whose one-line message names the path and strerror(errno).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ember {

// Owns one POSIX file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();  // closes (ignoring errors) if open

 private:
  int fd_ = -1;
};

// Sequential writer handed to the fill callback of write_file_atomic.
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // Writes all n bytes (retrying partial writes and EINTR) or throws.
  void write(const void* data, size_t n);
  uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }  // the temporary file's path

 private:
  int fd_;
  std::string path_;
  uint64_t written_ = 0;
};

// Writes `path` atomically: fill() writes the whole content through the
// FileWriter. On any error (including an exception thrown by fill) the
// temporary file is removed, an existing `path` is left untouched, and the
// exception propagates (ember::Error for I/O failures).
void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill);
// Convenience: atomically writes a byte buffer.
void write_file_atomic(const std::string& path, const void* data, size_t n);

// The temporary name write_file_atomic uses for `path` in this process.
std::string atomic_temp_path(const std::string& path);

// Reads byte ranges of an existing file, checking every range against the size.
class FileReader {
 public:
  explicit FileReader(const std::string& path);  // throws if it cannot be opened
  uint64_t size() const { return size_; }          // size when opened
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at offset or throws (range past the size, short read).
  void read_at(uint64_t offset, void* dst, size_t n) const;

 private:
  UniqueFd fd_;
  std::string path_;
  uint64_t size_ = 0;
};

// The whole content of a file.
std::vector<uint8_t> read_file(const std::string& path);

}  // namespace ember
