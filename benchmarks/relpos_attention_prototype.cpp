// Measurement prototype, not part of vitdeploy: how fast could ONE fused kernel run SAM ViT-B's global
// attention with the decomposed rel-pos term, exactly, on this CPU? (Issue 7: ONNX Runtime's best exact
// form, the folded MultiHeadAttention, is what benchmarks/bench_global_attention.py times.)
//
// Same inputs as vitdeploy's folded form (--target onnxruntime-cpu): q_aug = [q*scale, rel_h, rel_w]
// and k_aug = [k, one-hot rows] per head, v. The kernel reads q*scale, rel_h, rel_w from q_aug and k
// from k_aug (it knows the one-hot part), so Q.K is 64 wide instead of 192; per head and per tile of 64
// queries: S = Q K^T (hand-written AVX-512 FMA micro-kernel, K packed in 32-key panels), S += rel_h
// (per key row) + rel_w (per key column), exact softmax, O = P V (AVX-512 micro-kernel). Float32 all
// the way; checked against a float64 reference on three queries of head 0.
//
// Build and run (x86-64 with AVX-512; 2 threads like the benchmarks):
//   g++ -O3 -march=native -std=c++17 -pthread benchmarks/relpos_attention_prototype.cpp -o /tmp/relpos && /tmp/relpos
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr int kHeads = 12, kTokensHW = 64, kTokens = kTokensHW * kTokensHW, kHeadDim = 64, kTile = 64;
constexpr int kAug = kHeadDim + 2 * kTokensHW;  // q_aug / k_aug width per head
constexpr int kThreads = 2;

// S[rows x N] = Q[rows x 64] (row stride qs) . K^T, K packed as N/32 panels of [64 x 32].
void qk(const float* q, int qs, const float* kp, int n, float* s, int rows) {
  for (int j = 0; j < n; j += 32) {
    const float* panel = kp + static_cast<size_t>(j) * kHeadDim;
    for (int i = 0; i < rows; i += 8) {
      __m512 a0[8], a1[8];
      for (int r = 0; r < 8; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
      for (int d = 0; d < kHeadDim; ++d) {
        __m512 b0 = _mm512_loadu_ps(panel + d * 32), b1 = _mm512_loadu_ps(panel + d * 32 + 16);
        for (int r = 0; r < 8; ++r) {
          __m512 a = _mm512_set1_ps(q[static_cast<size_t>(i + r) * qs + d]);
          a0[r] = _mm512_fmadd_ps(a, b0, a0[r]);
          a1[r] = _mm512_fmadd_ps(a, b1, a1[r]);
        }
      }
      for (int r = 0; r < 8; ++r) {
        _mm512_storeu_ps(s + static_cast<size_t>(i + r) * n + j, a0[r]);
        _mm512_storeu_ps(s + static_cast<size_t>(i + r) * n + j + 16, a1[r]);
      }
    }
  }
}

// O[rows x 64] = P[rows x N] . V[N x 64].
void pv(const float* p, int n, const float* v, float* o, int rows) {
  for (int i = 0; i < rows; i += 4) {
    __m512 acc[4][4];
    for (auto& row : acc) for (auto& x : row) x = _mm512_setzero_ps();
    for (int j = 0; j < n; ++j) {
      const float* vr = v + static_cast<size_t>(j) * kHeadDim;
      __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16), v2 = _mm512_loadu_ps(vr + 32), v3 = _mm512_loadu_ps(vr + 48);
      for (int r = 0; r < 4; ++r) {
        __m512 a = _mm512_set1_ps(p[static_cast<size_t>(i + r) * n + j]);
        acc[r][0] = _mm512_fmadd_ps(a, v0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, v1, acc[r][1]);
        acc[r][2] = _mm512_fmadd_ps(a, v2, acc[r][2]);
        acc[r][3] = _mm512_fmadd_ps(a, v3, acc[r][3]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + static_cast<size_t>(i + r) * kHeadDim + c * 16, acc[r][c]);
  }
}

// exp(x) for x <= 0 (Cephes polynomial, ~1 ulp), 16 lanes.
__m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  for (float c : {1.3981999507E-3f, 8.3334519073E-3f, 4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f})
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(c));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, fx);
}

template <typename Fn>
void parallel(int count, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&] { for (int i; (i = next++) < count;) fn(i); });
  for (auto& th : pool) th.join();
}

