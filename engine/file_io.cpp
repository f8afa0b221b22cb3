// engine/file_io.cpp — atomic writes (temp file, fsync, rename, fsync dir) and
// exact-range reads with pread. See engine/file_io.h.
#include "engine/file_io.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

#include "engine/error.h"

namespace ember {

namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

// The directory holding `path`, for the fsync that makes a rename durable.
std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void FileWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(cat(path_, ": write failed after ", written_, " bytes: ", errno_text(errno)));
    }
    if (k == 0) fail(cat(path_, ": write made no progress after ", written_, " bytes"));
    p += k;
    n -= size_t(k);
    written_ += uint64_t(k);
  }
}

std::string atomic_temp_path(const std::string& path) { return cat(path, ".tmp.", ::getpid()); }

void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill) {
  EMBER_CHECK(!path.empty(), "write_file_atomic: empty path");
  const std::string tmp = atomic_temp_path(path);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!fd.valid()) fail(cat(path, ": cannot create temporary file ", tmp, ": ", errno_text(errno)));
  try {
    FileWriter writer(fd.get(), tmp);
    fill(writer);
    if (::fsync(fd.get()) != 0) fail(cat(path, ": fsync of ", tmp, " failed: ", errno_text(errno)));
    if (::close(fd.release()) != 0) fail(cat(path, ": close of ", tmp, " failed: ", errno_text(errno)));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail(cat(path, ": cannot rename ", tmp, " to it: ", errno_text(errno)));
  } catch (...) {
    fd.reset();
    ::unlink(tmp.c_str());
    throw;
  }
  // The new content is in place; make the rename itself durable.
  const std::string dir = directory_of(path);
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) fail(cat(path, ": cannot open directory ", dir, " to fsync it: ", errno_text(errno)));
  // EINVAL: the file system does not support fsync on directories.
  if (::fsync(dfd.get()) != 0 && errno != EINVAL)
    fail(cat(path, ": fsync of directory ", dir, " failed: ", errno_text(errno)));
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(data, n); });
}

FileReader::FileReader(const std::string& path) : path_(path) {
  fd_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_.valid()) fail(cat(path, ": cannot open: ", errno_text(errno)));
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) fail(cat(path, ": cannot stat: ", errno_text(errno)));
  if (S_ISDIR(st.st_mode)) fail(cat(path, ": is a directory, not a file"));
  if (!S_ISREG(st.st_mode)) fail(cat(path, ": not a regular file"));
  size_ = uint64_t(st.st_size);
}

void FileReader::read_at(uint64_t offset, void* dst, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    fail(cat(path_, ": read of ", n, " bytes at offset ", offset, " is past the end of the file (", size_,
             " bytes)"));
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t k = ::pread(fd_.get(), p, n, off_t(offset));
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(cat(path_, ": read failed at offset ", offset, ": ", errno_text(errno)));
    }
    if (k == 0) fail(cat(path_, ": unexpected end of file at offset ", offset, " (file shrank while reading?)"));
    p += k;
    n -= size_t(k);
    offset += uint64_t(k);
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  FileReader reader(path);
  EMBER_CHECK(reader.size() <= SIZE_MAX, path, ": file too large to read into memory");
  std::vector<uint8_t> bytes(size_t(reader.size()));
  reader.read_at(0, bytes.data(), bytes.size());
  return bytes;
}

}  // namespace ember
