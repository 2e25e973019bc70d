#include "weights/record_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::io {
namespace {

constexpr size_t kFlushBytes = 1 << 20;

}  // namespace

uint64_t fnv64_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "checkpoint file ", path, " cannot be opened: ", std::strerror(errno));
  uint64_t h = 1469598103934665603ULL;
  std::vector<unsigned char> buf(kFlushBytes);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      ::close(fd);
      ZT_THROW("checkpoint file ", path, " cannot be read: ", std::strerror(errno));
    }
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) h = (h ^ buf[i]) * 1099511628211ULL;
  }
  ::close(fd);
  return h;
}

// ---- RecordWriter ----

RecordWriter::RecordWriter(std::string final_path)
    : path_(std::move(final_path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ZT_CHECK(fd_ >= 0, "checkpoint file ", tmp_, " cannot be created: ", std::strerror(errno));
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) {  // not committed: an exception unwound the save; leave no temp file behind
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void RecordWriter::write_all(const char* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = ::write(fd_, p + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    // A full device: the one line names the file and the bytes it needed (the temporary file
    // is removed as the error unwinds, so the previous checkpoint stays the latest).
    ZT_CHECK(!(k < 0 && (errno == ENOSPC || errno == EDQUOT)), "checkpoint file ", tmp_,
             " cannot be written: ", std::strerror(errno), ": the file needs ",
             std::max(expected_, written_ + n - done), " bytes, ", written_, " fit");
    ZT_CHECK(k >= 0, "checkpoint file ", tmp_, " cannot be written: ", std::strerror(errno));
    done += static_cast<size_t>(k);
    written_ += static_cast<uint64_t>(k);
  }
}

void RecordWriter::flush() {
  write_all(buf_.data(), buf_.size());
  buf_.clear();
}

void RecordWriter::bytes(const void* p, size_t n) {
  if (n >= kFlushBytes) {  // large tensors go straight to the file: no second copy in memory
    flush();
    write_all(static_cast<const char*>(p), n);
    return;
  }
  buf_.append(static_cast<const char*>(p), n);
  if (buf_.size() >= kFlushBytes) flush();
}
void RecordWriter::u8(uint8_t v) {
  bytes(&v, 1);
}
void RecordWriter::u32(uint32_t v) {
  bytes(&v, 4);
}  // the targets are little-endian
void RecordWriter::i64(int64_t v) {
  bytes(&v, 8);
}
void RecordWriter::u64(uint64_t v) {
  bytes(&v, 8);
}
void RecordWriter::f64(double v) {
  bytes(&v, 8);
}
void RecordWriter::str(const std::string& s) {
  u64(s.size());
  bytes(s.data(), s.size());
}

void RecordWriter::tensor(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU).contiguous();
  u8(static_cast<uint8_t>(c.scalar_type()));
  u32(static_cast<uint32_t>(c.dim()));
  for (int64_t d : c.sizes()) i64(d);
  const uint64_t nbytes = c.numel() * c.element_size();
  u64(nbytes);
  bytes(c.data_ptr(), nbytes);
}

void RecordWriter::tensor_header(at::ScalarType dtype, const std::vector<int64_t>& shape) {
  u8(static_cast<uint8_t>(dtype));
  u32(static_cast<uint32_t>(shape.size()));
  int64_t numel = 1;
  for (int64_t d : shape) {
    i64(d);
    numel *= d;
  }
  u64(static_cast<uint64_t>(numel) * c10::elementSize(dtype));
}

void RecordWriter::commit() {
  flush();
  ZT_CHECK(::fsync(fd_) == 0, "checkpoint file ", tmp_, " cannot be synced: ", std::strerror(errno),
           errno == ENOSPC ? ": it needs " + std::to_string(written_) + " bytes" : std::string());
  ::close(fd_);
  fd_ = -1;
  ZT_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "checkpoint file ", tmp_,
           " cannot be renamed to ", path_, ": ", std::strerror(errno));
}

