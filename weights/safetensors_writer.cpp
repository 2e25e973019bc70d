#include "weights/safetensors_writer.h"

#include <sstream>

#include <ATen/ATen.h>

#include "base/error.h"
#include "weights/record_file.h"

namespace zt {

std::string SafetensorsWriter::dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: ZT_THROW("safetensors has no dtype for ", c10::toString(t));
  }
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<Entry> entries)
    : path_(path), entries_(std::move(entries)) {
  std::ostringstream h;
  h << '{';
  uint64_t off = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    uint64_t n = c10::elementSize(e.dtype);
    for (int64_t d : e.shape) {
      ZT_CHECK(d >= 0, "safetensors entry ", e.name, " has a negative dimension");
      n *= static_cast<uint64_t>(d);
    }
    std::string name;
    for (char ch : e.name) {
      ZT_CHECK(static_cast<unsigned char>(ch) >= 0x20, "safetensors entry name '", e.name,
               "' holds a control character");
      if (ch == '"' || ch == '\\') name += '\\';
      name += ch;
    }
    h << (i ? "," : "") << '"' << name << "\":{\"dtype\":\"" << dtype_name(e.dtype)
      << "\",\"shape\":[";
    for (size_t d = 0; d < e.shape.size(); ++d) h << (d ? "," : "") << e.shape[d];
    h << "],\"data_offsets\":[" << off << ',' << off + n << "]}";
    off += n;
  }
  h << '}';
  std::string header = h.str();
  while (header.size() % 8 != 0) header += ' ';  // tensor data starts 8-byte aligned
  out_ = std::make_unique<io::RecordWriter>(path_);
  out_->u64(header.size());
  out_->bytes(header.data(), header.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(const std::string& name, const at::Tensor& value) {
  ZT_CHECK(next_ < entries_.size(), path_, ": tensor ", name, " written after the last entry");
  const Entry& e = entries_[next_];
  ZT_CHECK(e.name == name, path_, ": expected tensor ", e.name, " next, got ", name);
  ZT_CHECK(value.scalar_type() == e.dtype && value.sizes().vec() == e.shape, path_, ": tensor ",
           name, " is ", c10::toString(value.scalar_type()), value.sizes(), ", declared ",
           c10::toString(e.dtype), at::IntArrayRef(e.shape));
  at::Tensor c = value.to(at::kCPU).contiguous();
  out_->bytes(c.data_ptr(), c.numel() * c.element_size());
  ++next_;
}

void SafetensorsWriter::commit() {
  ZT_CHECK(next_ == entries_.size(), path_, ": ", entries_.size() - next_,
           " declared tensors were never written (next: ",
           next_ < entries_.size() ? entries_[next_].name : "", ")");
  out_->commit();
}

}  // namespace zt
