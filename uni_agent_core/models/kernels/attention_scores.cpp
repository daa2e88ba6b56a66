// The score block of the bf16 attention backward on a CPU with AMX, in one pass per tile.
//
// Built on first use by `uni_agent_core/models/cpu_kernels.py`, which says why it exists and
// when it runs. For one block of queries of one batch element (G key/value heads, R query rows
// per head, E visible keys), it writes two bf16 matrices [G, R, E]:
//
//   probs       = exp(scale * q.k - lse)           (0 where the mask hides the key)
//   grad_scores = probs * (dO.v - delta) * scale
//
// Both products take bf16 operands and accumulate in float32 (oneDNN's brgemm ukernel, AMX
// tiles); the exp and the softmax correction run on the float32 results while they are in
// cache, and only the bf16 results reach memory. That is the arithmetic of the float32 products
// the Python path computes: the operands are bf16 values either way.
//
// Keys and values are packed once per call of the backward (`pack_keys`): brgemm's AMX layout
// takes B in column tiles of kColTile.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

namespace {

using at::BFloat16;
using Vec = at::vec::Vectorized<float>;

constexpr int64_t kRowTile = 32;  // query rows per brgemm call and per task of a thread
constexpr int64_t kColTile = 64;  // keys per packed column tile (brgemm's widest packed B)

bool available() { return at::native::cpublas::could_pack(at::kBFloat16); }

// keys [G, N, D] bf16 -> [G, T, D, kColTile] bf16: the transposed keys in brgemm's packed
// layout for AMX, T column tiles (N rounded up with zero keys). That layout is VNNI: tile t
// holds, for each pair of dimensions (2j, 2j+1), the 64 keys' pairs side by side, so as 32-bit
// words it is the transpose of the keys' words ([64, D/2] -> [D/2, 64]). One transpose, 3x
// faster than `cpublas::pack` per tile, and the same bytes.
at::Tensor pack_keys(const at::Tensor& keys) {
  TORCH_CHECK(keys.dim() == 3 && keys.scalar_type() == at::kBFloat16 && keys.size(2) % 2 == 0,
              "pack_keys takes [G, N, D] bf16 keys with D even, got ", keys.sizes(), " ",
              keys.scalar_type());
  const int64_t heads = keys.size(0), n = keys.size(1), d = keys.size(2);
  const int64_t tiles = (n + kColTile - 1) / kColTile;
  at::Tensor padded = at::zeros({heads, tiles * kColTile, d}, keys.options());
  padded.narrow(1, 0, n).copy_(keys);
  return padded.view(at::kInt)
      .view({heads, tiles, kColTile, d / 2})
      .transpose(2, 3)
      .contiguous()
      .view(at::kBFloat16)
      .view({heads, tiles, d, kColTile});
}

// One block: query and grad_out [G, R, D] (rows contiguous), lse and delta [G, R] float32,
// visible [R / groups, >= E] bool (row r belongs to query r / groups), the keys from
// `masked_from` on may be hidden; probs and grad_scores [G, R, E] bf16, written.
void attention_grad_scores(const at::Tensor& query, const at::Tensor& keys_packed,
                           const at::Tensor& grad_out, const at::Tensor& values_packed,
                           const at::Tensor& lse, const at::Tensor& delta,
                           const at::Tensor& visible, int64_t masked_from, int64_t groups,
                           double scale, at::Tensor& probs, at::Tensor& grad_scores) {
  const int64_t heads = query.size(0), rows = query.size(1), d = query.size(2);
  const int64_t end = probs.size(2);
  const int64_t cols = (end + kColTile - 1) / kColTile * kColTile;
  TORCH_CHECK(query.scalar_type() == at::kBFloat16 && grad_out.scalar_type() == at::kBFloat16 &&
                  probs.scalar_type() == at::kBFloat16 &&
                  grad_scores.scalar_type() == at::kBFloat16 &&
                  lse.scalar_type() == at::kFloat && delta.scalar_type() == at::kFloat &&
                  visible.scalar_type() == at::kBool,
              "attention_grad_scores: bf16 rows and results, float32 lse and delta");
  TORCH_CHECK(keys_packed.size(0) == heads && keys_packed.size(2) == d &&
                  keys_packed.size(1) * kColTile >= end && values_packed.sizes() == keys_packed.sizes(),
              "attention_grad_scores: packed keys and values of another shape");
  TORCH_CHECK(query.stride(2) == 1 && query.stride(1) == d && grad_out.stride(2) == 1 &&
                  grad_out.stride(1) == d && lse.stride(1) == 1 && delta.stride(1) == 1 &&
                  visible.stride(1) == 1 && keys_packed.is_contiguous() &&
                  values_packed.is_contiguous() && probs.is_contiguous() &&
                  grad_scores.is_contiguous(),
              "attention_grad_scores: rows must be contiguous");

  const BFloat16* q = query.data_ptr<BFloat16>();
  const BFloat16* dout = grad_out.data_ptr<BFloat16>();
  const BFloat16* keys = keys_packed.data_ptr<BFloat16>();
  const BFloat16* values = values_packed.data_ptr<BFloat16>();
  const int64_t packed_head = keys_packed.stride(0);
  const float* lse_data = lse.data_ptr<float>();
  const float* delta_data = delta.data_ptr<float>();
  const bool* visible_data = visible.data_ptr<bool>();
  BFloat16* probs_data = probs.data_ptr<BFloat16>();
  BFloat16* grad_data = grad_scores.data_ptr<BFloat16>();
  const float fscale = static_cast<float>(scale);
  const int64_t row_tiles = (rows + kRowTile - 1) / kRowTile;

  at::parallel_for(0, heads * row_tiles, 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(kRowTile * cols), grad(kRowTile * cols);
    for (int64_t task = first; task < last; ++task) {
      const int64_t h = task / row_tiles, r0 = (task % row_tiles) * kRowTile;
      const int64_t m = std::min(kRowTile, rows - r0);
      const BFloat16* q_rows = q + h * query.stride(0) + r0 * d;
      const BFloat16* dout_rows = dout + h * grad_out.stride(0) + r0 * d;
      for (int64_t c0 = 0; c0 < cols; c0 += kColTile) {
        const int64_t tile = h * packed_head + c0 * d;
        at::native::cpublas::brgemm(m, kColTile, d, d, kColTile, cols, false, q_rows,
                                    keys + tile, scores.data() + c0, true);
        at::native::cpublas::brgemm(m, kColTile, d, d, kColTile, cols, false, dout_rows,
                                    values + tile, grad.data() + c0, true);
      }
      for (int64_t i = 0; i < m; ++i) {
        const int64_t row = r0 + i;
        const Vec offset(lse_data[h * lse.stride(0) + row]);
        const Vec correction(delta_data[h * delta.stride(0) + row]);
        const Vec vscale(fscale);
        float* p = scores.data() + i * cols;
        float* g = grad.data() + i * cols;
        at::vec::map([&](Vec s) { return (s * vscale - offset).exp_u20(); }, p, p, end);
        if (masked_from < end) {
          const bool* seen = visible_data + (row / groups) * visible.stride(0);
          for (int64_t c = masked_from; c < end; ++c) {
            if (!seen[c]) p[c] = 0.f;
          }
        }
        at::vec::map2([&](Vec pv, Vec gv) { return pv * (gv - correction) * vscale; }, g, p, g,
                      end);
        at::vec::convert(p, probs_data + (h * rows + row) * end, end);
        at::vec::convert(g, grad_data + (h * rows + row) * end, end);
      }
    }
    at::native::cpublas::brgemm_release();
  });
}

}  // namespace

TORCH_LIBRARY(agent_rl_cpu, m) {
  m.def("available() -> bool", &available);
  m.def("pack_keys(Tensor keys) -> Tensor", &pack_keys);
  m.def(
      "attention_grad_scores(Tensor query, Tensor keys_packed, Tensor grad_out, "
      "Tensor values_packed, Tensor lse, Tensor delta, Tensor visible, int masked_from, "
      "int groups, float scale, Tensor(a!) probs, Tensor(b!) grad_scores) -> ()",
      &attention_grad_scores);
}
