// ai.vitdeploy::RelPosAttention, an ONNX Runtime custom op (CPU): SAM's attention with the decomposed
// relative-position term, fused and exact.
//
// Inputs are those of vitdeploy's folded form (`--target onnxruntime-cpu`, which feeds them to
// com.microsoft.MultiHeadAttention): per token and head,
//   q_aug = [q * scale, rel_h (grid_h values), rel_w (grid_w values)]
//   k_aug = [k, one-hot(row of the key), one-hot(column of the key)]
//   v
// and the output is MultiHeadAttention's: softmax(q_aug . k_aug) v. Knowing the one-hot layout (the
// Python side swaps a node in only after checking that constant, see vitdeploy/runtime/forms/relpos_kernel.py),
// this kernel computes q . k over head_dim values only and adds rel_h[key row] + rel_w[key column] to
// the scores of each tile of queries itself, instead of a Q.K product head_dim + grid_h + grid_w wide.
// Same arithmetic in float32: scores, exact max-subtracted softmax, P.V.
//
// Paths, for tokens a multiple of 32 and head_dim a multiple of 16 up to 80: on x86-64 (CPU features checked at
// run time) AVX-512F (16-lane FMA micro-kernels, tiles of 64 or 32 queries) and AVX2+FMA (8-lane
// micro-kernels, 4 queries x 16 keys of scores in registers, tiles of 16 queries, P.V in 64-key blocks so
// V stays in L1); on arm64 NEON (the AVX2 path's tiling with 4-lane vectors); all read K as 32-key panels.
// Other shapes or CPUs: a portable loop (same results, slower). The node's `isa` attribute caps the path (0
// portable, 1 AVX2, 2 AVX-512, 3 NEON; on arm64 any vector request takes NEON; the
// Python side sets it from the CPU features it sees, which VITDEPLOY_CPU_MASK can hide); the kernel
// never takes a path the CPU lacks.
// Attributes: num_heads, grid_h, grid_w, isa (default 2). Shapes: q_aug, k_aug (B, N, heads*(D+grid_h+grid_w)),
// v (B, N, heads*D) -> (B, N, heads*D), N = grid_h * grid_w.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define VITDEPLOY_X86 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define VITDEPLOY_NEON 1
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace {

// The node's isa attribute caps the path: 0 portable; on x86-64 1 AVX2, 2 AVX-512; any vector request (1, 2, 3)
// takes NEON on arm64, and 3 (NEON, written on an arm64 machine) takes the widest x86 path.
enum Isa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };

struct Problem {
    const float* q_aug;
    const float* k_aug;
    const float* v;
    float* out;
    int64_t batch, tokens, heads, head_dim, grid_h, grid_w, aug;
    int64_t tile;                  // queries per task
    std::vector<float>* packed_k;  // per (batch, head): fast path: N/32 panels of [D x 32]; portable: [N x D]
    std::vector<float>* packed_v;  // per (batch, head): [N x D]
    Isa isa;                       // the path taken
};

const float* q_row(const Problem& p, int64_t b, int64_t n, int64_t h) {
    return p.q_aug + ((b * p.tokens + n) * p.heads + h) * p.aug;
}

// Per (batch, head): K and V out of the interleaved layout, K in the layout the kernel reads.
void pack(const Problem& p, int64_t bh) {
    const int64_t b = bh / p.heads, h = bh % p.heads, n_tok = p.tokens, d_head = p.head_dim;
    std::vector<float>& k = p.packed_k[bh];
    std::vector<float>& v = p.packed_v[bh];
    k.resize(static_cast<size_t>(n_tok * d_head));
    v.resize(static_cast<size_t>(n_tok * d_head));
    for (int64_t n = 0; n < n_tok; ++n) {
        const float* src = p.k_aug + ((b * n_tok + n) * p.heads + h) * p.aug;
        for (int64_t d = 0; d < d_head; ++d) {
            const size_t at = p.isa != kPortable ? static_cast<size_t>((n / 32) * 32 * d_head + d * 32 + n % 32)
                                     : static_cast<size_t>(n * d_head + d);
            k[at] = src[d];
        }
        std::memcpy(&v[static_cast<size_t>(n * d_head)], p.v + ((b * n_tok + n) * p.heads + h) * d_head,
                    static_cast<size_t>(d_head) * sizeof(float));
    }
}