// ---- RecordReader ----

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

RecordReader::RecordReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY);
  ZT_CHECK(fd_ >= 0, "checkpoint file ", path_, " cannot be opened: ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd_, &st);
  size_ = static_cast<uint64_t>(st.st_size);
}

RecordReader::~RecordReader() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordReader::read_at(uint64_t offset, void* dst, uint64_t n) const {
  ZT_CHECK(offset + n <= size_, "checkpoint file ", path_, " is truncated (needs ", offset + n,
           " bytes, has ", size_, ")");
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, static_cast<char*>(dst) + done, n - done, offset + done);
    ZT_CHECK(r > 0 || (r < 0 && errno == EINTR), "checkpoint file ", path_,
             " cannot be read: ", r == 0 ? "unexpected end" : std::strerror(errno));
    if (r > 0) done += static_cast<uint64_t>(r);
  }
}

void RecordReader::read(void* dst, uint64_t n) {
  read_at(pos_, dst, n);
  pos_ += n;
}
uint8_t RecordReader::u8() {
  return scalar<uint8_t>();
}
uint32_t RecordReader::u32() {
  return scalar<uint32_t>();
}
int64_t RecordReader::i64() {
  return scalar<int64_t>();
}
uint64_t RecordReader::u64() {
  return scalar<uint64_t>();
}
double RecordReader::f64() {
  return scalar<double>();
}
std::string RecordReader::str() {
  const uint64_t n = u64();
  ZT_CHECK(pos_ + n <= size_, "checkpoint file ", path_, " is truncated or corrupt (string of ", n,
           " bytes at offset ", pos_, ")");
  std::string s(n, '\0');
  read(s.data(), n);
  return s;
}
uint32_t RecordReader::magic(const char* expected8, uint32_t oldest, uint32_t newest) {
  char m[8];
  read(m, 8);
  ZT_CHECK(std::memcmp(m, expected8, 8) == 0, "checkpoint file ", path_, " is not a zerotorch ",
           expected8, " file (bad magic)");
  const uint32_t version = u32();
  ZT_CHECK(version >= oldest && version <= newest, "checkpoint file ", path_,
           " has format version ", version, ", this build reads ",
           oldest == newest ? std::to_string(newest)
                            : std::to_string(oldest) + " to " + std::to_string(newest));
  return version;
}

TensorRef RecordReader::tensor_ref() {
  TensorRef r;
  const uint8_t dt = u8();
  ZT_CHECK(dt < static_cast<uint8_t>(at::ScalarType::NumOptions), "checkpoint file ", path_,
           " is corrupt (dtype code ", int(dt), " at offset ", pos_ - 1, ")");
  r.dtype = static_cast<at::ScalarType>(dt);
  const uint32_t ndim = u32();
  ZT_CHECK(ndim <= 16, "checkpoint file ", path_, " is corrupt (tensor of ", ndim, " dims)");
  for (uint32_t i = 0; i < ndim; ++i) r.shape.push_back(i64());
  r.nbytes = u64();
  ZT_CHECK(r.nbytes == static_cast<uint64_t>(r.numel()) * c10::elementSize(r.dtype),
           "checkpoint file ", path_, " is corrupt (tensor byte count at offset ", pos_, ")");
  r.offset = pos_;
  ZT_CHECK(pos_ + r.nbytes <= size_, "checkpoint file ", path_, " is truncated (tensor at offset ",
           pos_, " needs ", r.nbytes, " bytes, file has ", size_, ")");
  pos_ += r.nbytes;
  return r;
}

at::Tensor RecordReader::tensor() {
  TensorRef r = tensor_ref();
  at::Tensor t = at::empty(r.shape, at::TensorOptions().dtype(r.dtype));
  read_at(r.offset, t.data_ptr(), r.nbytes);
  return t;
}

}  // namespace zt::io
