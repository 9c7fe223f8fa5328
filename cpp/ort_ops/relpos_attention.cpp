// ai.vitdeploy::RelPosAttention, an ONNX Runtime custom op (CPU): SAM's attention with the decomposed
// relative-position term, fused and exact.
//
// Inputs are those of vitdeploy's folded form (`--target onnxruntime-cpu`, which feeds them to
// com.microsoft.MultiHeadAttention): per token and head,
//   q_aug = [q * scale, rel_h (grid_h values), rel_w (grid_w values)]
//   k_aug = [k, one-hot(row of the key), one-hot(column of the key)]
//   v
// and the output is MultiHeadAttention's: softmax(q_aug . k_aug) v. Knowing the one-hot layout (the
// Python side swaps a node in only after checking that constant, see vitdeploy/runtime/fused_attention.py),
// this kernel computes q . k over head_dim values only and adds rel_h[key row] + rel_w[key column] to
// the scores of each tile of queries itself, instead of a Q.K product head_dim + grid_h + grid_w wide.
// Same arithmetic in float32: scores, exact max-subtracted softmax, P.V.
//
// Fast path (x86-64 with AVX-512F, checked at run time): tokens a multiple of 32, head_dim a multiple of
// 16 up to 80; hand-written FMA micro-kernels over 32-key panels of K, tiles of 64 (or 32) queries, the
// tile's score block kept in L2. Other shapes or CPUs: a portable loop (same results, slower).
// Attributes: num_heads, grid_h, grid_w. Shapes: q_aug, k_aug (B, N, heads*(D+grid_h+grid_w)),
// v (B, N, heads*D) -> (B, N, heads*D), N = grid_h * grid_w.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define VITDEPLOY_X86 1
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Problem {
    const float* q_aug;
    const float* k_aug;
    const float* v;
    float* out;
    int64_t batch, tokens, heads, head_dim, grid_h, grid_w, aug;
    int64_t tile;                  // queries per task
    std::vector<float>* packed_k;  // per (batch, head): fast path: N/32 panels of [D x 32]; portable: [N x D]
    std::vector<float>* packed_v;  // per (batch, head): [N x D]
    bool fast;
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
            const size_t at = p.fast ? static_cast<size_t>((n / 32) * 32 * d_head + d * 32 + n % 32)
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
    thread_local std::vector<float> scores, o, inv;
    scores.resize(static_cast<size_t>(rows * p.tokens));
    o.resize(static_cast<size_t>(rows * p.head_dim));
    inv.resize(static_cast<size_t>(rows));
    const int64_t bh = b * p.heads + h;
    qk_panels<C>(q_row(p, b, q0, h), p.heads * p.aug, p.packed_k[bh].data(), p.tokens, scores.data(), rows);
    const bool wide = p.grid_w % 16 == 0;
    for (int64_t i = 0; i < rows; ++i) {
        float* row = scores.data() + i * p.tokens;
        const float* q = q_row(p, b, q0 + i, h);
        const __m512 top = _mm512_set1_ps(wide ? add_rel_pos16(p, q, row) : add_rel_pos(p, q, row));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < p.tokens; j += 16) {
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), top));
            _mm512_storeu_ps(row + j, e);
            sum = _mm512_add_ps(sum, e);
        }
        inv[static_cast<size_t>(i)] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    pv_rows<C>(scores.data(), p.tokens, p.packed_v[bh].data(), o.data(), rows);
    for (int64_t i = 0; i < rows; ++i) {
        float* dst = p.out + ((b * p.tokens + q0 + i) * p.heads + h) * p.head_dim;
        for (int64_t d = 0; d < p.head_dim; ++d) dst[d] = o[static_cast<size_t>(i * p.head_dim + d)] * inv[static_cast<size_t>(i)];
    }
}

void fast_tile(const Problem& p, int64_t b, int64_t h, int64_t q0, int64_t rows) {
    switch (p.head_dim / 16) {  // fast_path_fits: head_dim is 16, 32, 48, 64 or 80
        case 1: fast_tile_c<1>(p, b, h, q0, rows); break;
        case 2: fast_tile_c<2>(p, b, h, q0, rows); break;
        case 3: fast_tile_c<3>(p, b, h, q0, rows); break;
        case 4: fast_tile_c<4>(p, b, h, q0, rows); break;
        default: fast_tile_c<5>(p, b, h, q0, rows); break;
    }
}

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }
#else
bool cpu_has_avx512() { return false; }
void fast_tile(const Problem&, int64_t, int64_t, int64_t, int64_t) {}
#endif

bool fast_path_fits(int64_t tokens, int64_t head_dim) {
    return cpu_has_avx512() && tokens % 32 == 0 && head_dim % 16 == 0 && head_dim <= 80;
}

void pack_task(void* data, size_t i) { pack(*static_cast<const Problem*>(data), static_cast<int64_t>(i)); }

void tile_task(void* data, size_t i) {
    const Problem& p = *static_cast<const Problem*>(data);
    const int64_t tiles = (p.tokens + p.tile - 1) / p.tile;
    const int64_t task = static_cast<int64_t>(i), bh = task / tiles, q0 = (task % tiles) * p.tile;
    const int64_t rows = std::min(p.tile, p.tokens - q0);
    if (p.fast) {
        fast_tile(p, bh / p.heads, bh % p.heads, q0, rows);
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
        p.fast = fast_path_fits(p.tokens, p.head_dim);
        p.tile = p.fast ? (p.tokens % 64 == 0 ? 64 : 32) : 16;
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

    int64_t heads_, grid_h_, grid_w_;
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

// Whether this CPU takes the AVX-512 path for a given problem (for reports and tests).
__attribute__((visibility("default"))) int VitdeployRelPosFastPath(int64_t tokens, int64_t head_dim) {
    return fast_path_fits(tokens, head_dim) ? 1 : 0;
}
}