// Adds rel_h[key row] + rel_w[key column] to one query's scores; returns their maximum.
float add_rel_pos(const Problem& p, const float* q, float* row) {
    const float* rel_h = q + p.head_dim;
    const float* rel_w = rel_h + p.grid_h;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t kh = 0; kh < p.grid_h; ++kh) {
        float* seg = row + kh * p.grid_w;
        const float a = rel_h[kh];
        for (int64_t kw = 0; kw < p.grid_w; ++kw) {
            seg[kw] += a + rel_w[kw];
            top = std::max(top, seg[kw]);
        }
    }
    return top;
}

void portable_tile(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    const std::vector<float>& k = p.packed_k[b * p.heads + h];
    const std::vector<float>& v = p.packed_v[b * p.heads + h];
    std::vector<float> row(static_cast<size_t>(p.tokens));
    std::vector<float> acc(static_cast<size_t>(p.head_dim));
    for (int64_t i = 0; i < rows; ++i) {
        const float* q = q_row(p, b, q0 + i, h);
        for (int64_t j = 0; j < p.tokens; ++j) {
            float s = 0.0f;
            for (int64_t d = 0; d < p.head_dim; ++d) s += q[d] * k[static_cast<size_t>(j * p.head_dim + d)];
            row[static_cast<size_t>(j)] = s;
        }
        const float top = add_rel_pos(p, q, row.data());
        float sum = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < p.tokens; ++j) {
            const float e = std::exp(row[static_cast<size_t>(j)] - top);
            sum += e;
            for (int64_t d = 0; d < p.head_dim; ++d) acc[static_cast<size_t>(d)] += e * v[static_cast<size_t>(j * p.head_dim + d)];
        }
        float* dst = p.out + ((b * p.tokens + q0 + i) * p.heads + h) * p.head_dim;
        for (int64_t d = 0; d < p.head_dim; ++d) dst[d] = acc[static_cast<size_t>(d)] / sum;
    }
}

// head_dim is 16, 32, 48, 64 or 80 on the vector paths (shape_fits).
template <template <int> class Tile>
void by_head_dim(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    switch (p.head_dim / 16) {
        case 1: Tile<1>::run(p, b, h, q0, rows); break;
        case 2: Tile<2>::run(p, b, h, q0, rows); break;
        case 3: Tile<3>::run(p, b, h, q0, rows); break;
        case 4: Tile<4>::run(p, b, h, q0, rows); break;
        default: Tile<5>::run(p, b, h, q0, rows); break;
    }
}
// The vector paths' per-thread scratch for one tile: scores (rows x N), P.V (rows x head_dim), 1/row sums.
struct TileScratch {
    std::vector<float> scores, o, inv;
};
TileScratch& tile_scratch(const Problem& p, int64_t rows) {
    thread_local TileScratch s;
    s.scores.resize(static_cast<size_t>(rows * p.tokens));
    s.o.resize(static_cast<size_t>(rows * p.head_dim));
    s.inv.resize(static_cast<size_t>(rows));
    return s;
}

// The tile's output rows: P.V scaled by each row's 1/sum, into (B, N, heads*D).
void store_rows(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows, const TileScratch& s) {
    for (int64_t i = 0; i < rows; ++i) {
        float* dst = p.out + ((b * p.tokens + q0 + i) * p.heads + h) * p.head_dim;
        for (int64_t d = 0; d < p.head_dim; ++d) dst[d] = s.o[static_cast<size_t>(i * p.head_dim + d)] * s.inv[static_cast<size_t>(i)];
    }
}

#ifdef VITDEPLOY_X86
#define VITDEPLOY_AVX512 __attribute__((target("avx512f")))

