// gpuarray kernels: element types, NumPy-compatible conversions, offsets.
//
// Compiled by NVRTC with no CUDA toolkit headers (no <cuda_fp16.h>, no
// <cstdint>): only builtins are used.  The Python side (gpuarray/_kernels)
// hands every file of this folder to NVRTC as a named header and generates a
// small translation unit per specialisation that instantiates the templates
// below behind an `extern "C"` symbol whose name encodes the specialisation.
//
// Element type names follow NumPy's type codes without byte order:
//   ga_b1 bool, ga_i1..ga_i8 signed, ga_u1..ga_u8 unsigned, ga_f2 float16,
//   ga_f4 float32, ga_f8 float64, ga_c8 complex64, ga_c16 complex128,
//   ga_v16 a raw 16-byte unit (used only for moves, never converted).
// Alignment: every element type is aligned to its size (complex128 and the
// 16-byte unit to 16) -- the host side checks pointers and strides against
// that and selects the unaligned kernel variant (byte-wise access) otherwise.
//
// Conversions (ga_cvt<D>(S)) reproduce NumPy's `astype` (unsafe casting):
//   * anything -> bool is `!= 0` (complex: either part non-zero; NaN -> true);
//   * bool -> anything is 0 / 1;
//   * integer -> integer wraps modulo 2^bits (two's complement);
//   * float -> integer truncates toward zero.  Targets of 8, 16 and 32 bits
//     go through a 32-bit (signed targets; unsigned 8/16) or 64-bit
//     (uint32) truncation and then wrap, so -1.0 -> uint8 gives 255 and
//     300.0 -> int8 gives 44, as NumPy does on x86-64.  NaN, +-inf and values
//     outside the intermediate's range are implementation-defined in NumPy
//     (x86-64 gives INT_MIN patterns, ARM saturates); here they saturate
//     to the intermediate's range and NaN gives 0 (ga_ftoi), written out
//     explicitly because C++ leaves them undefined: CUDA's cvt.rzi does the
//     same, so the GPU and the host build (ga_host.cuh) agree bit for bit.
//     uint64 targets: values >= 2^64 (and +inf) give 2^64 - 1, values >= 2^63
//     convert directly, smaller ones through int64 (so negatives wrap);
//   * complex -> real (and -> int) drops the imaginary part;
//   * real -> complex has a zero imaginary part;
//   * float -> float (including float16) rounds to nearest, ties to even, in
//     ONE rounding (float64 -> float16 does not go through float32); integer
//     -> float16 goes through float32 exactly as NumPy does (the double
//     rounding cannot differ: integers beyond 2^24 overflow float16 anyway).
//   * NaN payloads are not guaranteed to be preserved.
#pragma once

typedef signed char ga_i1;
typedef short ga_i2;
typedef int ga_i4;
typedef long long ga_i8;
typedef unsigned char ga_u1;
typedef unsigned short ga_u2;
typedef unsigned int ga_u4;
typedef unsigned long long ga_u8;
typedef float ga_f4;
typedef double ga_f8;

struct ga_b1 { unsigned char v; };
struct ga_f2 { unsigned short bits; };
struct alignas(8) ga_c8 { float re, im; };
struct alignas(16) ga_c16 { double re, im; };
struct alignas(16) ga_v16 { unsigned long long lo, hi; };

#ifndef __CUDACC_RTC__
#ifndef __device__
#define __device__
#endif
#endif

#define GA_DEV __device__ __forceinline__
#ifndef __forceinline__
#define __forceinline__ inline
#endif

