// Atomics, integer and float helpers, rounding modes, f16/bf16 conversions.
// Part of the runtime support of kernels translated from PTX (see ptxrt.h;
// the build inlines ptxrt.h, ptx_sync.h, ptx_num.h and ptx_printf.h in that order).
#pragma once
#include "ptxrt.h"

namespace ptx {

// ------------------------------------------------------------- atomics
template <class V> inline V atom_cas(char* p, V cmp, V val) {
    V expected = cmp;
    __atomic_compare_exchange(reinterpret_cast<V*>(p), &expected, &val, false, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
    return expected;  // the old value either way
}

// ld/st of global memory with .volatile, .relaxed, .acquire or .release
// (ptx/_ops_mem.py): an atomic access of that order, so that a flag a block
// on another host thread sets is read afresh and what was stored before a
// release is visible with it.  p is aligned (gptr checked it).
template <class V, int O> inline V load_at(const char* p) {
    V v;
    __atomic_load(reinterpret_cast<const V*>(p), &v, O);
    return v;
}
template <class V, int O> inline void store_at(char* p, V v) {
    __atomic_store(reinterpret_cast<V*>(p), &v, O);
}

// op: the new value from the old (a CAS loop, so every operation is atomic).
template <class V, class F> inline V atom_rmw(char* p, F op) {
    V old = load<V>(p);
    for (;;) {
        V nv = op(old);
        V seen = old;
        if (__atomic_compare_exchange(reinterpret_cast<V*>(p), &seen, &nv, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return old;
        old = seen;
    }
}

// 16-byte atomics (atom.cas.b128, atom.exch.b128, ld/st.b128 with a memory order): one
// `lock cmpxchg16b` on x86-64, lock-free, so the translated build and every library of the
// interpreter's handlers are atomic with each other with no shared lock table (the
// compiler's own 16-byte __atomic builtins are calls into libatomic, which no build links).
// p is 16-byte aligned (the access checks fault 716 otherwise).  expected: the old value.
inline bool cas16(char* p, u128& expected, u128 desired) {
#if defined(__x86_64__)
    uint64_t lo = (uint64_t)expected, hi = (uint64_t)(expected >> 64);
    bool ok;
    __asm__ __volatile__("lock cmpxchg16b %1"
                         : "=@ccz"(ok), "+m"(*reinterpret_cast<u128*>(p)), "+a"(lo), "+d"(hi)
                         : "b"((uint64_t)desired), "c"((uint64_t)(desired >> 64))
                         : "memory");
    expected = ((u128)hi << 64) | lo;
    return ok;
#else
    return __atomic_compare_exchange(reinterpret_cast<u128*>(p), &expected, &desired, false,
                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
#endif
}
template <> inline u128 atom_cas<u128>(char* p, u128 cmp, u128 val) {
    u128 expected = cmp;
    cas16(p, expected, val);
    return expected;
}
template <> inline u128 load_at<u128, __ATOMIC_RELAXED>(const char* p) {
    u128 v = 0;  // a CAS of 0 for 0: the value, read atomically (memory is left as it was)
    cas16(const_cast<char*>(p), v, v);
    return v;
}
template <> inline u128 load_at<u128, __ATOMIC_ACQUIRE>(const char* p) {
    return load_at<u128, __ATOMIC_RELAXED>(p);  // a locked instruction: a full barrier
}
template <> inline void store_at<u128, __ATOMIC_RELAXED>(char* p, u128 v) {
    u128 old = load<u128>(p);
    while (!cas16(p, old, v)) {
    }
}
template <> inline void store_at<u128, __ATOMIC_RELEASE>(char* p, u128 v) {
    store_at<u128, __ATOMIC_RELAXED>(p, v);
}
template <class F> inline u128 atom_rmw_u128(char* p, F op) {
    u128 old = load<u128>(p);
    while (!cas16(p, old, op(old))) {
    }
    return old;
}

// ------------------------------------------------------------ integers
template <class V> inline V sat_add(V a, V b) {
    V r;
    if (__builtin_add_overflow(a, b, &r)) return a < 0 ? (V)(-(V)1 << (8 * sizeof(V) - 1))
                                                        : (V)~((V)1 << (8 * sizeof(V) - 1));
    return r;
}
template <class V> inline V sat_sub(V a, V b) {
    V r;
    if (__builtin_sub_overflow(a, b, &r)) return a < 0 ? (V)(-(V)1 << (8 * sizeof(V) - 1))
                                                        : (V)~((V)1 << (8 * sizeof(V) - 1));
    return r;
}
template <class V> inline V idiv(V a, V b) {  // PTX: x/0 is all ones (unsigned), no trap
    if (b == 0) return (V)-1;
    if ((V)-1 < 0 && b == (V)-1) return (V)(0 - (typename std::make_unsigned<V>::type)a);
    return a / b;
}
template <class V> inline V irem(V a, V b) {  // x%0: all ones too (an H200, 2026-11-28)
    if (b == 0) return (V)-1;
    if ((V)-1 < 0 && b == (V)-1) return 0;
    return a % b;
}
// mode: 0 generic, 1 f4e, 2 b4e, 3 rc8, 4 ecl, 5 ecr, 6 rc16.
inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t c, int mode) {
    const uint64_t x = ((uint64_t)b << 32) | a;
    const uint32_t s = c & 3;
    uint32_t r = 0;
    for (uint32_t i = 0; i < 4; ++i) {
        uint32_t sel;
        switch (mode) {
            case 1: sel = (s + i) & 7; break;
            case 2: sel = (s - i) & 7; break;
            case 3: sel = s; break;
            case 4: sel = i > s ? i : s; break;
            case 5: sel = i < s ? i : s; break;
            case 6: sel = (s & 1) * 2 + (i & 1); break;
            default: sel = (c >> (4 * i)) & 15; break;
        }
        uint32_t byte = (x >> (8 * (sel & 7))) & 0xff;
        if (mode == 0 && (sel & 8)) byte = (byte & 0x80) ? 0xff : 0;
        r |= byte << (8 * i);
    }
    return r;
}
template <class V> inline V bfe(V a, uint32_t pos, uint32_t len, bool is_signed) {
    const uint32_t bits = 8 * sizeof(V);
    pos &= 0xff;
    len &= 0xff;
    typedef typename std::make_unsigned<V>::type U;
    const U ua = (U)a;
    bool sbit = false;
    if (is_signed) {
        const uint32_t top = pos + len - 1 >= bits - 1 ? bits - 1 : pos + len - 1;
        sbit = len == 0 ? false : (ua >> top) & 1;
    }
    U r = 0;
    for (uint32_t i = 0; i < bits; ++i) {
        const bool bit = i < len ? (pos + i < bits ? (ua >> (pos + i)) & 1 : sbit) : sbit;
        r |= (U)bit << i;
    }
    return (V)r;
}
template <class V> inline V bfi(V a, V b, uint32_t pos, uint32_t len) {
    const uint32_t bits = 8 * sizeof(V);
    pos &= 0xff;
    len &= 0xff;
    typedef typename std::make_unsigned<V>::type U;
    U r = (U)b;
    for (uint32_t i = 0; i < len && pos + i < bits; ++i) {
        const U bit = (U)1 << (pos + i);
        r = (r & ~bit) | ((((U)a >> i) & 1) ? bit : 0);
    }
    return (V)r;
}
template <class V> inline V shl(V a, uint32_t n) { return n >= 8 * sizeof(V) ? 0 : (V)(a << n); }
template <class V> inline V shr(V a, uint32_t n) {  // arithmetic for signed V
    if (n >= 8 * sizeof(V)) return (V)-1 < 0 && a < 0 ? (V)-1 : 0;
    return (V)(a >> n);
}
template <class V> inline uint32_t clz(V a) {
    return a == 0 ? 8 * sizeof(V) : sizeof(V) == 8 ? __builtin_clzll((uint64_t)a)
                                                   : __builtin_clz((uint32_t)a);
}
template <class V> inline V brev(V a) {
    V r = 0;
    for (uint32_t i = 0; i < 8 * sizeof(V); ++i) r |= (V)((a >> i) & 1) << (8 * sizeof(V) - 1 - i);
    return r;
}
inline uint64_t mulhi_u64(uint64_t a, uint64_t b) {
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}
inline int64_t mulhi_s64(int64_t a, int64_t b) { return (int64_t)(((__int128)a * b) >> 64); }

// ------------------------------------------------------------- floats
// Directed rounding: the operation runs under fesetround, its operands
// and result volatile so the compiler neither folds nor moves it.
struct Round {
    int saved;
    explicit Round(int mode) : saved(fegetround()) { if (mode != saved) fesetround(mode); }
    ~Round() { if (fegetround() != saved) fesetround(saved); }
};
template <class V> inline V rnd_add(V a, V b, int m) {
    Round r(m);
    volatile V x = a, y = b;
    volatile V z = x + y;
    return z;
}
template <class V> inline V rnd_mul(V a, V b, int m) {
    Round r(m);
    volatile V x = a, y = b;
    volatile V z = x * y;
    return z;
}
template <class V> inline V rnd_div(V a, V b, int m) {
    Round r(m);
    volatile V x = a, y = b;
    volatile V z = x / y;
    return z;
}
inline float rnd_fma(float a, float b, float c, int m) {
    Round r(m);
    volatile float x = a, y = b, z = c;
    volatile float w = fmaf(x, y, z);
    return w;
}
inline double rnd_fma(double a, double b, double c, int m) {
    Round r(m);
    volatile double x = a, y = b, z = c;
    volatile double w = fma(x, y, z);
    return w;
}
template <class V> inline V rnd_sqrt(V a, int m) {
    Round r(m);
    volatile V x = a;
    volatile V z = sizeof(V) == 4 ? (V)sqrtf((float)x) : (V)sqrt((double)x);
    return z;
}
inline float rnd_f32(double a, int m) {
    Round r(m);
    volatile double x = a;
    volatile float z = (float)x;
    return z;
}
template <class V> inline V ftz(V v) {  // flush subnormals to sign-preserving zero
    return fpclassify(v) == FP_SUBNORMAL ? copysign((V)0, v) : v;
}
// .sat: [+0.0, 1.0]; NaN and -0.0 give +0.0 (an H200's cvt.sat.f32.f32 of -0.0, 2026-11-28)
inline float sat01(float v) { return v != v ? 0.0f : v <= 0 ? 0.0f : v > 1 ? 1.0f : v; }
inline double sat01(double v) { return v != v ? 0.0 : v <= 0 ? 0.0 : v > 1 ? 1.0 : v; }
// PTX min/max: NaN only when both are NaN; -0 < +0.
template <class V> inline V fmin_(V a, V b) {
    if (a != a) return b;
    if (b != b) return a;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}
template <class V> inline V fmax_(V a, V b) {
    if (a != a) return b;
    if (b != b) return a;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
// div.approx.f32: a * (1/b), within 2 ulp for |b| in [2^-126, 2^126] (here correctly
// rounded); for 2^126 < |b| < 2^128 the reciprocal flushes to zero, so the quotient is
// a signed zero, or NaN when a is infinite (the PTX ISA; libdevice's __nv_fast_fdividef).
inline float div_approx(float a, float b) {
    const float m = fabsf(b);
    if (m > 0x1p126f && m < INFINITY) return a * copysignf(0.0f, b);
    return a / b;
}
// A GPU's f32 NaN result: the canonical 0x7fffffff, whatever the inputs' payloads
// (add, abs/neg, cvt from f16 and cvt.rzi on an H200, 2026-11-28).
// A branch, not a select: a NaN is rare and the branch predicted, so a chain of
// dependent results (an fma accumulation) waits for the arithmetic alone -- as a
// select (cmov) the compare was on the chain, about twice its latency.  The cold
// call keeps the compiler from turning the branch back into a select.
[[gnu::cold, gnu::noinline]] inline float canon_nan() { return bits<float>(0x7fffffffu); }
inline float canon(float v) {
    if (__builtin_expect(v != v, 0)) return canon_nan();
    return v;
}

// Float to integer: PTX saturates.  NaN (an H200, 2026-11-28): the destination's top bit
// alone (0x80000000, 0x8000000000000000) from an f64 source or into a 64-bit destination
// (cuda_fp16.h documents the same for __half2ll/__half2ull), else 0 (f32/f16/bf16 into
// 32 bits or fewer).  `m` rounds first.
template <class V> inline V f2i(double v, int m, bool from_f64 = false) {
    if (v != v) {
        if (sizeof(V) == 8 || from_f64)
            return (V)((typename std::make_unsigned<V>::type)1 << (8 * sizeof(V) - 1));
        return (V)0;
    }
    switch (m) {
        case 1: v = nearbyint(v); break;  // rni (nearest even: the default mode)
        case 2: v = trunc(v); break;      // rzi
        case 3: v = floor(v); break;      // rmi
        case 4: v = ceil(v); break;       // rpi
        default: v = trunc(v); break;
    }
    const double lo = (V)-1 < 0 ? -ldexp(1.0, 8 * sizeof(V) - 1) : 0.0;
    const double hi = (V)-1 < 0 ? ldexp(1.0, 8 * sizeof(V) - 1) : ldexp(1.0, 8 * sizeof(V));
    if (v <= lo) return (V)-1 < 0 ? (V)((typename std::make_unsigned<V>::type)1 << (8 * sizeof(V) - 1)) : 0;
    if (v >= hi) return (V)-1 < 0 ? (V)~((typename std::make_unsigned<V>::type)1 << (8 * sizeof(V) - 1)) : (V)-1;
    return (V)v;
}
// Integer to float with rounding mode m (FE_* value).
template <class F, class V> inline F i2f(V v, int m) {
    Round r(m);
    volatile V x = v;
    volatile F z = (F)x;
    return z;
}
// A 64-bit integer as a double rounded to odd (truncated, the last bit set
// when bits were lost): rounding that again to a format of at most 51
// significand bits (f16, bf16) is the one correct rounding of the integer.
template <class V> inline double i2d_odd(V v) {
    const double d = i2f<double, V>(v, FE_TOWARDZERO);
    if ((V)d == v) return d;
    return bits<double>(bits<uint64_t>(d) | 1u);
}

// Narrow float formats (f16: 5 exponent bits, 11-bit significand; bf16: 8, 8),
// exactly rounded from double with mode m (FE_*), on the bits: one
// rounding, subnormals and overflow by mode, NaN -> 0x7fff (the GPU's canonical
// NaN of both formats, sign dropped, as cuda_fp16.h/cuda_bf16.h convert).  Returns the bits.
inline uint16_t narrow(double d, int ebits, int pbits, int m) {
    const uint64_t db = bits<uint64_t>(d);
    const uint32_t sign = (uint32_t)(db >> 63) << 15;
    const int fb = pbits - 1;  // stored fraction bits
    const int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
    const uint32_t inf = (uint32_t)((1 << ebits) - 1) << fb;
    const int dexp = (int)((db >> 52) & 0x7ff);
    const uint64_t dman = db & ((1ull << 52) - 1);
    if (dexp == 0x7ff) return (uint16_t)(dman ? 0x7fffu : sign | inf);
    if (dexp == 0 && dman == 0) return (uint16_t)sign;
    const uint64_t sig = dexp ? dman | (1ull << 52) : dman;
    const int e = dexp ? dexp - 1023 : -1022;
    const int shift = 52 - fb + (e < emin ? emin - e : 0);
    uint64_t q, rem, half;
    if (shift >= 64) {
        q = 0;
        rem = sig;
        half = ~0ull;  // rem < half: never a halfway case
    } else {
        q = sig >> shift;
        rem = sig & ((1ull << shift) - 1);
        half = 1ull << (shift - 1);
    }
    const bool neg = sign != 0;
    bool up = false;
    if (rem) {
        if (m == FE_TOWARDZERO) up = false;
        else if (m == FE_DOWNWARD) up = neg;
        else if (m == FE_UPWARD) up = !neg;
        else up = rem > half || (rem == half && (q & 1));
    }
    q += up;
    const uint64_t h = e < emin ? q : ((uint64_t)(e + bias - 1) << fb) + q;
    if (h >= inf) {  // overflow: infinity, or the largest finite, by mode
        const bool to_inf = m == FE_TONEAREST || (m == FE_UPWARD && !neg) ||
                            (m == FE_DOWNWARD && neg);
        return (uint16_t)(sign | (to_inf ? inf : inf - 1));
    }
    return (uint16_t)(sign | h);
}
inline float widen(uint16_t h, int ebits, int pbits) {
    const int fb = pbits - 1, bias = (1 << (ebits - 1)) - 1;
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const uint32_t e = (h >> fb) & ((1u << ebits) - 1), f = h & ((1u << fb) - 1);
    // NaN (an H200, 2026-11-28): from f16 the canonical 0x7fffffff; bf16 is the top half
    // of an f32, and its NaN keeps sign and payload (a shift)
    if (e == (1u << ebits) - 1 && f && ebits == 8) return bits<float>((uint32_t)h << 16);
    if (e == (1u << ebits) - 1) return f ? bits<float>(0x7fffffffu) : bits<float>(sign | 0x7f800000u);
    if (e == 0) {  // zero or subnormal: f * 2^(1 - bias - fb), exact in float
        const float v = ldexpf((float)f, 1 - bias - fb);
        return sign ? -v : v;
    }
    return bits<float>(sign | ((e - bias + 127) << 23) | (f << (23 - fb)));
}
// Half-precision arithmetic (f16, bf16; packed pairs through half2_op): the
// operands widened exactly, the operation computed EXACTLY or rounded to odd
// in double, then one rounding to the format with mode m -- correctly rounded
// by construction.  A product of two f16/bf16 values (at most 22 significand
// bits) is exact in double; a sum (add, sub, and fma's product plus addend)
// is rounded to odd (odd_add: truncated, the last bit set when bits were
// lost), and a value rounded to odd with p + 2 or more bits rounds to a
// p-bit format exactly as the exact value would (53 >= 11 + 2, 8 + 2).
// NaN results are 0x7fff, the GPU's canonical NaN.
// a + b rounded to odd in double: the exact sum truncated toward zero, its last
// significand bit set when the truncation lost bits.  TwoSum gives the rounding
// error e of s = fl(a + b) exactly (no overflow: half-precision operands).
inline double odd_add(double a, double b) {
    const double s = a + b;
    if (s != s || s - s != 0) return s;  // NaN or infinity: nothing to round
    const double bb = s - a, e = (a - (s - bb)) + (b - bb);
    if (e == 0) return s;
    double t = s;  // truncate: step toward zero when fl() rounded away from it
    if ((e < 0) != (s < 0) && s != 0) t = nextafter(s, 0.0);
    if (t == 0) return e;  // |a + b| below double's range: not reached by half operands
    return bits<double>(bits<uint64_t>(t) | 1u);
}
enum HOp { H_ADD, H_SUB, H_MUL, H_FMA, H_MIN, H_MAX, H_NEG, H_ABS };
inline uint16_t half_op(int op, uint16_t a, uint16_t b, uint16_t c, bool bf, int m, bool ftz,
                        bool sat, bool nan) {
    const int eb = bf ? 8 : 5, pb = bf ? 8 : 11;
    const uint16_t expmask = (uint16_t)(((1u << eb) - 1) << (pb - 1));
    if (op == H_NEG) return (uint16_t)(a ^ 0x8000u);
    if (op == H_ABS) return (uint16_t)(a & 0x7fffu);
    if (ftz) {  // subnormal inputs are signed zeros
        if (!(a & expmask)) a &= 0x8000;
        if (!(b & expmask)) b &= 0x8000;
        if (!(c & expmask)) c &= 0x8000;
    }
    const double x = widen(a, eb, pb), y = widen(b, eb, pb), z = widen(c, eb, pb);
    double r;
    switch (op) {
        case H_ADD: r = odd_add(x, y); break;
        case H_SUB: r = odd_add(x, -y); break;
        case H_MUL: r = x * y; break;          // exact
        case H_FMA: r = odd_add(x * y, z); break;  // the product exact, one sum to odd
        default: {  // min, max: NaN only when both are (or .NaN); -0 < +0
            if (x != x || y != y) {
                if (nan || (x != x && y != y)) return (uint16_t)0x7fffu;
                return x != x ? b : a;
            }
            const bool lt = x < y || (x == y && (a & 0x8000) && !(b & 0x8000));
            return (op == H_MIN) == lt ? a : b;
        }
    }
    if (sat) r = r != r ? 0.0 : r <= 0 ? 0.0 : r > 1 ? 1.0 : r;
    uint16_t h = narrow(r, eb, pb, m);
    if (ftz && !(h & expmask)) h &= 0x8000;
    return h;
}
inline uint32_t half2_op(int op, uint32_t a, uint32_t b, uint32_t c, bool bf, int m, bool ftz,
                         bool sat, bool nan) {
    const uint16_t lo = half_op(op, (uint16_t)a, (uint16_t)b, (uint16_t)c, bf, m, ftz, sat, nan);
    const uint16_t hi = half_op(op, (uint16_t)(a >> 16), (uint16_t)(b >> 16), (uint16_t)(c >> 16),
                                bf, m, ftz, sat, nan);
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

// Half-precision functions (.approx): computed in float with the C library and
// rounded once to the format -- inside the ISA's bounds for ex2/tanh.approx.f16/bf16.
enum HFn { HF_EX2, HF_TANH };
inline uint16_t half_fn(int fn, uint16_t a, bool bf, bool ftz) {
    const int eb = bf ? 8 : 5, pb = bf ? 8 : 11;
    const uint16_t expmask = (uint16_t)(((1u << eb) - 1) << (pb - 1));
    if (ftz && !(a & expmask)) a &= 0x8000;
    const float x = widen(a, eb, pb);
    const float r = fn == HF_EX2 ? exp2f(x) : tanhf(x);
    uint16_t h = narrow((double)r, eb, pb, FE_TONEAREST);
    if (ftz && !(h & expmask)) h &= 0x8000;
    return h;
}
inline uint32_t half2_fn(int fn, uint32_t a, bool bf, bool ftz) {
    return (uint32_t)half_fn(fn, (uint16_t)a, bf, ftz) |
           ((uint32_t)half_fn(fn, (uint16_t)(a >> 16), bf, ftz) << 16);
}
// .relu of an f16/bf16 result: negative (and -0) -> +0; NaN -> the canonical NaN.
inline uint16_t half_relu(uint16_t h, bool bf) {
    const uint16_t expmask = bf ? 0x7f80 : 0x7c00, man = bf ? 0x007f : 0x03ff;
    if ((h & expmask) == expmask && (h & man)) return 0x7fff;
    return (h & 0x8000) ? 0 : h;
}
inline uint32_t half2_relu(uint32_t v, bool bf) {
    return (uint32_t)half_relu((uint16_t)v, bf) | ((uint32_t)half_relu((uint16_t)(v >> 16), bf) << 16);
}
// Comparison of one f16/bf16 pair: cmp 0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge; +6: the unordered
// form (true when either is NaN); 12 num, 13 nan.
inline bool half_cmp(int cmp, uint16_t a, uint16_t b, bool bf, bool ftz) {
    const int eb = bf ? 8 : 5, pb = bf ? 8 : 11;
    const uint16_t expmask = (uint16_t)(((1u << eb) - 1) << (pb - 1));
    if (ftz) {
        if (!(a & expmask)) a &= 0x8000;
        if (!(b & expmask)) b &= 0x8000;
    }
    const float x = widen(a, eb, pb), y = widen(b, eb, pb);
    const bool nan = x != x || y != y;
    if (cmp == 12) return !nan;
    if (cmp == 13) return nan;
    if (nan) return cmp >= 6;
    switch (cmp % 6) {
        case 0: return x == y;
        case 1: return x != y;
        case 2: return x < y;
        case 3: return x <= y;
        case 4: return x > y;
        default: return x >= y;
    }
}

// ------------------------------------------------------ packed integers
// Two 16-bit lanes of a 32-bit value: add, sub, min, max (signed or unsigned lanes,
// wrapping), .relu (max(0, lane) of signed lanes).
enum P2 { P2_ADD, P2_SUB, P2_MIN, P2_MAX };
inline uint32_t simd2(int op, uint32_t a, uint32_t b, bool sgn, bool relu) {
    uint32_t r = 0;
    for (int k = 0; k < 2; ++k) {
        const int32_t x = sgn ? (int32_t)(int16_t)(a >> 16 * k) : (int32_t)(uint16_t)(a >> 16 * k);
        const int32_t y = sgn ? (int32_t)(int16_t)(b >> 16 * k) : (int32_t)(uint16_t)(b >> 16 * k);
        int32_t v = op == P2_ADD ? x + y : op == P2_SUB ? x - y : op == P2_MIN ? (x < y ? x : y)
                                                                              : (x > y ? x : y);
        if (relu && (int16_t)v < 0) v = 0;
        r |= (uint32_t)(uint16_t)v << 16 * k;
    }
    return r;
}
// dp4a: c + the dot product of a's and b's four bytes; dp2a: of a's two 16-bit halves and
// two bytes of b (hi: bytes 2 and 3, lo: 0 and 1).  32-bit wrapping sums.
inline uint32_t dp4a(uint32_t a, uint32_t b, uint32_t c, bool sa, bool sb) {
    uint32_t acc = c;
    for (int k = 0; k < 4; ++k) {
        const int32_t x = sa ? (int32_t)(int8_t)(a >> 8 * k) : (int32_t)(uint8_t)(a >> 8 * k);
        const int32_t y = sb ? (int32_t)(int8_t)(b >> 8 * k) : (int32_t)(uint8_t)(b >> 8 * k);
        acc += (uint32_t)(x * y);
    }
    return acc;
}
inline uint32_t dp2a(uint32_t a, uint32_t b, uint32_t c, bool sa, bool sb, bool hi) {
    uint32_t acc = c;
    for (int k = 0; k < 2; ++k) {
        const int32_t x = sa ? (int32_t)(int16_t)(a >> 16 * k) : (int32_t)(uint16_t)(a >> 16 * k);
        const int sh = 8 * (k + (hi ? 2 : 0));
        const int32_t y = sb ? (int32_t)(int8_t)(b >> sh) : (int32_t)(uint8_t)(b >> sh);
        acc += (uint32_t)(x * y);
    }
    return acc;
}
// The SIMD video instructions vadd/vsub/vavrg/vabsdiff/vmin/vmax 2 (16-bit lanes) and 4
// (bytes), without selectors or masks: each lane's operands extended by their types'
// signedness, the result saturated to the destination's lane range (.sat) or truncated;
// .add: c plus the sum of the lanes' results, else the lanes packed.
enum Video { V_ADD, V_SUB, V_AVRG, V_ABSDIFF, V_MIN, V_MAX };
inline uint32_t video(int op, int lanes, uint32_t a, uint32_t b, uint32_t c, bool sa, bool sb,
                      bool sd, bool sat, bool add) {
    const int w = 32 / lanes;
    const uint32_t lm = (1u << w) - 1;
    uint32_t r = 0;
    int64_t sum = 0;
    for (int k = 0; k < lanes; ++k) {
        const uint32_t ua = (a >> w * k) & lm, ub = (b >> w * k) & lm;
        const int64_t x = sa && (ua >> (w - 1)) ? (int64_t)ua - (1ll << w) : (int64_t)ua;
        const int64_t y = sb && (ub >> (w - 1)) ? (int64_t)ub - (1ll << w) : (int64_t)ub;
        int64_t v;
        switch (op) {
            case V_ADD: v = x + y; break;
            case V_SUB: v = x - y; break;
            case V_AVRG: v = (x + y + 1) >> 1; break;
            case V_ABSDIFF: v = x > y ? x - y : y - x; break;
            case V_MIN: v = x < y ? x : y; break;
            default: v = x > y ? x : y; break;
        }
        if (sat) {
            const int64_t lo = sd ? -(1ll << (w - 1)) : 0, hi = sd ? (1ll << (w - 1)) - 1 : lm;
            v = v < lo ? lo : v > hi ? hi : v;
        }
        sum += v;
        r |= ((uint32_t)v & lm) << w * k;
    }
    return add ? (uint32_t)(c + (uint32_t)sum) : r;
}
// fns.b32: the position of the offset-th set bit of mask from bit base (upward for a
// positive offset, downward for a negative one; offset 0: base itself), else 0xffffffff.
inline uint32_t fns(uint32_t mask, uint32_t base, int32_t offset) {
    if (offset == 0) return (mask >> (base & 31)) & 1 ? base : 0xffffffffu;
    int32_t count = (offset > 0 ? offset : -offset) - 1;
    const int inc = offset > 0 ? 1 : -1;
    for (int pos = (int)base; pos >= 0 && pos < 32; pos += inc)
        if ((mask >> pos) & 1) {
            if (count == 0) return (uint32_t)pos;
            --count;
        }
    return 0xffffffffu;
}

// ------------------------------------------------------------- fp8 formats
// e4m3 (4 exponent bits, bias 7, 3 fraction bits; no infinity, NaN S.1111.111, largest
// 448) and e5m2 (IEEE-like: 5 and 2, bias 15, infinities).  From double, rounded to
// nearest even with .satfinite (the only form the ISA gives): beyond the largest finite,
// and infinities, give the largest finite of that sign; NaN gives 0x7f.
inline uint8_t to_fp8(double d, bool e5m2, bool relu) {
    if (d != d) return 0x7f;
    if (relu && (d < 0 || (d == 0 && signbit(d)))) d = 0;
    const uint8_t sign = signbit(d) ? 0x80 : 0;
    const double m = fabs(d);
    const int fb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const double top = e5m2 ? 57344.0 : 448.0;
    const uint8_t topbits = e5m2 ? 0x7b : 0x7e;
    if (m >= top) return (uint8_t)(sign | topbits);  // satfinite (infinity too)
    if (m == 0) return sign;
    int e;
    frexp(m, &e);  // m = f * 2^e, f in [0.5, 1)
    int ex = e - 1;  // unbiased exponent of m
    const int emin = 1 - bias;
    if (ex < emin) ex = emin;
    const double q = ldexp(m, fb - ex);  // significand in units of the last place
    double r = nearbyint(q);             // ties to even (the default rounding mode)
    uint32_t bitsv;
    if (ex == emin && r < ldexp(1.0, fb)) {
        bitsv = (uint32_t)r;  // subnormal (or rounded up to the smallest normal)
    } else {
        if (r >= ldexp(1.0, fb + 1)) {
            r /= 2;
            ++ex;
        }
        bitsv = ((uint32_t)(ex + bias) << fb) | ((uint32_t)r - (1u << fb));
    }
    if (bitsv > topbits) bitsv = topbits;  // rounded past the largest finite: satfinite
    return (uint8_t)(sign | bitsv);
}
// fp8 to f16, exact: e5m2 is the top byte of an f16 (NaN keeps its payload); an e4m3
// NaN gives the canonical 0x7fff.
inline uint16_t fp8_to_h(uint8_t v, bool e5m2) {
    if (e5m2) return (uint16_t)((uint16_t)v << 8);
    const uint16_t sign = (uint16_t)(v & 0x80) << 8;
    const uint32_t e = (v >> 3) & 15, f = v & 7;
    if (e == 15 && f == 7) return 0x7fff;
    if (e == 0) {  // subnormal: f * 2^-9, exact in f16
        if (f == 0) return sign;
        return (uint16_t)(sign | narrow(ldexp((double)f, -9), 5, 11, FE_TONEAREST));
    }
    return (uint16_t)(sign | ((e - 7 + 15) << 10) | (f << 7));
}

inline uint16_t f2h(double d, int m) { return narrow(d, 5, 11, m); }
inline uint16_t f2bf(double d, int m) { return narrow(d, 8, 8, m); }
inline float h2f(uint16_t h) { return widen(h, 5, 11); }
inline float bf2f(uint16_t h) { return widen(h, 8, 8); }

// Integer to integer with .sat: clamped to the destination's range.
template <class D, class S> inline D clamp_int(S v) {
    const long double x = (long double)v;
    const long double lo = (long double)std::numeric_limits<D>::min();
    const long double hi = (long double)std::numeric_limits<D>::max();
    return x < lo ? std::numeric_limits<D>::min() : x > hi ? std::numeric_limits<D>::max() : (D)v;
}

inline uint64_t globaltimer() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

}  // namespace ptx
