#include "optim/adam8bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dlfcn.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "base/error.h"
#include "optim/adam8bit_launch.h"
#include "optim/cpu_adam.h"

namespace zt::optim {
namespace {

// Where the fp16/bf16 copy goes (kind 0: nowhere).
struct HalfOut {
  void* data = nullptr;
  int kind = 0;  // 1 fp16, 2 bf16
  void write(int64_t i, float p) const {
    if (kind == 1) {
      static_cast<c10::Half*>(data)[i] = c10::Half(p);
    } else if (kind == 2) {
      static_cast<c10::BFloat16*>(data)[i] = c10::BFloat16(p);
    }
  }
};

}  // namespace

std::vector<Adam8bitGroup> adam8bit_groups(const std::vector<GroupRange>& groups, bool adamw_mode,
                                           int64_t t) {
  std::vector<Adam8bitGroup> out;
  for (const GroupRange& g : groups) {
    if (g.begin == g.end) continue;
    out.push_back({g.begin, g.end, adam_constants(g.hyper, adamw_mode, t)});
  }
  std::sort(out.begin(), out.end(),
            [](const Adam8bitGroup& a, const Adam8bitGroup& b) { return a.begin < b.begin; });
  return out;
}

Adam8bit::Adam8bit(const OptimizerSpec& spec)
    : cuda_launcher_(spec.cuda_launcher),
      adamw_mode_(spec.adamw_mode),
      block_(spec.block_size),
      min_8bit_size_(spec.min_8bit_size),
      signed_codec_(dynamic_map(true)),
      unsigned_codec_(dynamic_map(false)),
      path_(parse_simd_path(spec.simd)) {
  switch (path_) {
    case SimdPath::kAvx512:
      // VBMI (byte permutes) is a separate CPUID bit: Zen 4 and Ice Lake on have it, Skylake-X not.
      block_kernel_ = __builtin_cpu_supports("avx512vbmi") ? &kernels::adam8bit_block_avx512vbmi
                                                           : &kernels::adam8bit_block_avx512;
      break;
    case SimdPath::kAvx2: block_kernel_ = &kernels::adam8bit_block_avx2; break;
    default: block_kernel_ = &kernels::adam8bit_block_scalar; break;
  }
  ZT_CHECK(block_ >= 16 && block_ <= (1 << 20), "Adam8bit block_size must be in [16, 2^20], got ",
           block_);
}

void Adam8bit::init(int64_t numel, const at::TensorOptions& options) {
  // State lives on the shard's device: CPU, or a GPU (the plugin's kernel, adam8bit.cu).
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(options.device());
  if (numel < min_8bit_size_) {
    m32_ = at::zeros({numel}, f32);
    v32_ = at::zeros({numel}, f32);
    return;
  }
  ZT_CHECK(!options.device().is_cuda() || block_ <= kAdam8bitMaxCudaBlock,
           "Adam8bit on a GPU takes block_size <= ", kAdam8bitMaxCudaBlock, ", got ", block_);
  const int64_t blocks = (numel + block_ - 1) / block_;
  const at::TensorOptions u8 = f32.dtype(at::kByte);
  // Zero in both maps is a code, not necessarily 0: encode it.
  m_code_ = at::full({numel}, signed_codec_.encode(0.0f), u8);
  v_code_ = at::full({numel}, unsigned_codec_.encode(0.0f), u8);
  m_absmax_ = at::zeros({blocks}, f32);
  v_absmax_ = at::zeros({blocks}, f32);
}

// [4][256] fp32 on device: signed map, signed midpoints, unsigned map, unsigned midpoints
// (adam8bit_launch.h), the midpoints computed as QuantCodec computes them.
at::Tensor Adam8bit::codebook(const c10::Device& device) {
  if (codebook_.defined() && codebook_.device() == device) return codebook_;
  at::Tensor book = at::zeros({kAdam8bitCodebookFloats}, at::kFloat);
  float* out = book.data_ptr<float>();
  const QuantCodec* codecs[2] = {&signed_codec_, &unsigned_codec_};
  for (int c = 0; c < 2; ++c) {
    const QuantMap& map = codecs[c]->map();
    for (int i = 0; i < 256; ++i) out[512 * c + i] = map[i];
    for (int i = 0; i < 255; ++i) out[512 * c + 256 + i] = 0.5f * (map[i] + map[i + 1]);
  }
  codebook_ = book.to(device);
  return codebook_;
}

void Adam8bit::step_cuda(at::Tensor& master, const at::Tensor& grad,
                         const std::vector<Adam8bitGroup>& groups, at::Tensor* half_out) {
  auto launcher = reinterpret_cast<Adam8bitLauncher>(cuda_launcher_);
  if (launcher == nullptr) {
    launcher = reinterpret_cast<Adam8bitLauncher>(dlsym(RTLD_DEFAULT, kAdam8bitSymbol));
    ZT_CHECK(launcher != nullptr, "Adam8bit on a GPU needs the CUDA plugin's ", kAdam8bitSymbol,
             ": pass OptimizerSpec::cuda_launcher or load the plugin first (zt::cuda::kernels())");
    cuda_launcher_ = reinterpret_cast<void*>(launcher);
  }
  // The groups go to the device as bytes through reused buffers: an asynchronous copy on the
  // current stream, which the launch that follows reads in stream order.
  const int64_t bytes = static_cast<int64_t>(groups.size() * sizeof(Adam8bitGroup));
  if (!groups_host_.defined() || groups_host_.numel() < bytes ||
      groups_device_.device() != master.device()) {
    if (groups_copied_) groups_copied_->synchronize();
    groups_host_ = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    groups_device_ =
        at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(master.device()));
    groups_copied_.emplace(master.device().type());
  }
  groups_copied_->synchronize();  // the previous step's copy has left the host buffer
  std::memcpy(groups_host_.data_ptr(), groups.data(), static_cast<size_t>(bytes));
  groups_device_.narrow(0, 0, bytes).copy_(groups_host_.narrow(0, 0, bytes), /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl guard(master.device().type());
  groups_copied_->record(guard.getStream(master.device()));
  const at::Tensor& dev_groups = groups_device_;
  Adam8bitLaunch launch{};
  launch.param = master.data_ptr<float>();
  launch.grad = grad.data_ptr<float>();
  launch.n = master.numel();
  launch.block = block_;
  if (m_code_.defined()) {
    launch.m_code = m_code_.data_ptr<uint8_t>();
    launch.m_absmax = m_absmax_.data_ptr<float>();
    launch.v_code = v_code_.data_ptr<uint8_t>();
    launch.v_absmax = v_absmax_.data_ptr<float>();
    launch.codebook = codebook(master.device()).data_ptr<float>();
  } else {
    launch.m32 = m32_.data_ptr<float>();
    launch.v32 = v32_.data_ptr<float>();
  }
  launch.groups = reinterpret_cast<const Adam8bitGroup*>(dev_groups.data_ptr());
  launch.num_groups = static_cast<int32_t>(groups.size());
  if (half_out) {
    launch.half_out = half_out->data_ptr();
    launch.half_kind = half_out->scalar_type() == at::kHalf ? 1 : 2;
  }
  const char* err = launcher(&launch, nullptr);
  ZT_CHECK(err == nullptr, "Adam8bit kernel launch failed: ", err);
}

void Adam8bit::step(at::Tensor& master, const at::Tensor& grad,
                    const std::vector<GroupRange>& groups, at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  if (!master.is_cpu() && !master.is_cuda()) {
    // Another accelerator (the test device) has no kernel of ours: the host pass on host copies,
    // whose state then lives in host memory. Bit for bit the CPU's update.
    at::Tensor m = master.cpu(), g = grad.cpu();
    at::Tensor h = half_out != nullptr ? half_out->cpu() : at::Tensor();
    step(m, g, groups, half_out != nullptr ? &h : nullptr);
    master.copy_(m);
    if (half_out != nullptr) half_out->copy_(h);
    return;
  }
  const int64_t n = master.numel();
  if (!m_code_.defined() && !m32_.defined()) init(n, master.options());
  const at::Tensor& state0 = m_code_.defined() ? m_code_ : m32_;
  ZT_CHECK(state0.numel() == n, "Adam8bit: state has ", state0.numel(), " elements but master ", n);
  if (state0.device() != master.device()) {  // loaded from a checkpoint onto another device
    for (at::Tensor* t : {&m_code_, &m_absmax_, &v_code_, &v_absmax_, &m32_, &v32_}) {
      if (t->defined()) *t = t->to(master.device());
    }
  }
  ++step_count_;
  // Sorted by begin: the CPU pass and the kernel find a block's groups by bisection.
  const std::vector<Adam8bitGroup> cs = adam8bit_groups(groups, adamw_mode_, step_count_);
  if (master.is_cuda()) {
    if (!cs.empty()) step_cuda(master, grad, cs, half_out);
    return;
  }
  float* p = master.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  HalfOut half;
  if (half_out) {
    half.data = half_out->data_ptr();
    half.kind = half_out->scalar_type() == at::kHalf ? 1 : 2;
  }

  if (m32_.defined()) {  // small shard: plain fp32 Adam
    float* m = m32_.data_ptr<float>();
    float* v = v32_.data_ptr<float>();
    for (const Adam8bitGroup& c : cs) {
      for (int64_t i = c.begin; i < c.end; ++i) {
        adam_update<false>(c.c, p[i], g[i], m[i], v[i]);
        half.write(i, p[i]);
      }
    }
  } else {
    uint8_t* mq = m_code_.data_ptr<uint8_t>();
    uint8_t* vq = v_code_.data_ptr<uint8_t>();
    float* ma = m_absmax_.data_ptr<float>();
    float* va = v_absmax_.data_ptr<float>();
    const int64_t blocks = m_absmax_.numel();
    const kernels::QuantTables mt = signed_codec_.tables(), vt = unsigned_codec_.tables();
    const kernels::HalfKind half_kind = half.kind == 1   ? kernels::HalfKind::kFloat16
                                        : half.kind == 2 ? kernels::HalfKind::kBFloat16
                                                         : kernels::HalfKind::kNone;
    auto kernel = block_kernel_;
    at::parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
      std::vector<float> m(block_), v(block_);
      std::vector<kernels::BlockSegment> segments;
      for (int64_t b = bb; b < be; ++b) {
        const int64_t lo = b * block_, hi = std::min(n, lo + block_);
        // Groups overlapping [lo, hi): first one whose end > lo.
        segments.clear();
        auto it = std::upper_bound(cs.begin(), cs.end(), lo,
                                   [](int64_t x, const Adam8bitGroup& c) { return x < c.end; });
        for (; it != cs.end() && it->begin < hi; ++it) {
          segments.push_back({std::max(lo, it->begin) - lo, std::min(hi, it->end) - lo, it->c});
        }
        kernels::Adam8bitBlock a{};
        a.param = p + lo;
        a.grad = g + lo;
        a.m_code = mq + lo;
        a.v_code = vq + lo;
        a.m_absmax = ma + b;
        a.v_absmax = va + b;
        a.half_out = half.data == nullptr
                         ? nullptr
                         : static_cast<void*>(static_cast<uint16_t*>(half.data) + lo);
        a.half_kind = half_kind;
        a.n = hi - lo;
        a.segments = segments.data();
        a.num_segments = static_cast<int32_t>(segments.size());
        a.m_tables = mt;
        a.v_tables = vt;
        a.m_scratch = m.data();
        a.v_scratch = v.data();
        if (b + 1 < be) {  // this thread's next block
          const int64_t nlo = hi, nhi = std::min(n, nlo + block_);
          a.next.param = p + nlo;
          a.next.grad = g + nlo;
          a.next.m_code = mq + nlo;
          a.next.v_code = vq + nlo;
          a.next.half_out =
              half.data == nullptr ? nullptr : static_cast<const uint16_t*>(half.data) + nlo;
          a.next.n = nhi - nlo;
        }
        kernel(a);
      }
    });
  }
}