// S[rows x N] = Q[rows x D] (row stride qs) . K^T, K as N/32 panels of [D x 32]; rows % 8 == 0, D = 16*C.
template <int C>
VITDEPLOY_AVX512 void qk_panels(const float* q, int64_t qs, const float* kp, int64_t n, float* s, int64_t rows) {
    constexpr int d_head = 16 * C;
    for (int64_t j = 0; j < n; j += 32) {
        const float* panel = kp + j * d_head;
        for (int64_t i = 0; i < rows; i += 8) {
            __m512 a0[8], a1[8];
            for (int r = 0; r < 8; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
            for (int d = 0; d < d_head; ++d) {
                const __m512 b0 = _mm512_loadu_ps(panel + d * 32), b1 = _mm512_loadu_ps(panel + d * 32 + 16);
                for (int r = 0; r < 8; ++r) {
                    const __m512 a = _mm512_set1_ps(q[(i + r) * qs + d]);
                    a0[r] = _mm512_fmadd_ps(a, b0, a0[r]);
                    a1[r] = _mm512_fmadd_ps(a, b1, a1[r]);
                }
            }
            for (int r = 0; r < 8; ++r) {
                _mm512_storeu_ps(s + (i + r) * n + j, a0[r]);
                _mm512_storeu_ps(s + (i + r) * n + j + 16, a1[r]);
            }
        }
    }
}

// O[rows x 16*C] = P[rows x N] . V[N x 16*C]; rows % 4 == 0.
template <int C>
VITDEPLOY_AVX512 void pv_rows(const float* p, int64_t n, const float* v, float* o, int64_t rows) {
    for (int64_t i = 0; i < rows; i += 4) {
        __m512 acc[4][C];
        for (auto& row : acc)
            for (auto& x : row) x = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; ++j) {
            __m512 vv[C];
            for (int c = 0; c < C; ++c) vv[c] = _mm512_loadu_ps(v + j * 16 * C + 16 * c);
            for (int r = 0; r < 4; ++r) {
                const __m512 a = _mm512_set1_ps(p[(i + r) * n + j]);
                for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(a, vv[c], acc[r][c]);
            }
        }
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < C; ++c) _mm512_storeu_ps(o + (i + r) * 16 * C + 16 * c, acc[r][c]);
    }
}

// exp(x) for x <= 0 (Cephes single-precision polynomial), 16 lanes.
VITDEPLOY_AVX512 __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, fx);
}

// add_rel_pos with 16-wide vectors (grid_w a multiple of 16).
VITDEPLOY_AVX512 float add_rel_pos16(const Problem& p, const float* q, float* row) {
    const float* rel_h = q + p.head_dim;
    const float* rel_w = rel_h + p.grid_h;
    __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t kh = 0; kh < p.grid_h; ++kh) {
        const __m512 a = _mm512_set1_ps(rel_h[kh]);
        float* seg = row + kh * p.grid_w;
        for (int64_t kw = 0; kw < p.grid_w; kw += 16) {
            const __m512 x = _mm512_add_ps(_mm512_loadu_ps(seg + kw), _mm512_add_ps(a, _mm512_loadu_ps(rel_w + kw)));
            _mm512_storeu_ps(seg + kw, x);
            top = _mm512_max_ps(top, x);
        }
    }
    return _mm512_reduce_max_ps(top);
}

// One tile of queries on the AVX-512 path; C = head_dim / 16.
template <int C>
VITDEPLOY_AVX512 void fast_tile_c(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    TileScratch& s = tile_scratch(p, rows);
    const int64_t bh = b * p.heads + h;
    qk_panels<C>(q_row(p, b, q0, h), p.heads * p.aug, p.packed_k[bh].data(), p.tokens, s.scores.data(), rows);
    const bool wide = p.grid_w % 16 == 0;
    for (int64_t i = 0; i < rows; ++i) {
        float* row = s.scores.data() + i * p.tokens;
        const float* q = q_row(p, b, q0 + i, h);
        const __m512 top = _mm512_set1_ps(wide ? add_rel_pos16(p, q, row) : add_rel_pos(p, q, row));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < p.tokens; j += 16) {
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), top));
            _mm512_storeu_ps(row + j, e);
            sum = _mm512_add_ps(sum, e);
        }
        s.inv[static_cast<size_t>(i)] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    pv_rows<C>(s.scores.data(), p.tokens, p.packed_v[bh].data(), s.o.data(), rows);
    store_rows(p, b, h, q0, rows, s);
}

#define VITDEPLOY_AVX2 __attribute__((target("avx2,fma")))

