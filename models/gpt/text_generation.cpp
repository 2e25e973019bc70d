#include "models/gpt/text_generation.h"

#include "base/error.h"

namespace zt::models {

std::vector<int64_t> generate(GptImpl& model, std::vector<int64_t> ids,
                              const GenerationOptions& o) {
  ZT_CHECK(!ids.empty(), "generate: the prompt encodes to no tokens");
  ZT_CHECK(o.top_k >= 1, "generate: top_k must be >= 1, got ", o.top_k);
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const int64_t window = model.shape().max_seq_len;
  // The prompt goes where the model is; the logits come back to draw from the seeded host
  // generator, so a seed samples the same text on every device.
  const c10::Device device = model.parameters().front().device();
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - window);
    std::vector<int64_t> ctx(ids.begin() + start, ids.end());
    torch::Tensor input = torch::tensor(ctx, torch::kLong).view({1, -1}).to(device);
    torch::Tensor logits = model.forward(input, torch::ones_like(input))
                               .select(1, input.size(1) - 1)
                               .squeeze(0)
                               .to(torch::kFloat)
                               .cpu();
    int64_t next;
    if (o.top_k == 1) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto [values, indices] = logits.div(o.temperature).topk(std::min(o.top_k, logits.size(0)));
      torch::Tensor pick = torch::multinomial(torch::softmax(values, 0), 1, false, gen);
      next = indices[pick.item<int64_t>()].item<int64_t>();
    }
    ids.push_back(next);
    if (next == o.eos_id) break;
  }
  return ids;
}

}  // namespace zt::models
