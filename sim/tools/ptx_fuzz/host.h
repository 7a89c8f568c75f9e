// The CUDA built-ins of the fuzzer's kernels, for the host (the reference side).
//
// The fuzzer (gen.py) writes CUDA C that NVRTC compiles for the GPU (its PTX
// runs on the simulator's executor) and g++ compiles for the host with this
// header instead of cuda_fp16.h/cuda_bf16.h.  Each built-in is written here
// from CUDA's documentation (the Math API and intrinsics pages), never from
// the executor: directed roundings under fesetround (build with
// -frounding-math), f16/bf16 results rounded once from the exact value (an
// error-free sum, TwoSum, when the double result is not exact), warp
// collectives as a rendezvous of std::threads, one thread per CUDA thread.
#pragma once
#include <cfenv>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#define __global__
#define __device__
#define __forceinline__ inline

struct fz_dim3 { unsigned x, y, z; };
extern thread_local fz_dim3 threadIdx;
extern fz_dim3 blockDim;

template <class To, class From> inline To fz_bits(From f) {
    To t;
    memcpy(&t, &f, sizeof t);
    return t;
}
inline unsigned __float_as_uint(float f) { return fz_bits<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return fz_bits<float>(u); }
inline long long __double_as_longlong(double d) { return fz_bits<long long>(d); }
inline double __longlong_as_double(long long u) { return fz_bits<double>(u); }

// ------------------------------------------------------------------ integers
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int n = 0; n < 4; ++n) r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
inline unsigned __vadd2(unsigned a, unsigned b) {
    return ((a + b) & 0xffffu) | (((a >> 16) + (b >> 16)) << 16);
}
inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 32; i += 8) r |= (((a >> i) - (b >> i)) & 0xffu) << i;
    return r;
}
inline unsigned __vabsdiffu4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 32; i += 8) {
        const unsigned x = (a >> i) & 0xff, y = (b >> i) & 0xff;
        r |= (x > y ? x - y : y - x) << i;
    }
    return r;
}
inline unsigned __vmaxs2(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 32; i += 16) {
        const int16_t x = (int16_t)(a >> i), y = (int16_t)(b >> i);
        r |= (unsigned)(uint16_t)(x > y ? x : y) << i;
    }
    return r;
}
inline unsigned __vminu4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 32; i += 8) {
        const unsigned x = (a >> i) & 0xff, y = (b >> i) & 0xff;
        r |= (x < y ? x : y) << i;
    }
    return r;
}

// ------------------------------------------------------------ float rounding
// A GPU's f32 arithmetic and conversions give the canonical NaN 0x7fffffff (its
// sign positive, which copysign shows); x86's default NaN is negative.  f64 NaNs
// are left as they come (their bits are not compared, and no f64 sign is copied).
inline float fz_canon(float r) { return r != r ? fz_bits<float>(0x7fffffffu) : r; }
inline double fz_canon(double r) { return r; }
template <class T> inline T fz_canon(T r) { return r; }

// One operation under a rounding mode: m 0 nearest, 1 toward zero, 2 down, 3 up.
template <class F> inline auto fz_round(int m, F f) {
    static const int modes[4] = {FE_TONEAREST, FE_TOWARDZERO, FE_DOWNWARD, FE_UPWARD};
    const int old = fegetround();
    fesetround(modes[m]);
    auto r = f();
    fesetround(old);
    return fz_canon(r);
}
#define FZ_OP2(name, T, m, expr)                                   \
    inline T name(T a, T b) {                                      \
        volatile T x = a, y = b;                                   \
        return fz_round(m, [&] { volatile T r = (expr); return (T)r; }); \
    }