// S[rows x N] = Q[rows x D] (row stride qs) . K^T, K as N/32 panels of [D x 32]; each panel as two halves of
// 16 keys, 4 query rows at a time (8 accumulators: AVX2 has 16 vector registers); rows % 4 == 0.
template <int C>
VITDEPLOY_AVX2 void qk_panels_avx2(const float* q, int64_t qs, const float* kp, int64_t n, float* s, int64_t rows) {
    constexpr int d_head = 16 * C;
    for (int64_t j = 0; j < n; j += 32) {
        const float* panel = kp + j * d_head;
        for (int half = 0; half < 32; half += 16) {
            for (int64_t i = 0; i < rows; i += 4) {
                __m256 a0[4], a1[4];
                for (int r = 0; r < 4; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
                for (int d = 0; d < d_head; ++d) {
                    const __m256 b0 = _mm256_loadu_ps(panel + d * 32 + half), b1 = _mm256_loadu_ps(panel + d * 32 + half + 8);
                    for (int r = 0; r < 4; ++r) {
                        const __m256 a = _mm256_broadcast_ss(q + (i + r) * qs + d);
                        a0[r] = _mm256_fmadd_ps(a, b0, a0[r]);
                        a1[r] = _mm256_fmadd_ps(a, b1, a1[r]);
                    }
                }
                for (int r = 0; r < 4; ++r) {
                    _mm256_storeu_ps(s + (i + r) * n + j + half, a0[r]);
                    _mm256_storeu_ps(s + (i + r) * n + j + half + 8, a1[r]);
                }
            }
        }
    }
}

// Two rows of O (stride os) += P (stride n) . V for `keys` keys, over W vectors (8 floats each) of V's columns
// (stride vs); `first`: O starts at zero.
template <int W>
VITDEPLOY_AVX2 void pv_block_avx2(const float* p, int64_t n, const float* v, int64_t vs, float* o, int64_t os, int64_t keys,
                                  bool first) {
    __m256 acc[2][W];
    for (int r = 0; r < 2; ++r)
        for (int w = 0; w < W; ++w) acc[r][w] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(o + r * os + 8 * w);
    for (int64_t j = 0; j < keys; ++j) {
        __m256 vv[W];
        for (int w = 0; w < W; ++w) vv[w] = _mm256_loadu_ps(v + j * vs + 8 * w);
        for (int r = 0; r < 2; ++r) {
            const __m256 a = _mm256_broadcast_ss(p + r * n + j);
            for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(a, vv[w], acc[r][w]);
        }
    }
    for (int r = 0; r < 2; ++r)
        for (int w = 0; w < W; ++w) _mm256_storeu_ps(o + r * os + 8 * w, acc[r][w]);
}

// O[rows x 16*C] = P[rows x N] . V[N x 16*C], in blocks of kPvKeys keys so a block of V (16 KB at head size 64)
// stays in L1 while every row of the tile uses it: without blocking, V (1 MB per head at 4096 tokens) streams
// from L3 once per pair of rows on CPUs with a 512 KB L2. 32-column blocks, a 16-column one for odd C; rows % 2 == 0.
constexpr int64_t kPvKeys = 64;
template <int C>
VITDEPLOY_AVX2 void pv_rows_avx2(const float* p, int64_t n, const float* v, float* o, int64_t rows) {
    constexpr int width = 16 * C;
    for (int64_t j0 = 0; j0 < n; j0 += kPvKeys) {
        const int64_t keys = std::min(kPvKeys, n - j0);
        for (int64_t i = 0; i < rows; i += 2) {
            int c = 0;
            for (; c + 32 <= width; c += 32)
                pv_block_avx2<4>(p + i * n + j0, n, v + j0 * width + c, width, o + i * width + c, width, keys, j0 == 0);
            if (c < width)
                pv_block_avx2<2>(p + i * n + j0, n, v + j0 * width + c, width, o + i * width + c, width, keys, j0 == 0);
        }
    }
}

// exp(x) for x <= 0 (the same Cephes polynomial as exp16), 8 lanes; 2^n built in the exponent bits.
VITDEPLOY_AVX2 __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(pow2));
}

VITDEPLOY_AVX2 float reduce_max8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

