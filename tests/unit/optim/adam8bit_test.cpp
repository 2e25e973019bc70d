// Block-wise dynamic quantization: the maps, the per-block round-trip bound, and Adam8bit against
// fp32 AdamW over 20 steps.
#include "optim/adam8bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "optim/adam8bit_kernel.h"
#include "optim/blockwise_quant.h"
#include "optim/cpu_adam.h"

namespace {

using zt::optim::GroupHyper;

TEST(DynamicMap, ShapeOfBothMaps) {
  for (bool is_signed : {true, false}) {
    const auto& m = zt::optim::dynamic_map(is_signed);
    for (int i = 1; i < 256; ++i) EXPECT_LT(m[i - 1], m[i]) << i;  // sorted, unique
    EXPECT_EQ(m[255], 1.0f);
    EXPECT_EQ(is_signed ? m[0] : m[0], is_signed ? -(1 - 0.9f / 128) : 0.0f);
    // Six decades below 1: the smallest non-zero magnitude is in [1e-7, 1e-6].
    float smallest = 1;
    for (float v : m) {
      if (v != 0) smallest = std::min(smallest, std::fabs(v));
    }
    EXPECT_GT(smallest, 1e-7f);
    EXPECT_LT(smallest, 1e-6f);
  }
}

// Quantizes x block-wise and returns the dequantized copy and the absmax per block.
std::pair<torch::Tensor, torch::Tensor> round_trip(const torch::Tensor& x, int64_t block,
                                                   bool is_signed) {
  const int64_t n = x.numel();
  zt::optim::QuantCodec codec(zt::optim::dynamic_map(is_signed));
  torch::Tensor codes = torch::empty({n}, torch::kByte);
  torch::Tensor absmax = torch::empty({(n + block - 1) / block});
  zt::optim::quantize_blockwise(x.data_ptr<float>(), n, block, codec, codes.data_ptr<uint8_t>(),
                                absmax.data_ptr<float>());
  torch::Tensor y = torch::empty({n});
  zt::optim::dequantize_blockwise(codes.data_ptr<uint8_t>(), absmax.data_ptr<float>(), n, block,
                                  codec, y.data_ptr<float>());
  return {y, absmax};
}

class RoundTrip : public testing::TestWithParam<int64_t> {};

TEST_P(RoundTrip, ErrorPerBlockIsBoundedByHalfTheWidestGap) {
  const int64_t block = GetParam();
  torch::manual_seed(9);
  const int64_t n = 50 * block + 77;  // a short last block too
  // Heavy-tailed values over many decades, as Adam's moments are.
  torch::Tensor m = torch::randn({n}) * torch::exp(torch::randn({n}) * 3);
  torch::Tensor v = m.square();
  for (bool is_signed : {true, false}) {
    torch::Tensor x = is_signed ? m : v;
    auto [y, absmax] = round_trip(x, block, is_signed);
    // Widest gap between neighbours in [0.1, 1]: 0.9/64 (signed) or 0.9/128 (unsigned).
    const double half_gap = is_signed ? 0.9 / 64 / 2 : 0.9 / 128 / 2;
    torch::Tensor amax = absmax.repeat_interleave(block).narrow(0, 0, n);
    torch::Tensor err = (x - y).abs();
    EXPECT_TRUE((err <= amax * (half_gap * (1 + 1e-5))).all().item<bool>())
        << (is_signed ? "signed" : "unsigned") << " worst " << (err / amax).max().item<double>();
    torch::Tensor padded = torch::cat({x.abs(), torch::zeros({51 * block - n})});
    EXPECT_TRUE(torch::equal(absmax, padded.view({51, block}).amax(1)));
    // The largest positive value is exact (1.0 is in the map; the signed map's most negative
    // value is -(1 - 0.9/128), as bitsandbytes'), and signs are kept.
    if (is_signed) {
      EXPECT_GE(y.abs().max().item<float>(), x.abs().max().item<float>() * (1 - 0.9f / 128));
    } else {
      EXPECT_TRUE(torch::equal(y.max(), x.max()));
    }
    EXPECT_TRUE(((y * x) >= 0).all().item<bool>());
    // Relative error of values within two decades of the block max stays small (dynamic map).
    torch::Tensor big = x.abs() >= amax * 0.01;
    const double rel = (err / x.abs()).masked_select(big).mean().item<double>();
    // Measured: about 2.5-3% (signed) and 1.2% (unsigned): the decade [0.01, 0.1] of the block
    // max has only 32 (64) codes.
    EXPECT_LT(rel, is_signed ? 0.04 : 0.02) << "mean relative error " << rel;
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, RoundTrip, testing::Values(256, 2048));

zt::optim::OptimizerSpec spec8(int64_t block = 2048) {
  zt::optim::OptimizerSpec s;
  s.type = zt::optim::OptimizerKind::kAdam8bit;
  s.block_size = block;
  return s;
}

TEST(Adam8bit, StateIsTwoBytesPerParameterPlusScales) {
  const int64_t n = 1 << 20;
  auto opt = zt::optim::make_shard_optimizer(spec8());
  torch::Tensor p = torch::zeros({n});
  opt->step(p, torch::randn({n}), {{0, n, {}}});
  EXPECT_EQ(opt->state_bytes(), 2 * n + 2 * 4 * (n / 2048));
  auto adam = zt::optim::make_shard_optimizer({});
  adam->step(p, torch::randn({n}), {{0, n, {}}});
  EXPECT_EQ(adam->state_bytes(), 8 * n);
  // A small shard keeps fp32 state.
  auto small = zt::optim::make_shard_optimizer(spec8());
  torch::Tensor q = torch::zeros({1000});
  small->step(q, torch::randn({1000}), {{0, 1000, {}}});
  EXPECT_EQ(small->state_bytes(), 8 * 1000);
  EXPECT_FALSE(static_cast<zt::optim::Adam8bit&>(*small).quantized());
}

// 20 steps against fp32 AdamW from the same start: the 8-bit trajectory stays close to the
// 32-bit one (the quantization error of the moments is a small fraction of the update).
// Gradient scales vary over 4 decades between chunks of 4096 elements (tensors) and by ~1.6x
// inside them: 8-bit state assumes a block's v spans less than the map's ~7 decades (a v
// below 1e-7 of its block's max reads back as 0, and m / (0 + eps) explodes: bitsandbytes has
// the same limit, which is why it keeps small tensors in 32 bits).
TEST(Adam8bit, TracksFp32AdamW) {
  torch::manual_seed(4);
  const int64_t n = 200000;
  GroupHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.01;
  std::vector<zt::optim::GroupRange> groups{{0, 150000, h}, {150000, n, h}};
  groups[1].hyper.weight_decay = 0;
  torch::Tensor p0 = torch::randn({n});
  torch::Tensor p8 = p0.clone(), p32 = p0.clone();
  auto opt8 = zt::optim::make_shard_optimizer(spec8());
  auto opt32 = zt::optim::make_shard_optimizer({});
  // A persistent gradient direction plus noise.
  torch::Tensor scale =
      torch::exp(torch::rand({n / 4096 + 1}) * 9 - 6).repeat_interleave(4096).narrow(0, 0, n) *
      torch::exp(torch::randn({n}) * 0.5);
  torch::Tensor dir = torch::randn({n});
  for (int s = 0; s < 20; ++s) {
    torch::Tensor g = (dir + 0.5 * torch::randn({n})) * scale;
    opt8->step(p8, g, groups);
    opt32->step(p32, g, groups);
  }
  const double update = (p32 - p0).norm().item<double>();
  const double dev = (p8 - p32).norm().item<double>();
  // Measured 2.4% at this seed.
  EXPECT_LT(dev / update, 0.05) << "8-bit deviates by " << dev / update << " of the update";
  // The moments themselves, dequantized, against fp32 Adam's.
  auto [m8, v8] = static_cast<zt::optim::Adam8bit&>(*opt8).dequantized_state();
  auto sd = opt32->state_dict();
  EXPECT_LT((m8 - sd["exp_avg"]).norm().item<double>() / sd["exp_avg"].norm().item<double>(), 0.05);
  EXPECT_LT((v8 - sd["exp_avg_sq"]).norm().item<double>() / sd["exp_avg_sq"].norm().item<double>(),
            0.05);
}

TEST(Adam8bit, PaddingAndHalfCopyAndResume) {
  torch::manual_seed(6);
  const int64_t n = 10000;
  GroupHyper h;
  std::vector<zt::optim::GroupRange> groups{{100, 5000, h}, {5100, 9990, h}};
  auto a = zt::optim::make_shard_optimizer(spec8(256));
  torch::Tensor pa = torch::randn({n});
  const torch::Tensor p0 = pa.clone();
  torch::Tensor half = torch::zeros({n}, torch::kBFloat16);
  std::vector<torch::Tensor> grads;
  for (int s = 0; s < 4; ++s) grads.push_back(torch::randn({n}));
  a->step(pa, grads[0], groups, &half);
  a->step(pa, grads[1], groups, &half);
  EXPECT_TRUE(torch::equal(pa.narrow(0, 0, 100), p0.narrow(0, 0, 100)));
  EXPECT_TRUE(torch::equal(pa.narrow(0, 5000, 100), p0.narrow(0, 5000, 100)));
  EXPECT_TRUE(
      torch::equal(half.narrow(0, 100, 4900), pa.narrow(0, 100, 4900).to(torch::kBFloat16)));
  auto b = zt::optim::make_shard_optimizer(spec8(256));
  std::map<std::string, torch::Tensor> saved;
  for (auto& [k, v] : a->state_dict()) saved[k] = v.clone();
  b->load_state_dict(saved);
  torch::Tensor pb = pa.clone();
  for (int s = 2; s < 4; ++s) {
    a->step(pa, grads[s], groups);
    b->step(pb, grads[s], groups);
  }
  EXPECT_TRUE(torch::equal(pa, pb));
  auto c = zt::optim::make_shard_optimizer(spec8(2048));
  EXPECT_THROW(c->load_state_dict(saved), zt::Error);  // block size mismatch
}

}  // namespace

namespace {

TEST(QuantCodec, TableEncodeEqualsBisection) {
  torch::manual_seed(8);
  // Normalised values as the optimizer produces them, plus exact map values and midpoints.
  torch::Tensor x = torch::cat({torch::rand({200000}) * 2 - 1,
                                (torch::randn({200000}) * 5).exp() * 1e-3 *
                                    (torch::rand({200000}) > 0.5).to(torch::kFloat).mul(2).sub(1),
                                torch::tensor({0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, 2.0f})});
  for (bool is_signed : {true, false}) {
    zt::optim::QuantCodec c(zt::optim::dynamic_map(is_signed));
    std::vector<float> probes(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    for (int i = 0; i < 255; ++i) {
      const float mid = 0.5f * (c.map()[i] + c.map()[i + 1]);
      probes.insert(probes.end(),
                    {c.map()[i], mid, std::nextafter(mid, 2.0f), std::nextafter(mid, -2.0f)});
    }
    int64_t bad = 0;
    for (float v : probes) bad += c.encode(v) != c.encode_by_bisection(v);
    EXPECT_EQ(bad, 0) << (is_signed ? "signed" : "unsigned");
  }
}

}  // namespace

namespace {

// The 8-bit step as it was written before the SIMD builds (decode, adam_update<false>, absmax,
// encode, element by element): every build must give these bytes.
struct Reference8bit {
  int64_t block;
  std::vector<float> p;
  std::vector<uint8_t> mq, vq;
  std::vector<float> ma, va;
  zt::optim::QuantCodec sc{zt::optim::dynamic_map(true)}, uc{zt::optim::dynamic_map(false)};

