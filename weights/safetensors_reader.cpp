#include "weights/safetensors_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/mman.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <ATen/ATen.h>

#include "base/error.h"
#include "weights/record_file.h"

namespace zt {

at::ScalarType SafetensorsReader::dtype_of(const std::string& name) {
  if (name == "F32") return at::kFloat;
  if (name == "F64") return at::kDouble;
  if (name == "F16") return at::kHalf;
  if (name == "BF16") return at::kBFloat16;
  if (name == "I64") return at::kLong;
  if (name == "I32") return at::kInt;
  if (name == "I16") return at::kShort;
  if (name == "I8") return at::kChar;
  if (name == "U8") return at::kByte;
  if (name == "BOOL") return at::kBool;
  ZT_THROW("safetensors dtype ", name, " is not supported");
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  ZT_CHECK(std::filesystem::is_regular_file(path), "safetensors file ", path, " does not exist");
  const uint64_t file_size = std::filesystem::file_size(path);
  file_size_ = file_size;
  ZT_CHECK(file_size >= 8, path, ": not a safetensors file (", file_size, " bytes)");
  in_ = std::make_unique<io::RecordReader>(path);
  const uint64_t header_len = in_->u64();
  ZT_CHECK(header_len <= file_size - 8, path, ": header length ", header_len,
           " runs past the end of the file (", file_size, " bytes)");
  std::string header(header_len, '\0');
  in_->read_at(8, header.data(), header_len);
  data_offset_ = 8 + header_len;
  const uint64_t data_size = file_size - data_offset_;
  // JSON is YAML; yaml-cpp is already the config's reader.
  YAML::Node root;
  try {
    root = YAML::Load(header);
  } catch (const YAML::Exception& e) {
    ZT_THROW(path, ": safetensors header is not JSON: ", e.what());
  }
  ZT_CHECK(root.IsMap(), path, ": safetensors header is not a JSON object");
  for (const auto& kv : root) {
    const std::string name = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (name == "__metadata__") {
      ZT_CHECK(v.IsMap(), path, ": __metadata__ is not an object");
      for (const auto& m : v) metadata_[m.first.as<std::string>()] = m.second.as<std::string>();
      continue;
    }
    ZT_CHECK(v.IsMap() && v["dtype"] && v["shape"] && v["data_offsets"], path, ": entry '", name,
             "' lacks dtype, shape or data_offsets");
    Entry e;
    e.name = name;
    e.dtype = dtype_of(v["dtype"].as<std::string>());
    e.shape = v["shape"].as<std::vector<int64_t>>();
    const auto off = v["data_offsets"].as<std::vector<uint64_t>>();
    ZT_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size, path, ": entry '", name,
             "' has data_offsets outside the data (", data_size, " bytes)");
    e.begin = off[0];
    e.end = off[1];
    uint64_t n = c10::elementSize(e.dtype);
    for (int64_t d : e.shape) {
      ZT_CHECK(d >= 0, path, ": entry '", name, "' has a negative dimension");
      n *= static_cast<uint64_t>(d);
    }
    ZT_CHECK(n == e.end - e.begin, path, ": entry '", name, "' holds ", e.end - e.begin,
             " bytes, its dtype and shape need ", n);
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

SafetensorsReader::~SafetensorsReader() {
  if (mapped_ != nullptr) ::munmap(mapped_, file_size_);
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  auto it = index_.find(name);
  ZT_CHECK(it != index_.end(), path_, " has no tensor '", name, "'");
  return entries_[it->second];
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  const Entry& e = entry(name);
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  if (e.end > e.begin) in_->read_at(data_offset_ + e.begin, t.data_ptr(), e.end - e.begin);
  return t;
}

at::Tensor SafetensorsReader::map(const std::string& name) const {
  const Entry& e = entry(name);
  const uint64_t offset = data_offset_ + e.begin;
  if (e.end == e.begin || offset % c10::elementSize(e.dtype) != 0) return read(name);
  if (mapped_ == nullptr) {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    ZT_CHECK(fd >= 0, "safetensors file ", path_, " cannot be opened: ", std::strerror(errno));
    void* p = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    ZT_CHECK(p != MAP_FAILED, "safetensors file ", path_,
             " cannot be mapped: ", std::strerror(err));
    mapped_ = p;
  }
  // from_blob without a deleter: the tensor does not own the mapping, the reader does.
  return at::from_blob(static_cast<char*>(mapped_) + offset, e.shape,
                       at::TensorOptions().dtype(e.dtype));
}

void SafetensorsReader::drop_pages(const std::string& name) const {
  const Entry& e = entry(name);
  if (mapped_ == nullptr || e.end == e.begin) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t lo = (data_offset_ + e.begin) / page * page;
  const uint64_t hi = std::min(file_size_, (data_offset_ + e.end + page - 1) / page * page);
  ::madvise(static_cast<char*>(mapped_) + lo, hi - lo, MADV_DONTNEED);  // advice: never fails here
}

}  // namespace zt