VITDEPLOY_AVX2 float reduce_add8(__m256 v) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// add_rel_pos with 8-wide vectors (grid_w a multiple of 8).
VITDEPLOY_AVX2 float add_rel_pos8(const Problem& p, const float* q, float* row) {
    const float* rel_h = q + p.head_dim;
    const float* rel_w = rel_h + p.grid_h;
    __m256 top = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t kh = 0; kh < p.grid_h; ++kh) {
        const __m256 a = _mm256_set1_ps(rel_h[kh]);
        float* seg = row + kh * p.grid_w;
        for (int64_t kw = 0; kw < p.grid_w; kw += 8) {
            const __m256 x = _mm256_add_ps(_mm256_loadu_ps(seg + kw), _mm256_add_ps(a, _mm256_loadu_ps(rel_w + kw)));
            _mm256_storeu_ps(seg + kw, x);
            top = _mm256_max_ps(top, x);
        }
    }
    return reduce_max8(top);
}

// One tile of queries on the AVX2 path; C = head_dim / 16.
template <int C>
VITDEPLOY_AVX2 void avx2_tile_c(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    TileScratch& s = tile_scratch(p, rows);
    const int64_t bh = b * p.heads + h;
    qk_panels_avx2<C>(q_row(p, b, q0, h), p.heads * p.aug, p.packed_k[bh].data(), p.tokens, s.scores.data(), rows);
    const bool wide = p.grid_w % 8 == 0;
    for (int64_t i = 0; i < rows; ++i) {
        float* row = s.scores.data() + i * p.tokens;
        const float* q = q_row(p, b, q0 + i, h);
        const __m256 top = _mm256_set1_ps(wide ? add_rel_pos8(p, q, row) : add_rel_pos(p, q, row));
        __m256 sum = _mm256_setzero_ps();
        for (int64_t j = 0; j < p.tokens; j += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), top));
            _mm256_storeu_ps(row + j, e);
            sum = _mm256_add_ps(sum, e);
        }
        s.inv[static_cast<size_t>(i)] = 1.0f / reduce_add8(sum);
    }
    pv_rows_avx2<C>(s.scores.data(), p.tokens, p.packed_v[bh].data(), s.o.data(), rows);
    store_rows(p, b, h, q0, rows, s);
}

template <int C>
struct Avx512Tile {
    static void run(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) { fast_tile_c<C>(p, b, h, q0, rows); }
};
template <int C>
struct Avx2Tile {
    static void run(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) { avx2_tile_c<C>(p, b, h, q0, rows); }
};

Isa cpu_best_isa() {
    if (__builtin_cpu_supports("avx512f")) return kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return kAvx2;
    return kPortable;
}

void vector_tile(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    if (p.isa == kAvx512) {
        by_head_dim<Avx512Tile>(p, b, h, q0, rows);
    } else {
        by_head_dim<Avx2Tile>(p, b, h, q0, rows);
    }
}
#endif

#ifdef VITDEPLOY_NEON
// The AVX2 path's tiling with 4-lane NEON vectors (every arm64 CPU has them; 32 vector registers).

// S[rows x N] = Q[rows x D] (row stride qs) . K^T, K as N/32 panels of [D x 32]; each panel as two halves of
// 16 keys, 4 query rows at a time (16 accumulators); rows % 4 == 0.
template <int C>
void qk_panels_neon(const float* q, int64_t qs, const float* kp, int64_t n, float* s, int64_t rows) {
    constexpr int d_head = 16 * C;
    for (int64_t j = 0; j < n; j += 32) {
        const float* panel = kp + j * d_head;
        for (int half = 0; half < 32; half += 16) {
            for (int64_t i = 0; i < rows; i += 4) {
                float32x4_t acc[4][4];
                for (auto& row : acc)
                    for (auto& x : row) x = vdupq_n_f32(0.0f);
                for (int d = 0; d < d_head; ++d) {
                    float32x4_t b[4];
                    for (int k = 0; k < 4; ++k) b[k] = vld1q_f32(panel + d * 32 + half + 4 * k);
                    for (int r = 0; r < 4; ++r) {
                        const float32x4_t a = vdupq_n_f32(q[(i + r) * qs + d]);
                        for (int k = 0; k < 4; ++k) acc[r][k] = vfmaq_f32(acc[r][k], a, b[k]);
                    }
                }
                for (int r = 0; r < 4; ++r)
                    for (int k = 0; k < 4; ++k) vst1q_f32(s + (i + r) * n + j + half + 4 * k, acc[r][k]);
            }
        }
    }
}

