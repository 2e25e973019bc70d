#pragma once
// Reader of one safetensors file (the format safetensors_writer.h writes: an 8-byte
// little-endian header length, a JSON header of name -> {dtype, shape, data_offsets}, then the
// raw little-endian bytes). The header is read and checked on open (every range inside the data,
// of the size its dtype and shape say); tensors are read one at a time on request (pread), so a
// caller can stream a file larger than it wants to hold, or mapped (mmap), so a caller can copy
// out the few elements it needs and hold nothing else.
//
//   zt::SafetensorsReader r("model.safetensors");
//   for (const auto& e : r.entries()) at::Tensor t = r.read(e.name);
//   at::Tensor view = r.map("wte.weight");         // no bytes read until touched
//   shard.copy_(view.reshape({-1}).narrow(0, lo, n));   // reads (about) those pages only

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt {

namespace io {
class RecordReader;
}

class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range in the data section
  };
  // Throws one zt::Error naming the file for a malformed header.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();

  // In data order. The header's __metadata__ (string -> string) is in metadata().
  const std::vector<Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;
  // A fresh CPU tensor holding the entry's value.
  at::Tensor read(const std::string& name) const;
  // A read-only CPU tensor (the entry's dtype and shape) over the file's own bytes: the file is
  // mapped (mmap, once, on first use) and touching the view faults in only the pages touched,
  // from the page cache (file-backed and reclaimable, not this process's heap; no CPU allocator
  // sees it). Valid while the reader lives; never write to it. An entry whose bytes are not
  // aligned to its element size (a writer that does not pad) is read into memory instead, as
  // read() does, since LibTorch's kernels may assume aligned elements.
  at::Tensor map(const std::string& name) const;
  // Drops the mapped pages of the entry (and of neighbours sharing its first and last page) from
  // this process's resident set (madvise MADV_DONTNEED; the page cache keeps them, and touching a
  // view again faults them back in): after copying out of a view, what it touched stops counting
  // as this process's memory. Nothing to do before the first map().
  void drop_pages(const std::string& name) const;
  const std::string& path() const { return path_; }

  // The ScalarType of a safetensors dtype name ("F32", "BF16", ...); throws for others.
  static at::ScalarType dtype_of(const std::string& name);

 private:
  std::string path_;
  std::unique_ptr<io::RecordReader> in_;
  uint64_t data_offset_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t file_size_ = 0;
  mutable void* mapped_ = nullptr;  // the whole file, PROT_READ, after the first map()
};

}  // namespace zt