std::pair<at::Tensor, at::Tensor> Adam8bit::dequantized_state() const {
  if (m32_.defined())
    return {m32_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true),
            v32_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)};
  ZT_CHECK(m_code_.defined(), "Adam8bit: no state before the first step");
  const int64_t n = m_code_.numel();
  at::Tensor m = at::empty({n}, at::kFloat), v = at::empty({n}, at::kFloat);
  const at::Tensor mc = m_code_.cpu(), ma = m_absmax_.cpu(), vc = v_code_.cpu(),
                   va = v_absmax_.cpu();
  dequantize_blockwise(mc.data_ptr<uint8_t>(), ma.data_ptr<float>(), n, block_, signed_codec_,
                       m.data_ptr<float>());
  dequantize_blockwise(vc.data_ptr<uint8_t>(), va.data_ptr<float>(), n, block_, unsigned_codec_,
                       v.data_ptr<float>());
  return {m, v};
}

int64_t Adam8bit::state_bytes() const {
  if (m32_.defined()) return 8 * m32_.numel();
  if (!m_code_.defined()) return 0;
  return 2 * m_code_.numel() + 4 * (m_absmax_.numel() + v_absmax_.numel());
}

std::map<std::string, at::Tensor> Adam8bit::state_dict() const {
  std::map<std::string, at::Tensor> s{{"step", step_tensor()}};
  if (m32_.defined()) {
    s["exp_avg"] = m32_;
    s["exp_avg_sq"] = v32_;
  } else if (m_code_.defined()) {
    s["exp_avg_code"] = m_code_;
    s["exp_avg_absmax"] = m_absmax_;
    s["exp_avg_sq_code"] = v_code_;
    s["exp_avg_sq_absmax"] = v_absmax_;
    s["block_size"] = at::scalar_tensor(block_, at::kLong);
  }
  return s;
}