// Two rows of O (stride os) += P (stride n) . V for `keys` keys, over W vectors (4 floats each) of V's columns
// (stride vs); `first`: O starts at zero.
template <int W>
void pv_block_neon(const float* p, int64_t n, const float* v, int64_t vs, float* o, int64_t os, int64_t keys, bool first) {
    float32x4_t acc[2][W];
    for (int r = 0; r < 2; ++r)
        for (int w = 0; w < W; ++w) acc[r][w] = first ? vdupq_n_f32(0.0f) : vld1q_f32(o + r * os + 4 * w);
    for (int64_t j = 0; j < keys; ++j) {
        float32x4_t vv[W];
        for (int w = 0; w < W; ++w) vv[w] = vld1q_f32(v + j * vs + 4 * w);
        for (int r = 0; r < 2; ++r) {
            const float32x4_t a = vdupq_n_f32(p[r * n + j]);
            for (int w = 0; w < W; ++w) acc[r][w] = vfmaq_f32(acc[r][w], a, vv[w]);
        }
    }
    for (int r = 0; r < 2; ++r)
        for (int w = 0; w < W; ++w) vst1q_f32(o + r * os + 4 * w, acc[r][w]);
}

// O[rows x 16*C] = P[rows x N] . V[N x 16*C] in blocks of 64 keys (V's block stays in L1, as on AVX2); 32-column
// blocks, a 16-column one for odd C; rows % 2 == 0.
template <int C>
void pv_rows_neon(const float* p, int64_t n, const float* v, float* o, int64_t rows) {
    constexpr int width = 16 * C;
    constexpr int64_t block = 64;
    for (int64_t j0 = 0; j0 < n; j0 += block) {
        const int64_t keys = std::min(block, n - j0);
        for (int64_t i = 0; i < rows; i += 2) {
            int c = 0;
            for (; c + 32 <= width; c += 32)
                pv_block_neon<8>(p + i * n + j0, n, v + j0 * width + c, width, o + i * width + c, width, keys, j0 == 0);
            if (c < width)
                pv_block_neon<4>(p + i * n + j0, n, v + j0 * width + c, width, o + i * width + c, width, keys, j0 == 0);
        }
    }
}

// exp(x) for x <= 0 (the same Cephes polynomial as exp8/exp16), 4 lanes; 2^n built in the exponent bits.
float32x4_t exp4(float32x4_t x) {
    x = vmaxq_f32(x, vdupq_n_f32(-87.3f));
    const float32x4_t fx = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    x = vfmsq_f32(x, fx, vdupq_n_f32(0.693359375f));
    x = vfmsq_f32(x, fx, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t y = vdupq_n_f32(1.9875691500E-4f);
    y = vfmaq_f32(vdupq_n_f32(1.3981999507E-3f), y, x);
    y = vfmaq_f32(vdupq_n_f32(8.3334519073E-3f), y, x);
    y = vfmaq_f32(vdupq_n_f32(4.1665795894E-2f), y, x);
    y = vfmaq_f32(vdupq_n_f32(1.6666665459E-1f), y, x);
    y = vfmaq_f32(vdupq_n_f32(5.0000001201E-1f), y, x);
    y = vfmaq_f32(vaddq_f32(x, vdupq_n_f32(1.0f)), y, vmulq_f32(x, x));
    const int32x4_t pow2 = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(fx), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(pow2));
}

// add_rel_pos with 4-wide vectors (grid_w a multiple of 4).
float add_rel_pos4(const Problem& p, const float* q, float* row) {
    const float* rel_h = q + p.head_dim;
    const float* rel_w = rel_h + p.grid_h;
    float32x4_t top = vdupq_n_f32(-std::numeric_limits<float>::infinity());
    for (int64_t kh = 0; kh < p.grid_h; ++kh) {
        const float32x4_t a = vdupq_n_f32(rel_h[kh]);
        float* seg = row + kh * p.grid_w;
        for (int64_t kw = 0; kw < p.grid_w; kw += 4) {
            const float32x4_t x = vaddq_f32(vld1q_f32(seg + kw), vaddq_f32(a, vld1q_f32(rel_w + kw)));
            vst1q_f32(seg + kw, x);
            top = vmaxq_f32(top, x);
        }
    }
    return vmaxvq_f32(top);
}

