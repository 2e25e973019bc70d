#include "parallel/communicator.h"

#include "base/error.h"

namespace zt::dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

void Communicator::unsupported(const char* operation) const {
  ZT_THROW("communication backend '", backend(), "' does not support ", operation);
}

WorkPtr Communicator::all_reduce(at::Tensor&, ReduceOp) {
  unsupported("all_reduce");
}
WorkPtr Communicator::reduce_scatter(const at::Tensor&, at::Tensor&, ReduceOp) {
  unsupported("reduce_scatter");
}
WorkPtr Communicator::all_gather(const at::Tensor&, at::Tensor&) {
  unsupported("all_gather");
}
WorkPtr Communicator::all_to_all(const at::Tensor&, at::Tensor&) {
  unsupported("all_to_all");
}
WorkPtr Communicator::broadcast(at::Tensor&, int) {
  unsupported("broadcast");
}
WorkPtr Communicator::barrier() {
  unsupported("barrier");
}
std::shared_ptr<Communicator> Communicator::split(const std::vector<int>&) {
  unsupported("split");
}

}  // namespace zt::dist