void Adam8bit::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_step(state);
  m_code_ = m_absmax_ = v_code_ = v_absmax_ = m32_ = v32_ = at::Tensor();
  if (state.count("exp_avg")) {
    m32_ = state_entry(state, "exp_avg", -1, name()).to(at::kCPU, at::kFloat).contiguous().clone();
    v32_ = state_entry(state, "exp_avg_sq", m32_.numel(), name())
               .to(at::kCPU, at::kFloat)
               .contiguous()
               .clone();
    return;
  }
  if (!state.count("exp_avg_code")) return;  // saved before the first step
  const int64_t block = state_entry(state, "block_size", 1, name()).item<int64_t>();
  ZT_CHECK(block == block_, "Adam8bit: checkpoint has block_size ", block, ", this optimizer ",
           block_);
  m_code_ = state_entry(state, "exp_avg_code", -1, name()).contiguous().clone();
  const int64_t n = m_code_.numel(), blocks = (n + block_ - 1) / block_;
  ZT_CHECK(m_code_.scalar_type() == at::kByte, "Adam8bit: state \"exp_avg_code\" must be uint8");
  v_code_ = state_entry(state, "exp_avg_sq_code", n, name()).contiguous().clone();
  m_absmax_ =
      state_entry(state, "exp_avg_absmax", blocks, name()).to(at::kFloat).contiguous().clone();
  v_absmax_ =
      state_entry(state, "exp_avg_sq_absmax", blocks, name()).to(at::kFloat).contiguous().clone();
}

}  // namespace zt::optim
