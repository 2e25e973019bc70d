#include "weights/deepspeed_universal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <c10/util/accumulate.h>

#include "base/error.h"
#include "base/shape_str.h"
#include "weights/torch_save_reader.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

// "blocks.2.fc" < "blocks.10.fc": runs of digits compare as numbers, the rest as bytes.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

fs::path zero_dir(const std::string& dir) {
  return fs::path(dir) / "zero";
}

}  // namespace

bool DeepSpeedUniversal::present(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(zero_dir(dir), ec)) return false;
  for (const auto& d : fs::directory_iterator(zero_dir(dir), ec)) {
    if (d.is_directory() && fs::exists(d.path() / "fp32.pt")) return true;
  }
  return false;
}

DeepSpeedUniversal::DeepSpeedUniversal(const std::string& dir) : dir_(dir) {
  ZT_CHECK(fs::is_directory(dir), "DeepSpeed universal checkpoint ", dir, " does not exist");
  ZT_CHECK(fs::is_directory(zero_dir(dir)), dir,
           " is not a DeepSpeed universal checkpoint: it has no zero/ folder (ds_to_universal.py "
           "writes one; a plain DeepSpeed checkpoint must be converted with it first)");
  for (const auto& d : fs::directory_iterator(zero_dir(dir))) {
    if (d.is_directory()) names_.push_back(d.path().filename().string());
  }
  ZT_CHECK(!names_.empty(), "DeepSpeed universal checkpoint ", zero_dir(dir).string(),
           " holds no parameter folder");
  std::sort(names_.begin(), names_.end(), natural_less);
}

at::Tensor DeepSpeedUniversal::read(const std::string& name, const std::string& state,
                                    const std::vector<int64_t>* shape) const {
  const std::string path = (zero_dir(dir_) / name / (state + ".pt")).string();
  const c10::IValue v = read_torch_file(path);
  at::Tensor t;
  if (v.isTensor()) {
    t = v.toTensor();
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) {
      if (kv.key().isString() && kv.key().toStringRef() == "param" && kv.value().isTensor())
        t = kv.value().toTensor();
    }
  }
  ZT_CHECK(t.defined(), "DeepSpeed universal file ", path, " holds a ", v.tagKind(),
           " without a tensor under \"param\"");
  ZT_CHECK(at::isFloatingType(t.scalar_type()), "DeepSpeed universal file ", path, " holds ",
           t.scalar_type(), " values, expected floating point");
  if (shape != nullptr && t.sizes().vec() != *shape) {
    const int64_t numel = c10::multiply_integers(*shape);
    ZT_CHECK(t.dim() == 1 && t.numel() == numel, "DeepSpeed universal file ", path, " has shape ",
             shape_str(t.sizes().vec()), ", but parameter ", name, " has ", shape_str(*shape));
    t = t.reshape(*shape);
  }
  return t.to(at::kFloat).contiguous();
}

int64_t DeepSpeedUniversal::step(const std::string& name) const {
  const fs::path p = zero_dir(dir_) / name / "step.pt";
  if (!fs::exists(p)) return -1;
  const c10::IValue v = read_torch_file(p.string());
  double s = 0;
  if (v.isTensor() && v.toTensor().numel() == 1) {
    s = v.toTensor().item<double>();
  } else if (v.isInt() || v.isDouble()) {
    s = v.isInt() ? static_cast<double>(v.toInt()) : v.toDouble();
  } else {
    ZT_THROW("DeepSpeed universal file ", p.string(), " holds a ", v.tagKind(),
             ", expected the step as a number");
  }
  ZT_CHECK(s >= 0 && std::floor(s) == s, "DeepSpeed universal file ", p.string(), " holds step ", s,
           ", expected a whole number >= 0");
  return static_cast<int64_t>(s);
}

}  // namespace zt