// One tile of queries on the NEON path; C = head_dim / 16.
template <int C>
void neon_tile_c(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    TileScratch& s = tile_scratch(p, rows);
    const int64_t bh = b * p.heads + h;
    qk_panels_neon<C>(q_row(p, b, q0, h), p.heads * p.aug, p.packed_k[bh].data(), p.tokens, s.scores.data(), rows);
    const bool wide = p.grid_w % 4 == 0;
    for (int64_t i = 0; i < rows; ++i) {
        float* row = s.scores.data() + i * p.tokens;
        const float* q = q_row(p, b, q0 + i, h);
        const float32x4_t top = vdupq_n_f32(wide ? add_rel_pos4(p, q, row) : add_rel_pos(p, q, row));
        float32x4_t sum = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < p.tokens; j += 4) {
            const float32x4_t e = exp4(vsubq_f32(vld1q_f32(row + j), top));
            vst1q_f32(row + j, e);
            sum = vaddq_f32(sum, e);
        }
        s.inv[static_cast<size_t>(i)] = 1.0f / vaddvq_f32(sum);
    }
    pv_rows_neon<C>(s.scores.data(), p.tokens, p.packed_v[bh].data(), s.o.data(), rows);
    store_rows(p, b, h, q0, rows, s);
}

template <int C>
struct NeonTile {
    static void run(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) { neon_tile_c<C>(p, b, h, q0, rows); }
};

void vector_tile(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    by_head_dim<NeonTile>(p, b, h, q0, rows);
}
#endif

#if !defined(VITDEPLOY_X86) && !defined(VITDEPLOY_NEON)
void vector_tile(const Problem&, int64_t, int64_t, int64_t, int64_t) {}
#endif

bool shape_fits(int64_t tokens, int64_t head_dim) { return tokens % 32 == 0 && head_dim % 16 == 0 && head_dim <= 80; }

// The path a problem takes: the widest the CPU has, no wider than requested, portable for other shapes.
Isa choose_path(int64_t tokens, int64_t head_dim, int64_t requested) {
    if (!shape_fits(tokens, head_dim) || requested <= kPortable) return kPortable;
#if defined(VITDEPLOY_NEON)
    return kNeon;  // every arm64 CPU has NEON (ASIMD): any vector request takes it
#elif defined(VITDEPLOY_X86)
    const Isa best = cpu_best_isa();
    return static_cast<Isa>(std::min<int64_t>(best, std::min<int64_t>(requested, kAvx512)));  // a NEON cap (3) caps nothing
#else
    return kPortable;
#endif
}

// Queries per task. AVX2: 16, so the tile's score block (16 x 4096 floats = 256 KB for ViT-B's global blocks)
// stays within a 512 KB L2 (AMD Zen); measured on an EPYC, 16 to 32 made no difference beyond noise.
int64_t tile_rows(Isa isa, int64_t tokens) {
    if (isa == kAvx512) return tokens % 64 == 0 ? 64 : 32;
    return 16;  // AVX2 and NEON
}

void pack_task(void* data, size_t i) { pack(*static_cast<const Problem*>(data), static_cast<int64_t>(i)); }

void tile_task(void* data, size_t i) {
    const Problem& p = *static_cast<const Problem*>(data);
    const int64_t tiles = (p.tokens + p.tile - 1) / p.tile;
    const int64_t task = static_cast<int64_t>(i), bh = task / tiles, q0 = (task % tiles) * p.tile;
    const int64_t rows = std::min(p.tile, p.tokens - q0);
    if (p.isa != kPortable) {
        vector_tile(p, bh / p.heads, bh % p.heads, q0, rows);
    } else {
        portable_tile(p, bh / p.heads, bh % p.heads, q0, rows);
    }
}

struct RelPosAttentionKernel {
    RelPosAttentionKernel(const OrtApi&, const OrtKernelInfo* info) {
        Ort::ConstKernelInfo ki(info);
        heads_ = ki.GetAttribute<int64_t>("num_heads");
        grid_h_ = ki.GetAttribute<int64_t>("grid_h");
        grid_w_ = ki.GetAttribute<int64_t>("grid_w");
        try {
            isa_ = ki.GetAttribute<int64_t>("isa");
        } catch (const Ort::Exception&) {  // optional: the widest path the CPU has
            isa_ = kAvx512;
        }
    }

