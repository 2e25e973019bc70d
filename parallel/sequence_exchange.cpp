#include "parallel/sequence_exchange.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include <torch/autograd.h>

#include "base/error.h"

namespace zt::dist {
namespace {

// Uneven heads: rank j's chunk holds heads[j] heads, padded to the largest count so that the
// all-to-all moves equal chunks; the padding is dropped on arrival.
at::Tensor exchange_uneven(const at::Tensor& x, Communicator& group, bool to_heads,
                           std::optional<at::ScalarType> wire, const std::vector<int64_t>& heads) {
  ZT_CHECK(x.dim() == 4, "sequence exchange: expected (B, T, H, D), got ", x.sizes());
  const int64_t sp = group.size(), me = group.rank();
  ZT_CHECK(static_cast<int64_t>(heads.size()) == sp, "sequence exchange: ", heads.size(),
           " head counts for ", sp, " ranks");
  const int64_t most = *std::max_element(heads.begin(), heads.end());
  const int64_t b = x.size(0), t = x.size(1), d = x.size(3);
  const at::ScalarType moved = wire.value_or(x.scalar_type());
  std::vector<at::Tensor> chunks;  // (B, Tl, most, D) each
  if (to_heads) {
    const int64_t total = std::accumulate(heads.begin(), heads.end(), int64_t{0});
    ZT_CHECK(x.size(2) == total, "sequence exchange: ", x.size(2), " heads, ", total, " assigned");
    int64_t first = 0;
    for (int64_t j = 0; j < sp; ++j) {
      at::Tensor c = x.narrow(2, first, heads[j]).to(moved);
      chunks.push_back(at::constant_pad_nd(c, {0, 0, 0, most - heads[j]}));
      first += heads[j];
    }
  } else {
    ZT_CHECK(t % sp == 0, "sequence exchange: ", t, " positions do not divide over ", sp, " ranks");
    ZT_CHECK(x.size(2) == heads[me], "sequence exchange: ", x.size(2), " heads, ", heads[me],
             " assigned to rank ", me);
    for (int64_t j = 0; j < sp; ++j) {
      at::Tensor c = x.narrow(1, j * (t / sp), t / sp).to(moved);
      chunks.push_back(at::constant_pad_nd(c, {0, 0, 0, most - heads[me]}));
    }
  }
  at::Tensor send = at::stack(chunks).contiguous();  // (sp, B, Tl, most, D)
  at::Tensor recv = at::empty_like(send);
  at::Tensor send_flat = send.view({-1}), recv_flat = recv.view({-1});
  group.all_to_all(send_flat, recv_flat)->wait();
  recv = recv.to(x.scalar_type());
  if (to_heads) {
    // chunk j: rank j's positions of this rank's heads[me] heads -> (B, sp * Tl, heads[me], D)
    return recv.narrow(3, 0, heads[me]).permute({1, 0, 2, 3, 4}).reshape({b, sp * t, heads[me], d});
  }
  // chunk j: this rank's positions of rank j's heads[j] heads, joined along the heads.
  std::vector<at::Tensor> parts;
  for (int64_t j = 0; j < sp; ++j) parts.push_back(recv[j].narrow(2, 0, heads[j]));
  return at::cat(parts, 2);
}

// One all-to-all of the exchange, either way. `to_heads`: x (B, Tl, H, D) is laid out as sp
// chunks (sp, B, Tl, H/sp, D), chunk j holding rank j's heads; what arrives from rank j is its
// positions of this rank's heads, (sp, B, Tl, H/sp, D), and joins along the sequence. The other
// way lays (B, T, Hl, D) out as sp chunks of positions and joins what arrives along the heads.
at::Tensor exchange(const at::Tensor& x, Communicator& group, bool to_heads,
                    std::optional<at::ScalarType> wire, const std::vector<int64_t>& heads) {
  if (!heads.empty()) return exchange_uneven(x, group, to_heads, wire, heads);
  ZT_CHECK(x.dim() == 4, "sequence exchange: expected (B, T, H, D), got ", x.sizes());
  const int64_t sp = group.size();
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = x.size(3);
  at::Tensor send;
  if (to_heads) {
    ZT_CHECK(h % sp == 0, "sequence exchange: ", h, " heads do not divide over ", sp, " ranks");
    send = x.view({b, t, sp, h / sp, d}).permute({2, 0, 1, 3, 4});
  } else {
    ZT_CHECK(t % sp == 0, "sequence exchange: ", t, " positions do not divide over ", sp, " ranks");
    send = x.view({b, sp, t / sp, h, d}).permute({1, 0, 2, 3, 4});
  }
  send = send.to(wire.value_or(x.scalar_type())).contiguous();  // (sp, B, Tl, Hl, D)
  at::Tensor recv = at::empty_like(send);
  at::Tensor send_flat = send.view({-1}), recv_flat = recv.view({-1});
  group.all_to_all(send_flat, recv_flat)->wait();
  recv = recv.to(x.scalar_type());
  if (to_heads) {
    // chunk j: positions of rank j -> (B, sp * Tl, Hl, D)
    return recv.permute({1, 0, 2, 3, 4}).reshape({b, sp * t, h / sp, d});
  }
  // chunk j: heads of rank j -> (B, Tl, sp * Hl, D)
  return recv.permute({1, 2, 0, 3, 4}).reshape({b, t / sp, sp * h, d});
}

constexpr int64_t kNoWire = -1;

struct SequenceAllToAll : torch::autograd::Function<SequenceAllToAll> {
  // `group` outlives the graph: it is the topology's, held by the engine and the model.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            Communicator* group, bool to_heads, int64_t wire,
                            const std::vector<int64_t>& heads) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    ctx->saved_data["to_heads"] = to_heads;
    ctx->saved_data["wire"] = wire;
    ctx->saved_data["heads"] = heads;
    return exchange(x, *group, to_heads, wire_type(wire), heads);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group =
        reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
    const bool to_heads = ctx->saved_data["to_heads"].toBool();
    const int64_t wire = ctx->saved_data["wire"].toInt();
    const std::vector<int64_t> heads = ctx->saved_data["heads"].toIntVector();
    at::Tensor g = exchange(grads[0].contiguous(), *group, !to_heads, wire_type(wire), heads);
    return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }

  static std::optional<at::ScalarType> wire_type(int64_t wire) {
    if (wire == kNoWire) return std::nullopt;
    return static_cast<at::ScalarType>(wire);
  }
};

int64_t wire_code(std::optional<at::ScalarType> wire) {
  return wire ? static_cast<int64_t>(*wire) : kNoWire;
}

}  // namespace

at::Tensor sequence_to_heads(const at::Tensor& x, Communicator& group,
                             std::optional<at::ScalarType> wire,
                             const std::vector<int64_t>& heads) {
  if (group.size() == 1) return x;
  return SequenceAllToAll::apply(x, &group, true, wire_code(wire), heads);
}

at::Tensor heads_to_sequence(const at::Tensor& x, Communicator& group,
                             std::optional<at::ScalarType> wire,
                             const std::vector<int64_t>& heads) {
  if (group.size() == 1) return x;
  return SequenceAllToAll::apply(x, &group, false, wire_code(wire), heads);
}

std::vector<int64_t> kv_heads_per_rank(int64_t kv_heads, int64_t parts) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < parts; ++r) out.push_back(kv_heads / parts + (r < kv_heads % parts));
  return out;
}

at::Tensor gather_sequence(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  const int64_t sp = group.size();
  at::Tensor send = x.to(at::kFloat).contiguous();
  std::vector<int64_t> shape = {sp};
  for (int64_t s : x.sizes()) shape.push_back(s);
  at::Tensor recv = at::empty(shape, send.options());
  at::Tensor recv_flat = recv.view({-1});
  group.all_gather(send.view({-1}), recv_flat)->wait();
  // (sp, B, Tl, ...) -> (B, sp * Tl, ...)
  std::vector<int64_t> joined = {x.size(0), sp * x.size(1)};
  for (int64_t i = 2; i < x.dim(); ++i) joined.push_back(x.size(i));
  return recv.movedim(0, 1).reshape(joined).to(x.scalar_type());
}

}  // namespace zt::dist