#define FZ_ROUNDINGS2(stem, T, expr) \
    FZ_OP2(stem##_rn, T, 0, expr) FZ_OP2(stem##_rz, T, 1, expr) \
    FZ_OP2(stem##_rd, T, 2, expr) FZ_OP2(stem##_ru, T, 3, expr)
FZ_ROUNDINGS2(__fadd, float, x + y)
FZ_ROUNDINGS2(__fsub, float, x - y)
FZ_ROUNDINGS2(__fmul, float, x * y)
FZ_ROUNDINGS2(__fdiv, float, x / y)
FZ_ROUNDINGS2(__dadd, double, x + y)
FZ_ROUNDINGS2(__dsub, double, x - y)
FZ_ROUNDINGS2(__dmul, double, x * y)
FZ_ROUNDINGS2(__ddiv, double, x / y)
#define FZ_OP1(name, T, m, expr)                                   \
    inline T name(T a) {                                           \
        volatile T x = a;                                          \
        return fz_round(m, [&] { volatile T r = (expr); return (T)r; }); \
    }
#define FZ_ROUNDINGS1(stem, T, expr) \
    FZ_OP1(stem##_rn, T, 0, expr) FZ_OP1(stem##_rz, T, 1, expr) \
    FZ_OP1(stem##_rd, T, 2, expr) FZ_OP1(stem##_ru, T, 3, expr)
FZ_ROUNDINGS1(__fsqrt, float, sqrtf(x))
FZ_ROUNDINGS1(__frcp, float, 1.0f / x)
FZ_ROUNDINGS1(__dsqrt, double, sqrt(x))
FZ_ROUNDINGS1(__drcp, double, 1.0 / x)
#define FZ_FMA(name, T, m, fn)                                     \
    inline T name(T a, T b, T c) {                                 \
        volatile T x = a, y = b, z = c;                            \
        return fz_round(m, [&] { volatile T r = fn(x, y, z); return (T)r; }); \
    }
FZ_FMA(__fmaf_rn, float, 0, fmaf) FZ_FMA(__fmaf_rz, float, 1, fmaf)
FZ_FMA(__fmaf_rd, float, 2, fmaf) FZ_FMA(__fmaf_ru, float, 3, fmaf)
FZ_FMA(__fma_rn, double, 0, fma) FZ_FMA(__fma_rz, double, 1, fma)
FZ_FMA(__fma_rd, double, 2, fma) FZ_FMA(__fma_ru, double, 3, fma)
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN: 0

// ------------------------------------------------------------- conversions
// Float to integer: rounded in mode m, saturated to the destination's range; NaN is
// 0 -- or the destination's top bit alone from a double or into 64 bits (what the
// GPU answers: docs/validation.md's ptx-vs-gpu runs; CUDA's headers document the
// 64-bit case).
template <class I> inline I fz_to_int(double v, int m, bool wide_nan) {
    if (v != v) return wide_nan ? (I)((unsigned long long)1 << (8 * sizeof(I) - 1)) : (I)0;
    const double r = m == 0 ? nearbyint(v) : m == 1 ? trunc(v) : m == 2 ? floor(v) : ceil(v);
    const long double lo = (long double)std::numeric_limits<I>::min();
    const long double hi = (long double)std::numeric_limits<I>::max();
    if ((long double)r <= lo) return std::numeric_limits<I>::min();
    if ((long double)r >= hi) return std::numeric_limits<I>::max();
    return (I)r;
}
#define FZ_F2I(stem, F, I, wide)                                                          \
    inline I stem##_rn(F v) { return fz_to_int<I>(v, 0, wide); }                         \
    inline I stem##_rz(F v) { return fz_to_int<I>(v, 1, wide); }                         \
    inline I stem##_rd(F v) { return fz_to_int<I>(v, 2, wide); }                         \
    inline I stem##_ru(F v) { return fz_to_int<I>(v, 3, wide); }
FZ_F2I(__float2int, float, int, false)
FZ_F2I(__float2uint, float, unsigned, false)
FZ_F2I(__float2ll, float, long long, true)
FZ_F2I(__float2ull, float, unsigned long long, true)
FZ_F2I(__double2int, double, int, true)
FZ_F2I(__double2uint, double, unsigned, true)
FZ_F2I(__double2ll, double, long long, true)
FZ_F2I(__double2ull, double, unsigned long long, true)
#define FZ_CONV(stem, From, To)                                                          \
    inline To stem##_rn(From v) { volatile From x = v; return fz_round(0, [&] { volatile To r = (To)x; return (To)r; }); } \
    inline To stem##_rz(From v) { volatile From x = v; return fz_round(1, [&] { volatile To r = (To)x; return (To)r; }); } \
    inline To stem##_rd(From v) { volatile From x = v; return fz_round(2, [&] { volatile To r = (To)x; return (To)r; }); } \
    inline To stem##_ru(From v) { volatile From x = v; return fz_round(3, [&] { volatile To r = (To)x; return (To)r; }); }
FZ_CONV(__int2float, int, float)
FZ_CONV(__uint2float, unsigned, float)
FZ_CONV(__ll2float, long long, float)
FZ_CONV(__ull2float, unsigned long long, float)
FZ_CONV(__ll2double, long long, double)
FZ_CONV(__ull2double, unsigned long long, double)
FZ_CONV(__double2float, double, float)

// ------------------------------------------------------------ f16 and bf16
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }

struct fz_fmt { int p, emin, emax, bias; uint16_t nan; };
const fz_fmt kF16{11, -14, 15, 15, 0x7fff}, kBF16{8, -126, 127, 127, 0x7fff};

inline double fz_decode(uint16_t b, const fz_fmt& f) {
    const int m = f.p - 1, e = (b >> m) & ((1 << (15 - m)) - 1);
    const double mant = b & ((1 << m) - 1), sign = b >> 15 ? -1.0 : 1.0;
    if (e == (1 << (15 - m)) - 1) return mant ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp(mant, f.emin - m);
    return sign * ldexp(mant + (1 << m), e - f.bias - m);
}

// The exact value s + err (|err| at most half an ulp of s), rounded once to the
// format in mode m (0 nearest even, 1 toward zero, 2 down, 3 up).
inline uint16_t fz_encode(double s, double err, const fz_fmt& f, int m) {
    if (s != s) return f.nan;
    const uint16_t sign = std::signbit(s) ? 0x8000 : 0;
    const int mb = f.p - 1, ebits = 15 - mb;
    const uint16_t inf = (uint16_t)(((1 << ebits) - 1) << mb);
    if (std::isinf(s)) return sign | inf;
    if (s == 0 && err == 0) return sign;
    const double a = fabs(s), e = s < 0 ? -err : err;  // the error as seen from |s|
    int ex;
    frexp(a, &ex);  // a in [2^(ex-1), 2^ex)
    const int q = (ex - 1 < f.emin ? f.emin : ex - 1) - mb;  // the quantum's exponent
    const double n = ldexp(a, -q), t = floor(n), frac = n - t;
    const bool up_dir = sign ? (m == 2) : (m == 3);  // away from zero
    double k = t;
    if (m == 0) {
        if (frac > 0.5 || (frac == 0.5 && (e > 0 || (e == 0 && fmod(t, 2.0) == 1.0)))) k = t + 1;
    } else if (m == 1 || !up_dir) {
        if (frac == 0 && e < 0) k = t - 1;  // exactly representable minus a little
    } else if (frac > 0 || e > 0) {
        k = t + 1;
    }
    const double r = ldexp(k, q);  // |result|
    if (r == 0) return sign;
    frexp(r, &ex);
    if (ex - 1 > f.emax) {
        const bool to_inf = m == 0 || up_dir;
        return sign | (to_inf ? inf : (uint16_t)(inf - 1));
    }
    if (ex - 1 < f.emin) return sign | (uint16_t)ldexp(r, -(f.emin - mb));
    const uint16_t mant = (uint16_t)(ldexp(r, -(ex - 1 - mb)) - (1 << mb));
    return sign | (uint16_t)((ex - 1 + f.bias) << mb) | mant;
}

// TwoSum: s = RN(a + b) and the exact error.
inline double fz_two_sum(double a, double b, double* err) {
    const double s = a + b, bb = s - a;
    *err = (a - (s - bb)) + (b - bb);
    return s;
}
inline uint16_t fz_sum(double a, double b, const fz_fmt& f) {
    if (std::isinf(a) || std::isinf(b) || a != a || b != b) return fz_encode(a + b, 0, f, 0);
    double err;
    const double s = fz_two_sum(a, b, &err);
    return fz_encode(s, err, f, 0);
}

#define FZ_HALF_OPS(H, F)                                                                    \
    inline H __hadd(H a, H b) { return H{fz_sum(fz_decode(a.x, F), fz_decode(b.x, F), F)}; }  \
    inline H __hsub(H a, H b) { return H{fz_sum(fz_decode(a.x, F), -fz_decode(b.x, F), F)}; } \
    inline H __hmul(H a, H b) {                                                               \
        return H{fz_encode(fz_decode(a.x, F) * fz_decode(b.x, F), 0, F, 0)};                  \
    }                                                                                         \
    inline H __hfma(H a, H b, H c) {                                                          \
        return H{fz_sum(fz_decode(a.x, F) * fz_decode(b.x, F), fz_decode(c.x, F), F)};        \
    }                                                                                         \
    inline H __hneg(H a) { return H{(uint16_t)(a.x ^ 0x8000)}; }                              \
    inline H __habs(H a) { return H{(uint16_t)(a.x & 0x7fff)}; }                              \
    inline H fz_minmax(H a, H b, bool max) {                                                  \
        const double x = fz_decode(a.x, F), y = fz_decode(b.x, F);                            \
        if (x != x && y != y) return H{F.nan};                                                \
        if (x != x) return b;                                                                 \
        if (y != y) return a;                                                                 \
        if (x == y) return (std::signbit(x) != max) ? a : b; /* +0 > -0 */                    \
        return (x < y) != max ? a : b;                                                        \
    }                                                                                         \
    inline H __hmin(H a, H b) { return fz_minmax(a, b, false); }                              \
    inline H __hmax(H a, H b) { return fz_minmax(a, b, true); }                               \
    inline bool __heq(H a, H b) { return fz_decode(a.x, F) == fz_decode(b.x, F); }            \
    inline bool __hlt(H a, H b) { return fz_decode(a.x, F) < fz_decode(b.x, F); }             \
    inline bool __hgt(H a, H b) { return fz_decode(a.x, F) > fz_decode(b.x, F); }
FZ_HALF_OPS(__half, kF16)
FZ_HALF_OPS(__nv_bfloat16, kBF16)

// f16 -> f32 is exact; a NaN becomes the canonical NaN (as every f32 conversion on a
// GPU).  bf16 is the upper half of an f32: the conversion is a shift (cuda_bf16.h),
// which keeps a NaN's sign and payload.
inline float __half2float(__half h) { return fz_canon((float)fz_decode(h.x, kF16)); }
inline float __bfloat162float(__nv_bfloat16 h) { return fz_bits<float>((unsigned)h.x << 16); }
#define FZ_TO16(stem, H, F)                                                 \
    inline H stem##_rn(float v) { return H{fz_encode(v, 0, F, 0)}; }        \
    inline H stem##_rz(float v) { return H{fz_encode(v, 0, F, 1)}; }        \
    inline H stem##_rd(float v) { return H{fz_encode(v, 0, F, 2)}; }        \
    inline H stem##_ru(float v) { return H{fz_encode(v, 0, F, 3)}; }
FZ_TO16(__float2half, __half, kF16)
FZ_TO16(__float2bfloat16, __nv_bfloat16, kBF16)
inline int __half2int_rz(__half h) { return fz_to_int<int>(fz_decode(h.x, kF16), 1, false); }
inline __half __int2half_rn(int i) { return __half{fz_encode((double)i, 0, kF16, 0)}; }

// ---------------------------------------------------------- warp collectives
// Every thread of the block is a std::thread; a collective is a rendezvous of the
// lanes of its member mask at one call site (the generator gives each a number and
// never runs one twice in a thread).
struct fz_site { uint64_t val[32]; uint32_t arrived; };
struct fz_block {
    std::mutex m;
    std::condition_variable cv;
    std::map<long, fz_site> sites;
};
extern fz_block* fz_blk;

inline uint64_t fz_meet(int site, unsigned mask, uint64_t v, uint64_t* vals) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    std::unique_lock<std::mutex> lk(fz_blk->m);
    fz_site& s = fz_blk->sites[(long)site * 64 + warp];
    s.val[lane] = v;
    s.arrived |= 1u << lane;
    fz_blk->cv.notify_all();
    fz_blk->cv.wait(lk, [&] { return (s.arrived & mask) == mask; });
    memcpy(vals, s.val, sizeof s.val);
    return v;
}
inline unsigned fz_shfl(int site, unsigned mask, unsigned v, int mode, unsigned b, int width) {
    uint64_t vals[32];
    fz_meet(site, mask, v, vals);
    const int lane = threadIdx.x & 31, seg = lane & ~(width - 1);
    int j = lane;
    if (mode == 0) j = seg | ((int)b & (width - 1));
    if (mode == 1) j = lane - (int)b < seg ? lane : lane - (int)b;
    if (mode == 2) j = lane + (int)b >= seg + width ? lane : lane + (int)b;
    if (mode == 3) j = (lane ^ (int)b) >= seg + width ? lane : lane ^ (int)b;
    return (unsigned)vals[j];
}
inline unsigned fz_ballot(int site, unsigned mask, unsigned p) {
    uint64_t vals[32];
    fz_meet(site, mask, p != 0, vals);
    unsigned r = 0;
    for (int i = 0; i < 32; ++i)
        if ((mask >> i & 1) && vals[i]) r |= 1u << i;
    return r;
}
inline unsigned fz_match(int site, unsigned mask, unsigned v) {
    uint64_t vals[32];
    fz_meet(site, mask, v, vals);
    unsigned r = 0;
    for (int i = 0; i < 32; ++i)
        if ((mask >> i & 1) && vals[i] == v) r |= 1u << i;
    return r;
}
inline unsigned fz_reduce(int site, unsigned mask, unsigned v, int op) {
    uint64_t vals[32];
    fz_meet(site, mask, v, vals);
    unsigned r = op == 1 ? 0xffffffffu : op == 4 ? 0xffffffffu : 0;
    int sr = op == 3 ? INT_MAX : INT_MIN;
    for (int i = 0; i < 32; ++i) {
        if (!(mask >> i & 1)) continue;
        const unsigned x = (unsigned)vals[i];
        switch (op) {
            case 0: r += x; break;
            case 1: r = x < r ? x : r; break;
            case 2: r = x > r ? x : r; break;
            case 3: sr = (int)x < sr ? (int)x : sr; break;
            case 4: r &= x; break;
            case 5: r |= x; break;
            case 6: r ^= x; break;
            default: sr = (int)x > sr ? (int)x : sr; break;
        }
    }
    return (op == 3 || op == 7) ? (unsigned)sr : r;
}