    void Compute(OrtKernelContext* context) {
        Ort::KernelContext ctx(context);
        const Ort::ConstValue q = ctx.GetInput(0), k = ctx.GetInput(1), v = ctx.GetInput(2);
        const std::vector<int64_t> qs = q.GetTensorTypeAndShapeInfo().GetShape();
        const std::vector<int64_t> ks = k.GetTensorTypeAndShapeInfo().GetShape();
        const std::vector<int64_t> vs = v.GetTensorTypeAndShapeInfo().GetShape();
        if (qs.size() != 3 || ks != qs || vs.size() != 3 || vs[0] != qs[0] || vs[1] != qs[1] || vs[2] % heads_ != 0 ||
            qs[2] % heads_ != 0) {
            throw Ort::Exception("RelPosAttention: expected q_aug, k_aug (B, N, heads*A) and v (B, N, heads*D)", ORT_INVALID_ARGUMENT);
        }
        Problem p{};
        p.batch = qs[0];
        p.tokens = qs[1];
        p.heads = heads_;
        p.head_dim = vs[2] / heads_;
        p.grid_h = grid_h_;
        p.grid_w = grid_w_;
        p.aug = qs[2] / heads_;
        if (p.tokens != grid_h_ * grid_w_ || p.aug != p.head_dim + grid_h_ + grid_w_) {
            throw Ort::Exception("RelPosAttention: N must be grid_h*grid_w and the q/k head size head_dim+grid_h+grid_w",
                                 ORT_INVALID_ARGUMENT);
        }
        p.isa = choose_path(p.tokens, p.head_dim, isa_);
        p.tile = tile_rows(p.isa, p.tokens);
        Ort::UnownedValue out = ctx.GetOutput(0, vs);
        p.q_aug = q.GetTensorData<float>();
        p.k_aug = k.GetTensorData<float>();
        p.v = v.GetTensorData<float>();
        p.out = out.GetTensorMutableData<float>();
        std::vector<std::vector<float>> packed_k(static_cast<size_t>(p.batch * p.heads)), packed_v(packed_k.size());
        p.packed_k = packed_k.data();
        p.packed_v = packed_v.data();
        ctx.ParallelFor(pack_task, packed_k.size(), 0, &p);
        const size_t tiles = static_cast<size_t>((p.tokens + p.tile - 1) / p.tile);
        ctx.ParallelFor(tile_task, packed_k.size() * tiles, 0, &p);
    }

    int64_t heads_, grid_h_, grid_w_, isa_;
};

struct RelPosAttentionOp : Ort::CustomOpBase<RelPosAttentionOp, RelPosAttentionKernel> {
    void* CreateKernel(const OrtApi& api, const OrtKernelInfo* info) const { return new RelPosAttentionKernel(api, info); }
    const char* GetName() const { return "RelPosAttention"; }
    const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
    size_t GetInputTypeCount() const { return 3; }
    ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
    size_t GetOutputTypeCount() const { return 1; }
    ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace

extern "C" {

// Entry point ONNX Runtime calls for SessionOptions.register_custom_ops_library / RegisterCustomOpsLibrary.
__attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                                                const OrtApiBase* api_base) {
    static std::once_flag init;
    static RelPosAttentionOp op;
    static Ort::CustomOpDomain* domain = nullptr;
    const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
    if (api == nullptr) {
        return nullptr;  // an older ONNX Runtime than the headers: nothing registered, the session reports the missing op
    }
    Ort::InitApi(api);
    try {
        std::call_once(init, [] {
            domain = new Ort::CustomOpDomain("ai.vitdeploy");  // lives as long as the process: sessions keep pointers
            domain->Add(&op);
        });
        Ort::UnownedSessionOptions(options).Add(*domain);
    } catch (const Ort::Exception& e) {
        return api->CreateStatus(ORT_FAIL, e.what());
    }
    return nullptr;
}

// The path (0 portable, 1 AVX2, 2 AVX-512, 3 NEON) a problem takes on this CPU with the node attribute isa=requested
// (for the swap decision, reports and tests).
__attribute__((visibility("default"))) int VitdeployRelPosPath(int64_t tokens, int64_t head_dim, int64_t requested) {
    return static_cast<int>(choose_path(tokens, head_dim, requested));
}
}
