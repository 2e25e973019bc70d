#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cstdint>

#include <torch/autograd.h>

#include "base/error.h"

namespace zt::dist {
namespace {

at::Tensor summed(const at::Tensor& x, Communicator& group) {
  at::Tensor y = x.contiguous().clone();
  group.all_reduce(y)->wait();
  return y;
}

Communicator* group_of(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

// `group` outlives the graph: it is the topology's, held by the engine and the model.
struct EnterTensorGroup : torch::autograd::Function<EnterTensorGroup> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            Communicator* group) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {summed(grads[0], *group_of(ctx)), at::Tensor()};
  }
};

struct LeaveTensorGroup : torch::autograd::Function<LeaveTensorGroup> {
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const at::Tensor& x,
                            Communicator* group) {
    return summed(x, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor enter_tensor_group(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return EnterTensorGroup::apply(x, &group);
}

at::Tensor leave_tensor_group(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return LeaveTensorGroup::apply(x, &group);
}

std::vector<int64_t> split_sizes(int64_t size, int64_t parts, int64_t groups) {
  ZT_CHECK(parts >= 1 && groups >= 1 && size % groups == 0, "tensor split: ", size,
           " features do not form ", groups, " equal groups");
  std::vector<int64_t> out;
  for (int64_t r = 0; r < parts; ++r) {
    out.push_back((groups / parts + (r < groups % parts ? 1 : 0)) * (size / groups));
  }
  return out;
}

int64_t split_offset(const std::vector<int64_t>& sizes, int r) {
  int64_t at = 0;
  for (int i = 0; i < r; ++i) at += sizes[static_cast<size_t>(i)];
  return at;
}

std::vector<std::vector<int64_t>> gather_sizes(const std::vector<int64_t>& mine,
                                               Communicator& group) {
  const int64_t n = static_cast<int64_t>(mine.size()), parts = group.size();
  std::vector<std::vector<int64_t>> out(mine.size());
  if (n == 0) return out;
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor send = at::tensor(mine, opts).to(group.device());
  at::Tensor recv = at::empty({parts * n}, send.options());
  group.all_gather(send, recv)->wait();
  const at::Tensor all = recv.cpu().view({parts, n});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < parts; ++r) out[i].push_back(all[r][i].item<int64_t>());
  }
  return out;
}

std::vector<std::vector<std::string>> gather_names(const std::vector<std::string>& mine,
                                                   Communicator& group) {
  // Each name travels as its characters, padded to the longest name of any rank.
  std::vector<int64_t> lengths;
  for (const auto& name : mine) lengths.push_back(static_cast<int64_t>(name.size()));
  const auto all_lengths = gather_sizes(lengths, group);
  int64_t longest = 0;
  for (const auto& per_rank : all_lengths) {
    for (int64_t n : per_rank) longest = std::max(longest, n);
  }
  std::vector<int64_t> chars(mine.size() * static_cast<size_t>(longest), 0);
  for (size_t i = 0; i < mine.size(); ++i) {
    for (size_t c = 0; c < mine[i].size(); ++c) {
      chars[i * static_cast<size_t>(longest) + c] = static_cast<unsigned char>(mine[i][c]);
    }
  }
  const auto all_chars = gather_sizes(chars, group);
  std::vector<std::vector<std::string>> out(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    for (int r = 0; r < group.size(); ++r) {
      std::string name;
      for (int64_t c = 0; c < all_lengths[i][static_cast<size_t>(r)]; ++c) {
        name.push_back(
            static_cast<char>(all_chars[i * static_cast<size_t>(longest) + static_cast<size_t>(c)]
                                       [static_cast<size_t>(r)]));
      }
      out[i].push_back(std::move(name));
    }
  }
  return out;
}

at::Tensor join_slices(const at::Tensor& part, int64_t dim, const std::vector<int64_t>& slices,
                       Communicator& group) {
  const int64_t n = group.size();
  ZT_CHECK(static_cast<int64_t>(slices.size()) == n && part.size(dim) == slices[group.rank()],
           "join_slices: this rank's extent ", part.size(dim), " along dimension ", dim,
           " is not its slice of ", slices.size(), " ranks");
  if (n == 1) return part.detach().clone();
  const int64_t most = *std::max_element(slices.begin(), slices.end());
  at::Tensor mine = part.detach().movedim(dim, 0);
  if (mine.size(0) < most) {
    std::vector<int64_t> pad_shape = mine.sizes().vec();
    pad_shape[0] = most - mine.size(0);
    mine = at::cat({mine, at::zeros(pad_shape, mine.options())});
  }
  mine = mine.contiguous();
  std::vector<int64_t> shape = mine.sizes().vec();
  shape.insert(shape.begin(), n);
  at::Tensor all = at::empty(shape, mine.options());
  at::Tensor flat = all.view({-1});
  group.all_gather(mine.view({-1}), flat)->wait();
  std::vector<at::Tensor> pieces;
  for (int64_t r = 0; r < n; ++r) pieces.push_back(all[r].narrow(0, 0, slices[r]));
  return at::cat(pieces).movedim(0, dim).contiguous();
}

void check_same_on_group(const at::Tensor& t, Communicator& group, const char* what) {
  if (group.size() == 1) return;
  const at::Tensor flat = t.detach().to(at::kCPU, at::kLong).contiguous().view(-1);
  // Integer arithmetic wraps the same way on every rank, so equal inputs give equal sums.
  const at::Tensor weights = at::arange(1, flat.numel() + 1, flat.options());
  const int64_t sum = flat.numel() == 0 ? 0 : (flat * weights).sum().item<int64_t>();
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor hi =
      at::tensor({t.dim(), static_cast<int64_t>(t.numel()), sum}, opts).to(group.device());
  at::Tensor lo = hi.clone();
  group.all_reduce(hi, ReduceOp::kMax)->wait();
  group.all_reduce(lo, ReduceOp::kMin)->wait();
  ZT_CHECK(at::equal(hi.cpu(), lo.cpu()), "tensor parallelism: the ", what, " differ across the ",
           group.size(), " ranks of a tensor group (rank ", group.rank(),
           " of it); every rank of a tensor group must read the same batch");
}

}  // namespace zt::dist