void relpos_attention(const float* q_aug, const float* k_aug, const float* v, float* out) {
  std::vector<std::vector<float>> kp(kHeads), vh(kHeads);
  parallel(kHeads, [&](int h) {  // per head: K packed in 32-key panels, V contiguous
    kp[h].resize(static_cast<size_t>(kTokens) * kHeadDim);
    vh[h].resize(static_cast<size_t>(kTokens) * kHeadDim);
    for (int n = 0; n < kTokens; ++n) {
      const float* k = k_aug + static_cast<size_t>(n) * kHeads * kAug + h * kAug;
      for (int d = 0; d < kHeadDim; ++d) kp[h][static_cast<size_t>(n / 32) * 32 * kHeadDim + d * 32 + n % 32] = k[d];
      std::memcpy(&vh[h][static_cast<size_t>(n) * kHeadDim], v + static_cast<size_t>(n) * kHeads * kHeadDim + h * kHeadDim, kHeadDim * sizeof(float));
    }
  });
  constexpr int tiles = kTokens / kTile;
  parallel(kHeads * tiles, [&](int task) {
    thread_local std::vector<float> s(static_cast<size_t>(kTile) * kTokens), o(static_cast<size_t>(kTile) * kHeadDim);
    const int h = task / tiles, q0 = (task % tiles) * kTile;
    const float* qa = q_aug + static_cast<size_t>(q0) * kHeads * kAug + h * kAug;
    qk(qa, kHeads * kAug, kp[h].data(), kTokens, s.data(), kTile);
    float inv[kTile];
    for (int i = 0; i < kTile; ++i) {
      const float* rel_h = qa + static_cast<size_t>(i) * kHeads * kAug + kHeadDim;
      const float* rel_w = rel_h + kTokensHW;
      float* row = s.data() + static_cast<size_t>(i) * kTokens;
      __m512 mx = _mm512_set1_ps(-INFINITY);
      for (int kh = 0; kh < kTokensHW; ++kh) {
        __m512 a = _mm512_set1_ps(rel_h[kh]);
        for (int kw = 0; kw < kTokensHW; kw += 16) {
          float* at = row + kh * kTokensHW + kw;
          __m512 x = _mm512_add_ps(_mm512_loadu_ps(at), _mm512_add_ps(a, _mm512_loadu_ps(rel_w + kw)));
          _mm512_storeu_ps(at, x);
          mx = _mm512_max_ps(mx, x);
        }
      }
      __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
      for (int j = 0; j < kTokens; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), m));
        _mm512_storeu_ps(row + j, e);
        sum = _mm512_add_ps(sum, e);
      }
      inv[i] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    pv(s.data(), kTokens, vh[h].data(), o.data(), kTile);
    for (int i = 0; i < kTile; ++i) {
      float* dst = out + static_cast<size_t>(q0 + i) * kHeads * kHeadDim + h * kHeadDim;
      for (int d = 0; d < kHeadDim; ++d) dst[d] = o[static_cast<size_t>(i) * kHeadDim + d] * inv[i];
    }
  });
}

}  // namespace

int main() {
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  std::vector<float> qa(static_cast<size_t>(kTokens) * kHeads * kAug), ka(qa.size());
  std::vector<float> v(static_cast<size_t>(kTokens) * kHeads * kHeadDim), out(v.size());
  for (auto& x : qa) x = normal(gen);
  for (int n = 0; n < kTokens; ++n)
    for (int h = 0; h < kHeads; ++h)
      for (int d = 0; d < kHeadDim; ++d) qa[(static_cast<size_t>(n) * kHeads + h) * kAug + d] *= 0.125f;  // q * scale
  for (auto& x : ka) x = normal(gen);  // the kernel reads only k's 64 values per head
  for (auto& x : v) x = normal(gen);
  std::vector<double> times;
  for (int rep = 0; rep < 7; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    relpos_attention(qa.data(), ka.data(), v.data(), out.data());
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> sorted(times.begin() + 1, times.end());  // first run: warm-up
  std::sort(sorted.begin(), sorted.end());
  std::printf("fused rel-pos attention prototype, one ViT-B global block, %d threads: median %.0f ms (min %.0f, max %.0f)\n",
              kThreads, sorted[sorted.size() / 2], sorted.front(), sorted.back());
  double worst = 0;
  for (int qi : {0, 1234, kTokens - 1}) {  // float64 reference, head 0
    std::vector<double> sc(kTokens);
    double mx = -1e300, sum = 0;
    const float* q = &qa[static_cast<size_t>(qi) * kHeads * kAug];
    for (int j = 0; j < kTokens; ++j) {
      double acc = q[kHeadDim + j / kTokensHW] + q[kHeadDim + kTokensHW + j % kTokensHW];
      for (int d = 0; d < kHeadDim; ++d) acc += static_cast<double>(q[d]) * ka[static_cast<size_t>(j) * kHeads * kAug + d];
      sc[j] = acc;
      mx = std::max(mx, acc);
    }
    for (auto& x : sc) sum += (x = std::exp(x - mx));
    for (int d = 0; d < kHeadDim; ++d) {
      double o = 0;
      for (int j = 0; j < kTokens; ++j) o += sc[j] * v[static_cast<size_t>(j) * kHeads * kHeadDim + d];
      worst = std::max(worst, std::abs(o / sum - out[static_cast<size_t>(qi) * kHeads * kHeadDim + d]));
    }
  }
  std::printf("max-abs error vs float64 on 3 queries of head 0: %.2e\n", worst);
  return worst < 1e-4 ? 0 : 1;
}