// ------------------------------------------------------ global memory seam
// Every access of a kernel to global memory goes through ga_gread /
// ga_gwrite: the address of one T to read or write.  On the GPU they are the
// plain pointer casts below.  The host build (GA_HOST_BUILD, see
// ga_host.cuh) translates the simulated device address through the extents
// the simulator granted the launch, checking bounds, permission and
// alignment; any other access is the simulator's illegal-address fault.
//
// Shared memory likewise: every access to a __shared__ array goes through
// ga_sld / ga_sst (element [i][j] of a 2-D array) or ga_sload / ga_sstore
// (the T at a byte offset of the array).  On the GPU they are the plain
// accesses below; the host build checks the access lies inside the array
// and is aligned, as a GPU traps an out-of-range shared address.
#ifdef GA_HOST_BUILD
#include "ga_host.cuh"
#else
template <class T> GA_DEV const T* ga_gread(const char* p) { return reinterpret_cast<const T*>(p); }
template <class T> GA_DEV T* ga_gwrite(char* p) { return reinterpret_cast<T*>(p); }
template <class T, int R, int C> GA_DEV T ga_sld(const T (&a)[R][C], int i, int j) { return a[i][j]; }
template <class T, int R, int C> GA_DEV void ga_sst(T (&a)[R][C], int i, int j, T v) { a[i][j] = v; }
template <class T, class A> GA_DEV T ga_sload(const A& a, int off) {
    return *reinterpret_cast<const T*>(reinterpret_cast<const unsigned char*>(&a) + off);
}
template <class T, class A> GA_DEV void ga_sstore(A& a, int off, T v) {
    *reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(&a) + off) = v;
}
#endif