  Reference8bit(const torch::Tensor& p0, int64_t block_size)
      : block(block_size), p(p0.data_ptr<float>(), p0.data_ptr<float>() + p0.numel()) {
    const int64_t n = p0.numel(), blocks = (n + block - 1) / block;
    mq.assign(n, sc.encode(0.0f));
    vq.assign(n, uc.encode(0.0f));
    ma.assign(blocks, 0.0f);
    va.assign(blocks, 0.0f);
  }

  void step(const torch::Tensor& grad, const std::vector<zt::optim::Adam8bitGroup>& cs,
            uint16_t* half, bool fp16) {
    const float* g = grad.data_ptr<float>();
    const int64_t n = static_cast<int64_t>(p.size());
    for (int64_t b = 0; b * block < n; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      std::vector<float> m(hi - lo), v(hi - lo);
      for (int64_t i = lo; i < hi; ++i) {
        m[i - lo] = sc.decode(mq[i]) * ma[b];
        v[i - lo] = uc.decode(vq[i]) * va[b];
      }
      for (const auto& c : cs) {
        for (int64_t i = std::max(lo, c.begin); i < std::min(hi, c.end); ++i) {
          zt::optim::adam_update<false>(c.c, p[i], g[i], m[i - lo], v[i - lo]);
          if (half != nullptr) {
            half[i] = fp16 ? c10::Half(p[i]).x : c10::BFloat16(p[i]).x;
          }
        }
      }
      float mmax = 0, vmax = 0;
      for (size_t k = 0; k < m.size(); ++k) {
        mmax = std::max(mmax, std::fabs(m[k]));
        vmax = std::max(vmax, v[k]);
      }
      ma[b] = mmax;
      va[b] = vmax;
      const float mi = mmax > 0 ? 1 / mmax : 0, vi = vmax > 0 ? 1 / vmax : 0;
      for (int64_t i = lo; i < hi; ++i) {
        mq[i] = sc.encode(m[i - lo] * mi);
        vq[i] = uc.encode(v[i - lo] * vi);
      }
    }
  }
};

template <typename T>
bool same_bytes(const torch::Tensor& t, const std::vector<T>& v) {
  return t.numel() == static_cast<int64_t>(v.size()) &&
         std::memcmp(t.data_ptr(), v.data(), v.size() * sizeof(T)) == 0;
}

// The scalar, AVX2 and AVX-512 builds of the block pass (adam8bit_kernel.h) against the reference:
// 6 steps, Adam (L2) and AdamW, bf16 and fp16 copies, groups that start and end inside blocks, a
// gap no group covers, a short last block and tails of every width, gradients over 5 decades with
// exact zeros.
TEST(Adam8bit, EverySimdBuildEqualsTheReferenceBitForBit) {
  for (const char* simd : {"scalar", "avx2", "avx512"}) {
    const std::string name = simd;
    const zt::optim::SimdPath path = name == "scalar" ? zt::optim::SimdPath::kScalar
                                     : name == "avx2" ? zt::optim::SimdPath::kAvx2
                                                      : zt::optim::SimdPath::kAvx512;
    if (!zt::optim::simd_path_supported(path)) continue;  // this CPU cannot run it
    for (bool adamw : {true, false}) {
      for (bool fp16 : {false, true}) {
        SCOPED_TRACE(std::string(simd) + (adamw ? " adamw" : " adam") + (fp16 ? " fp16" : " bf16"));
        torch::manual_seed(11);
        const int64_t block = 256, n = 7 * block + 37;
        GroupHyper h1, h2;
        h1.lr = 1e-3;
        h1.weight_decay = 0.01;
        h2.lr = 3e-4;
        h2.weight_decay = 0.1;
        h2.beta1 = 0.8;
        h2.beta2 = 0.99;
        const std::vector<zt::optim::GroupRange> groups{
            {3, 301, h1}, {301, 1000, h2}, {1013, 1500, h1}, {1600, n - 5, h2}};
        zt::optim::OptimizerSpec spec = spec8(block);
        spec.simd = simd;
        spec.adamw_mode = adamw;
        spec.min_8bit_size = 0;  // quantize this small shard too
        zt::optim::Adam8bit opt(spec);
        torch::Tensor p = torch::randn({n});
        Reference8bit ref(p, block);
        torch::Tensor half = torch::zeros({n}, fp16 ? torch::kHalf : torch::kBFloat16);
        std::vector<uint16_t> ref_half(n, 0);
        for (int64_t t = 1; t <= 6; ++t) {
          torch::Tensor g = torch::randn({n}) * torch::pow(10.0, torch::randint(-4, 1, {n}));
          g.masked_fill_(torch::rand({n}) < 0.05, 0.0);
          opt.step(p, g, groups, &half);
          ref.step(g, zt::optim::adam8bit_groups(groups, adamw, t), ref_half.data(), fp16);
        }
        const auto s = opt.state_dict();
        EXPECT_TRUE(same_bytes(p, ref.p));
        EXPECT_TRUE(same_bytes(half, ref_half));
        EXPECT_TRUE(same_bytes(s.at("exp_avg_code"), ref.mq));
        EXPECT_TRUE(same_bytes(s.at("exp_avg_sq_code"), ref.vq));
        EXPECT_TRUE(same_bytes(s.at("exp_avg_absmax"), ref.ma));
        EXPECT_TRUE(same_bytes(s.at("exp_avg_sq_absmax"), ref.va));
      }
    }
  }
}

// The SIMD encoders loop QuantCodec::max_steps() times: that bound must hold for every value the
// table encoder sees (it starts from the bucket's code and steps up at most that often).
TEST(QuantCodec, MaxStepsBoundsEveryBucket) {
  for (bool is_signed : {true, false}) {
    zt::optim::QuantCodec c(zt::optim::dynamic_map(is_signed));
    EXPECT_GE(c.max_steps(), 1);
    EXPECT_LE(c.max_steps(), 3);
    const zt::optim::kernels::QuantTables t = c.tables();
    for (uint32_t h = 0; h < 65536; h += 7) {
      for (uint32_t low : {0u, 0x7fffu, 0xffffu}) {
        const uint32_t bits = (h << 16) | low;
        float x;
        std::memcpy(&x, &bits, 4);
        if (std::isnan(x)) continue;
        EXPECT_LE(int{c.encode_by_bisection(x)} - int{t.bucket_code[h]}, c.max_steps()) << bits;
      }
    }
  }
}

// Each build of the block pass called directly (adam8bit_kernel.h), so the AVX-512 build is run
// even where Adam8bit would pick the VBMI one: random codes and absmax, and gradients and
// parameters with NaN, +-inf, +-0, subnormals and 1e30 (m and v overflow, an absmax becomes inf,
// and encode sees NaN, inf and 0 * inf), blocks of every tail width against 16 and 64, segments
// with and without a gap, all three 16-bit copies, and a next block to prefetch (Adam8bitNext,
// which must change nothing). Every output byte must be the scalar build's.
TEST(Adam8bitKernel, EveryBuildEqualsTheScalarOneOnSpecialValues) {
  using zt::optim::kernels::Adam8bitBlock;
  using Kernel = void (*)(const Adam8bitBlock&);
  std::vector<std::pair<std::string, Kernel>> builds;
  if (zt::optim::simd_path_supported(zt::optim::SimdPath::kAvx2)) {
    builds.emplace_back("avx2", &zt::optim::kernels::adam8bit_block_avx2);
  }
  if (zt::optim::simd_path_supported(zt::optim::SimdPath::kAvx512)) {
    builds.emplace_back("avx512", &zt::optim::kernels::adam8bit_block_avx512);
    if (__builtin_cpu_supports("avx512vbmi")) {
      builds.emplace_back("avx512vbmi", &zt::optim::kernels::adam8bit_block_avx512vbmi);
    }
  }
  if (builds.empty()) GTEST_SKIP() << "no SIMD build runs on this CPU";
  const zt::optim::QuantCodec sc(zt::optim::dynamic_map(true)), uc(zt::optim::dynamic_map(false));
  // A map with 64 values packed into [0.25, 0.26] (10 midpoints to a 16-bit bucket there), so
  // that max_steps > 1 and the builds take their general encode (a step loop over midpoint
  // look-ups) instead of the one-step entries of the dynamic maps.
  zt::optim::QuantMap dense_map;
  for (int i = 0; i < 96; ++i) {
    const float mag = std::pow(10.0f, -6.0f + 6.0f * static_cast<float>(i) / 95.0f);
    dense_map[i] = -mag;
    dense_map[96 + i] = mag;
  }
  for (int i = 0; i < 64; ++i) dense_map[192 + i] = 0.25f + 0.01f * static_cast<float>(i) / 63.0f;
  std::sort(dense_map.begin(), dense_map.end());
  const zt::optim::QuantCodec dense(dense_map);
  ASSERT_GT(dense.max_steps(), 1);
  ASSERT_EQ(dense.tables().bucket_step, nullptr);
  const int cluster = static_cast<int>(std::lower_bound(dense_map.begin(), dense_map.end(), 0.25f) -
                                       dense_map.begin());
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            inf,
                            -inf,
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            1e30f,
                            -1e30f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), decade(-8, 2);
  std::bernoulli_distribution special(0.02);
  int64_t blocks_run = 0;
  for (bool dense_codec : {false, true}) {
    const zt::optim::QuantCodec& m_codec = dense_codec ? dense : sc;
    const zt::optim::QuantCodec& v_codec = dense_codec ? dense : uc;
    for (int64_t n : {2048, 2047, 1000, 129, 64, 63, 17, 16, 1}) {
      for (int trial = 0; trial < 6; ++trial) {
        const auto kind = static_cast<zt::optim::kernels::HalfKind>(trial % 3);
        auto value = [&](float scale) {
          if (special(rng)) return specials[std::uniform_int_distribution<int>(0, 9)(rng)];
          return unit(rng) * scale * std::pow(10.0f, static_cast<float>(decade(rng)));
        };
        std::vector<float> param(n), grad(n);
        std::vector<uint8_t> mq(n), vq(n);
        for (int64_t i = 0; i < n; ++i) {
          param[i] = value(1.0f);
          grad[i] = trial == 5 ? unit(rng) * 1e-3f : value(1e-2f);  // 5: no special values
          mq[i] = static_cast<uint8_t>(byte(rng));
          vq[i] = static_cast<uint8_t>(byte(rng));
          if (dense_codec && trial >= 3) {
            // m and v in the packed cluster, one element at the map's top (1.0) and gradients too
            // small to move them: after the update x = m / absmax lands all over the cluster's
            // buckets, so encode takes up to max_steps steps.
            mq[i] = static_cast<uint8_t>(cluster + byte(rng) % 64);
            vq[i] = static_cast<uint8_t>(cluster + byte(rng) % 64);
            if (i == 0) mq[i] = vq[i] = 255;
            grad[i] = unit(rng) * 1e-12f;
          }
        }
        const float m_absmax0 = trial == 1 ? 0.0f : std::fabs(unit(rng)) * 1e-2f;
        const float v_absmax0 = trial == 2 ? 0.0f : std::fabs(unit(rng)) * 1e-4f;
        zt::optim::GroupHyper h1, h2;
        h1.lr = 1e-3;
        h1.weight_decay = 0.01;
        h2.lr = 3e-4;
        h2.weight_decay = 0.1;
        h2.beta2 = 0.99;
        // Trials 0-2: two elements no segment covers (absmax reads them from scratch); 3-5: the
        // segments tile the block (absmax taken in the update).
        const int64_t gap = trial < 3 ? 2 : 0;
        std::vector<zt::optim::kernels::BlockSegment> segs;
        segs.push_back({0, n / 3, zt::optim::adam_constants(h1, trial % 2 == 0, 3)});
        if (n / 3 + gap < n) {
          segs.push_back({n / 3 + gap, n, zt::optim::adam_constants(h2, trial < 3, 3)});
        }
        struct Out {
          std::vector<float> param;
          std::vector<uint8_t> mq, vq;
          std::vector<uint16_t> half;
          float ma, va;
        };
        auto run = [&](Kernel kernel) {
          Out o{param, mq, vq, std::vector<uint16_t>(n, 0xabcd), m_absmax0, v_absmax0};
          std::vector<float> ms(n), vs(n);
          Adam8bitBlock a{};
          a.param = o.param.data();
          a.grad = grad.data();
          a.m_code = o.mq.data();
          a.v_code = o.vq.data();
          a.m_absmax = &o.ma;
          a.v_absmax = &o.va;
          a.half_out = kind == zt::optim::kernels::HalfKind::kNone ? nullptr : o.half.data();
          a.half_kind = kind;
          a.n = n;
          a.segments = segs.data();
          a.num_segments = static_cast<int32_t>(segs.size());
          a.m_tables = m_codec.tables();
          a.v_tables = v_codec.tables();
          a.m_scratch = ms.data();
          a.v_scratch = vs.data();
          if (trial % 2 == 1)
            a.next = {grad.data(), param.data(), mq.data(), vq.data(), mq.data(), n};
          kernel(a);
          return o;
        };
        const Out ref = run(&zt::optim::kernels::adam8bit_block_scalar);
        for (const auto& [name, kernel] : builds) {
          SCOPED_TRACE(name + (dense_codec ? " dense map" : " dynamic maps") + " n " +
                       std::to_string(n) + " trial " + std::to_string(trial));
          const Out o = run(kernel);
          EXPECT_EQ(std::memcmp(o.param.data(), ref.param.data(), n * sizeof(float)), 0);
          EXPECT_EQ(o.mq, ref.mq);
          EXPECT_EQ(o.vq, ref.vq);
          EXPECT_EQ(o.half, ref.half);
          EXPECT_EQ(std::memcmp(&o.ma, &ref.ma, 4), 0) << o.ma << " " << ref.ma;
          EXPECT_EQ(std::memcmp(&o.va, &ref.va, 4), 0) << o.va << " " << ref.va;
          ++blocks_run;
        }
      }
    }
  }
  EXPECT_GT(blocks_run, 0);
}

// The byte planes the VBMI build looks values up in are the map's and the midpoints' bytes.
TEST(QuantCodec, BytePlanesHoldTheTablesBytes) {
  for (bool is_signed : {true, false}) {
    const zt::optim::QuantCodec c(zt::optim::dynamic_map(is_signed));
    const zt::optim::kernels::QuantTables t = c.tables();
    for (int i = 0; i < 256; ++i) {
      uint32_t map_bits = 0, mid_bits = 0;
      for (int p = 0; p < 4; ++p) {
        map_bits |= uint32_t{t.map_planes[256 * p + i]} << (8 * p);
        mid_bits |= uint32_t{t.mid_planes[256 * p + i]} << (8 * p);
      }
      float map, mid;
      std::memcpy(&map, &map_bits, 4);
      std::memcpy(&mid, &mid_bits, 4);
      EXPECT_EQ(map, t.map[i]) << i;
      EXPECT_EQ(std::memcmp(&mid, &t.mid[i], 4), 0) << i;
    }
  }
}

// The one-step encode (QuantTables::bucket_step, which the SIMD builds take for the dynamic maps)
// equals QuantCodec::encode on every bucket: at its ends, around the midpoint it holds, and on NaN.
TEST(QuantCodec, OneStepEntriesEncodeEveryBucket) {
  for (bool is_signed : {true, false}) {
    const zt::optim::QuantCodec c(zt::optim::dynamic_map(is_signed));
    const zt::optim::kernels::QuantTables t = c.tables();
    ASSERT_EQ(c.max_steps(), 1);  // the dynamic maps need one step at most
    ASSERT_NE(t.bucket_step, nullptr);
    auto one_step = [&](uint32_t bits) {
      const uint32_t entry = t.bucket_step[bits >> 16];
      const uint32_t key = (bits ^ ((bits & 0x80000000u) ? 0xffffffffu : 0u)) & 0xffffu;
      return static_cast<uint8_t>((entry & 0xff) + (key > entry >> 16 ? 1 : 0));
    };
    int64_t bad = 0, checked = 0, stepped = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      std::vector<uint32_t> lows = {0u, 1u, 0x7fffu, 0xfffeu, 0xffffu};
      const uint32_t entry = t.bucket_step[h];
      if (entry >> 16 != 0xffff) {  // a midpoint in this bucket: probe around it
        const uint32_t threshold = entry >> 16;
        for (uint32_t d : {0u, 1u}) {
          for (uint32_t key : {threshold - d, threshold + 1 + d}) {
            if (key > 0xffff) continue;
            lows.push_back((h & 0x8000u) ? key ^ 0xffffu : key);
          }
        }
      }
      for (uint32_t low : lows) {
        const uint32_t bits = h << 16 | low;
        float x;
        std::memcpy(&x, &bits, 4);
        const uint8_t want = c.encode(x);
        bad += one_step(bits) != want;
        stepped += want != (entry & 0xff);
        ++checked;
      }
    }
    EXPECT_EQ(bad, 0) << (is_signed ? "signed" : "unsigned") << " of " << checked;
    EXPECT_GT(stepped, 100);  // the steps were exercised
  }
}

}  // namespace
