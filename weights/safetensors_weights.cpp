#include "weights/safetensors_weights.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/shape_str.h"

namespace zt {
namespace {

// dst (n,) <- elements [begin, begin + n) of `v` (rows, cols) flattened row-major, where v is a
// strided view (the transpose of the mapped file tensor): a partial first row, the whole rows
// as one 2-D strided copy, a partial last row.
void copy_rows(const at::Tensor& v, int64_t begin, const at::Tensor& dst) {
  const int64_t cols = v.size(1), n = dst.numel();
  int64_t done = 0;
  while (done < n) {
    const int64_t row = (begin + done) / cols, col = (begin + done) % cols;
    const int64_t whole_rows = col == 0 ? (n - done) / cols : 0;
    if (whole_rows > 0) {
      dst.narrow(0, done, whole_rows * cols)
          .view({whole_rows, cols})
          .copy_(v.narrow(0, row, whole_rows));
      done += whole_rows * cols;
    } else {
      const int64_t take = std::min(cols - col, n - done);
      dst.narrow(0, done, take).copy_(v[row].narrow(0, col, take));
      done += take;
    }
  }
}

}  // namespace

SafetensorsWeights::SafetensorsWeights(const SafetensorsSet& files, Naming naming)
    : files_(files), naming_(std::move(naming)) {}

void SafetensorsWeights::fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
                              const at::Tensor& dst) {
  const StoredTensor stored = naming_(name);
  const SafetensorsReader* file = files_.find(stored.name);
  ZT_CHECK(file != nullptr, files_.where(), ": no tensor '", stored.name, "' for parameter ", name);
  const SafetensorsReader::Entry& e = file->entry(stored.name);
  std::vector<int64_t> want = shape.vec();
  if (stored.transposed) {
    ZT_CHECK(want.size() == 2, "parameter ", name, " is ", shape_str(shape),
             ": only a 2-D parameter can be stored transposed");
    std::swap(want[0], want[1]);
  }
  ZT_CHECK(e.shape == want, file->path(), ": tensor '", stored.name, "' is ", shape_str(e.shape),
           ", parameter ", name, " ", shape_str(shape), " needs ", shape_str(want),
           stored.transposed ? " (stored transposed)" : "");
  ZT_CHECK(at::isFloatingType(e.dtype) && at::isFloatingType(dst.scalar_type()), file->path(),
           ": tensor '", stored.name, "' is ", e.dtype, ", parameter ", name, " (",
           dst.scalar_type(), ") takes a floating-point tensor (F32, BF16, F16, F64)");
  used_.insert(stored.name);
  if (dst.numel() == 0) return;
  ZT_INTERNAL_ASSERT(dst.dim() == 1 && dst.is_contiguous(), "fill of ", name, ": dst not flat");
  const at::Tensor mapped = file->map(stored.name);
  if (stored.transposed) {
    copy_rows(mapped.t(), begin, dst);
  } else {
    dst.copy_(mapped.reshape({-1}).narrow(0, begin, dst.numel()));
  }
  file->drop_pages(stored.name);  // the pages touched leave this process's resident set
}

void SafetensorsWeights::check_all_used(
    const std::function<bool(const std::string& tensor)>& ignored) const {
  for (const auto& f : files_.files()) {
    for (const auto& e : f->entries()) {
      ZT_CHECK(used_.count(e.name) || ignored(e.name), f->path(), ": tensor '", e.name,
               "' matches no parameter of the model");
    }
  }
}

}  // namespace zt