// ------------------------------------------------------------------ float16
// Device code uses the hardware conversions (cvt.*, sm_53+); the portable
// bit-level versions exist so that this file can be checked on a host
// compiler against NumPy (tests may compile it with a C++ compiler).
GA_DEV float ga_half_to_float(unsigned short h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    unsigned int exp = (h >> 10) & 0x1fu;
    unsigned int man = h & 0x3ffu;
    unsigned int bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
            bits = sign | ((unsigned int)(112 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    union { unsigned int u; float f; } c;
    c.u = bits;
    return c.f;
#endif
}

#ifndef __CUDA_ARCH__
// Round-to-nearest-even of a binary64 value to binary16 bits (host check).
inline unsigned short ga_host_double_to_half(double d) {
    union { double d; unsigned long long u; } c;
    c.d = d;
    unsigned long long u = c.u;
    unsigned short sign = (unsigned short)((u >> 48) & 0x8000u);
    int exp = (int)((u >> 52) & 0x7ff);
    unsigned long long man = u & 0xfffffffffffffull;
    if (exp == 0x7ff) {
        if (man == 0) return sign | 0x7c00u;
        return sign | 0x7e00u | (unsigned short)(man >> 42);
    }
    int e = exp - 1023;  // unbiased
    if (e > 15) return sign | 0x7c00u;
    unsigned long long m = man | (exp ? (1ull << 52) : 0);  // 53-bit significand
    // value = m * 2^(e-52) for normal numbers; target quantum 2^-24 (subnormal)
    // or 2^(e-10) (normal).
    int shift;  // how many low bits of m to drop
    unsigned short he;
    if (e >= -14) { shift = 42; he = (unsigned short)(e + 15); }
    else { shift = 42 + (-14 - e); he = 0; }
    if (exp == 0) return sign;  // binary64 subnormals are far below 2^-25
    if (shift > 63) return sign;
    unsigned long long q = m >> shift;
    unsigned long long rem = m & ((1ull << shift) - 1);
    unsigned long long half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q += 1;
    unsigned short bits;
    if (he == 0) {
        bits = (unsigned short)q;  // may carry into the exponent: correct
    } else {
        // q holds the implicit bit at position 10; a carry to 2^11 bumps exp.
        unsigned int hexp = he;
        if (q >> 11) { q >>= 1; hexp += 1; }
        if (hexp >= 31) return sign | 0x7c00u;
        bits = (unsigned short)((hexp << 10) | (q & 0x3ffu));
    }
    return sign | bits;
}
#endif

GA_DEV unsigned short ga_float_to_half(float f) {
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return ga_host_double_to_half((double)f);  // exact widening: one rounding
#endif
}

GA_DEV unsigned short ga_double_to_half(double d) {
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
    return h;
#else
    return ga_host_double_to_half(d);
#endif
}

// -------------------------------------------------------------- conversions
// Step 1: an element's value in a computation type.  Integers widen to 64
// bits (exact), float16 widens to float (exact), bool normalises to 0/1.
GA_DEV bool ga_val(ga_b1 x) { return x.v != 0; }
GA_DEV long long ga_val(ga_i1 x) { return x; }
GA_DEV long long ga_val(ga_i2 x) { return x; }
GA_DEV long long ga_val(ga_i4 x) { return x; }
GA_DEV long long ga_val(ga_i8 x) { return x; }
GA_DEV unsigned long long ga_val(ga_u1 x) { return x; }
GA_DEV unsigned long long ga_val(ga_u2 x) { return x; }
GA_DEV unsigned long long ga_val(ga_u4 x) { return x; }
GA_DEV unsigned long long ga_val(ga_u8 x) { return x; }
GA_DEV float ga_val(ga_f2 x) { return ga_half_to_float(x.bits); }
GA_DEV float ga_val(ga_f4 x) { return x; }
GA_DEV double ga_val(ga_f8 x) { return x; }
GA_DEV ga_c8 ga_val(ga_c8 x) { return x; }
GA_DEV ga_c16 ga_val(ga_c16 x) { return x; }

// Step 2: a computation-type value to the destination element type.
template <class D> struct ga_to;

// Float -> int or long long, truncating toward zero, saturating outside
// [MIN, MAX], NaN -> 0.  On the GPU that is what cvt.rzi does (PTX ISA:
// float-to-integer conversions clamp to the destination range, NaN gives
// 0), reached through the __*_rz intrinsics, which are defined for every
// input (a C++ cast out of range is not, to a compiler).  The host spells it
// out.  -(F)MIN is 2^31 or 2^63, exact in float and double.
template <class W> struct ga_lim;
template <> struct ga_lim<int> {
    GA_DEV static constexpr int lo() { return -2147483647 - 1; }
    GA_DEV static constexpr int hi() { return 2147483647; }
};
template <> struct ga_lim<long long> {
    GA_DEV static constexpr long long lo() { return -9223372036854775807ll - 1; }
    GA_DEV static constexpr long long hi() { return 9223372036854775807ll; }
};
#ifdef __CUDA_ARCH__
GA_DEV int ga_rzi(float v, int*) { return __float2int_rz(v); }
GA_DEV int ga_rzi(double v, int*) { return __double2int_rz(v); }
GA_DEV long long ga_rzi(float v, long long*) { return __float2ll_rz(v); }
GA_DEV long long ga_rzi(double v, long long*) { return __double2ll_rz(v); }
#endif
template <class W, class F> GA_DEV W ga_ftoi(F v) {
#ifdef __CUDA_ARCH__
    return ga_rzi(v, (W*)0);
#else
    if (!(v == v)) return 0;
    if (v >= -(F)ga_lim<W>::lo()) return ga_lim<W>::hi();
    if (v <= (F)ga_lim<W>::lo()) return ga_lim<W>::lo();
    return (W)v;
#endif
}
// double >= 2^63 -> uint64, saturating at 2^64 - 1 (+inf too): cvt.rzi.u64.
GA_DEV unsigned long long ga_ftou64_high(double v) {
#ifdef __CUDA_ARCH__
    return __double2ull_rz(v);
#else
    return v >= 18446744073709551616.0 ? ~0ull : (unsigned long long)v;
#endif
}

// Integer destinations: integers wrap; floats truncate (see header).
template <class D, class W> struct ga_to_int {
    // W: the intermediate a float goes through before wrapping to D.
    GA_DEV static D f(bool v) { return (D)(v ? 1 : 0); }
    GA_DEV static D f(long long v) { return (D)v; }
    GA_DEV static D f(unsigned long long v) { return (D)v; }
    GA_DEV static D f(float v) { return (D)ga_ftoi<W>(v); }
    GA_DEV static D f(double v) { return (D)ga_ftoi<W>(v); }
    GA_DEV static D f(ga_c8 v) { return f(v.re); }
    GA_DEV static D f(ga_c16 v) { return f(v.re); }
};
template <> struct ga_to<ga_i1> : ga_to_int<ga_i1, int> {};
template <> struct ga_to<ga_u1> : ga_to_int<ga_u1, int> {};
template <> struct ga_to<ga_i2> : ga_to_int<ga_i2, int> {};
template <> struct ga_to<ga_u2> : ga_to_int<ga_u2, int> {};
template <> struct ga_to<ga_i4> : ga_to_int<ga_i4, int> {};
template <> struct ga_to<ga_u4> : ga_to_int<ga_u4, long long> {};
template <> struct ga_to<ga_i8> : ga_to_int<ga_i8, long long> {};
template <> struct ga_to<ga_u8> : ga_to_int<ga_u8, long long> {
    using ga_to_int<ga_u8, long long>::f;
    GA_DEV static ga_u8 f(float v) { return f((double)v); }
    GA_DEV static ga_u8 f(double v) {
        return v >= 9223372036854775808.0 ? ga_ftou64_high(v) : (ga_u8)ga_ftoi<long long>(v);
    }
    GA_DEV static ga_u8 f(ga_c8 v) { return f((double)v.re); }
    GA_DEV static ga_u8 f(ga_c16 v) { return f(v.re); }
};

template <> struct ga_to<ga_b1> {
    template <class T> GA_DEV static ga_b1 f(T v) {
        ga_b1 r;
        r.v = (v != 0) ? 1 : 0;
        return r;
    }
    GA_DEV static ga_b1 f(bool v) { ga_b1 r; r.v = v ? 1 : 0; return r; }
    GA_DEV static ga_b1 f(ga_c8 v) { ga_b1 r; r.v = (v.re != 0 || v.im != 0) ? 1 : 0; return r; }
    GA_DEV static ga_b1 f(ga_c16 v) { ga_b1 r; r.v = (v.re != 0 || v.im != 0) ? 1 : 0; return r; }
};

template <> struct ga_to<ga_f4> {
    GA_DEV static float f(bool v) { return v ? 1.0f : 0.0f; }
    GA_DEV static float f(long long v) { return (float)v; }
    GA_DEV static float f(unsigned long long v) { return (float)v; }
    GA_DEV static float f(float v) { return v; }
    GA_DEV static float f(double v) { return (float)v; }
    GA_DEV static float f(ga_c8 v) { return v.re; }
    GA_DEV static float f(ga_c16 v) { return (float)v.re; }
};

template <> struct ga_to<ga_f8> {
    GA_DEV static double f(bool v) { return v ? 1.0 : 0.0; }
    GA_DEV static double f(long long v) { return (double)v; }
    GA_DEV static double f(unsigned long long v) { return (double)v; }
    GA_DEV static double f(float v) { return (double)v; }
    GA_DEV static double f(double v) { return v; }
    GA_DEV static double f(ga_c8 v) { return (double)v.re; }
    GA_DEV static double f(ga_c16 v) { return v.re; }
};

template <> struct ga_to<ga_f2> {
    GA_DEV static ga_f2 h(unsigned short b) { ga_f2 r; r.bits = b; return r; }
    GA_DEV static ga_f2 f(bool v) { return h(v ? 0x3c00u : 0u); }
    GA_DEV static ga_f2 f(long long v) { return h(ga_float_to_half((float)v)); }
    GA_DEV static ga_f2 f(unsigned long long v) { return h(ga_float_to_half((float)v)); }
    GA_DEV static ga_f2 f(float v) { return h(ga_float_to_half(v)); }
    GA_DEV static ga_f2 f(double v) { return h(ga_double_to_half(v)); }
    GA_DEV static ga_f2 f(ga_c8 v) { return h(ga_float_to_half(v.re)); }
    GA_DEV static ga_f2 f(ga_c16 v) { return h(ga_double_to_half(v.re)); }
};

template <> struct ga_to<ga_c8> {
    GA_DEV static ga_c8 c(float re) { ga_c8 r; r.re = re; r.im = 0.0f; return r; }
    template <class T> GA_DEV static ga_c8 f(T v) { return c(ga_to<ga_f4>::f(v)); }
    GA_DEV static ga_c8 f(ga_c8 v) { return v; }
    GA_DEV static ga_c8 f(ga_c16 v) { ga_c8 r; r.re = (float)v.re; r.im = (float)v.im; return r; }
};

template <> struct ga_to<ga_c16> {
    GA_DEV static ga_c16 c(double re) { ga_c16 r; r.re = re; r.im = 0.0; return r; }
    template <class T> GA_DEV static ga_c16 f(T v) { return c(ga_to<ga_f8>::f(v)); }
    GA_DEV static ga_c16 f(ga_c8 v) { ga_c16 r; r.re = v.re; r.im = v.im; return r; }
    GA_DEV static ga_c16 f(ga_c16 v) { return v; }
};

// Same-type moves never convert (raw units, including ga_v16).
template <class D, class S> struct ga_cvt_impl {
    GA_DEV static D f(S s) { return ga_to<D>::f(ga_val(s)); }
};
template <class T> struct ga_cvt_impl<T, T> {
    GA_DEV static T f(T s) { return s; }
};

template <class D, class S> GA_DEV D ga_cvt(S s) { return ga_cvt_impl<D, S>::f(s); }

// ----------------------------------------------------------- loads, stores
// AL: the address is aligned to the element size (checked on the host); the
// unaligned variant moves bytes one at a time.
// Address of element i of T at p: 64-bit arithmetic, as p[i] on a T* would
// compute it (mul.wide for 32-bit i).
template <class T, class I> GA_DEV const char* ga_elem(const char* p, I i) {
    return p + (long long)i * (long long)sizeof(T);
}
template <class T, class I> GA_DEV char* ga_elem(char* p, I i) {
    return p + (long long)i * (long long)sizeof(T);
}

template <class T, bool AL> GA_DEV T ga_load(const char* p) {
    if (AL) {
        return *ga_gread<T>(p);
    } else {
        union { T t; unsigned char b[sizeof(T)]; } u;
#pragma unroll
        for (int i = 0; i < (int)sizeof(T); ++i) u.b[i] = *ga_gread<unsigned char>(p + i);
        return u.t;
    }
}

template <class T, bool AL> GA_DEV void ga_store(char* p, T v) {
    if (AL) {
        *ga_gwrite<T>(p) = v;
    } else {
        union { T t; unsigned char b[sizeof(T)]; } u;
        u.t = v;
#pragma unroll
        for (int i = 0; i < (int)sizeof(T); ++i) *ga_gwrite<unsigned char>(p + i) = u.b[i];
    }
}

// Four elements moved as one aligned vector access (up to 16 bytes per
// instruction; larger element types are split by the compiler).
template <class T> struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) ga_vec4 {
    T v[4];
};

// ---------------------------------------------------------- index division
// 32-bit indices divide by a shape extent with a precomputed multiplier
// (Granlund-Montgomery, as PyTorch's IntDivider): q = (umulhi(n, m) + n) >> s,
// exact for 0 <= n < 2^31 and 1 <= d < 2^31.  The host computes m and s.
// 64-bit indices use the hardware division.
GA_DEV unsigned int ga_umulhi(unsigned int a, unsigned int b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (unsigned int)(((unsigned long long)a * b) >> 32);
#endif
}

// __byte_perm (PRMT): byte n of the result is byte ((s >> 4n) & 7) of the
// 8-byte value y:x (bytes 0..3 of x, then 4..7 of y).  Selector nibbles are
// below 8 wherever it is used (no sign replication).
GA_DEV unsigned int ga_prmt(unsigned int x, unsigned int y, unsigned int s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned int r = 0;
    for (int n = 0; n < 4; ++n)
        r |= (unsigned int)((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    return r;
#endif
}

GA_DEV int ga_div(int n, int d, unsigned int magic, unsigned int shift) {
    (void)d;
    return (int)((ga_umulhi((unsigned int)n, magic) + (unsigned int)n) >> shift);
}

GA_DEV long long ga_div(long long n, long long d, unsigned int, unsigned int) {
    return n / d;
}

// The kernel parameter block of the N-d kernels (passed by value).  Strides
// are in bytes; `magic`/`shift` are used by 32-bit index kernels only.
template <int ND, class I> struct ga_nd_args {
    char* dst;
    const char* src;
    I n;
    I shape[ND];
    I dst_strides[ND];
    I src_strides[ND];
    unsigned int magic[ND];
    unsigned int shift[ND];
};

// Byte offsets of the C-order linear index i in both operands.
template <int ND, class I>
GA_DEV void ga_offsets(const ga_nd_args<ND, I>& a, I i, I& doff, I& soff) {
    I d_acc = 0, s_acc = 0, rem = i;
#pragma unroll
    for (int k = ND - 1; k >= 1; --k) {
        I q = ga_div(rem, a.shape[k], a.magic[k], a.shift[k]);
        I r = rem - q * a.shape[k];
        d_acc += r * a.dst_strides[k];
        s_acc += r * a.src_strides[k];
        rem = q;
    }
    doff = d_acc + rem * a.dst_strides[0];
    soff = s_acc + rem * a.src_strides[0];
}

#define GA_BLOCK 256
#define GA_UNROLL 4
