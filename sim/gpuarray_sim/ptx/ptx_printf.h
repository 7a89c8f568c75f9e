// vprintf: device printf into the launch's buffer.
// Part of the runtime support of kernels translated from PTX (see ptxrt.h;
// the build inlines ptxrt.h, ptx_sync.h, ptx_num.h and ptx_printf.h in that order).
#pragma once
#include "ptxrt.h"

namespace ptx {

// ------------------------------------------------------------- printf
// vprintf(format, arguments): formats into the launch's buffer (the
// simulator writes it to stdout when the launch ends, as the device's
// printf buffer is flushed at a synchronisation).  The arguments are
// packed as CUDA packs them: each at its size's alignment, floats as
// doubles.  Returns the number of arguments, as CUDA's vprintf does.
inline int vprintf(Thread* t, uint64_t fmt, uint64_t args, uint32_t line) {
    char f[1024];
    size_t n = 0;
    for (; n < sizeof f - 1; ++n) {
        f[n] = *genptr(t, fmt + n, 1, 0, line);
        if (!f[n]) break;
    }
    f[n] = 0;
    char out[4096];
    size_t o = 0;
    uint64_t off = 0;
    int count = 0;
    for (size_t i = 0; f[i] && o < sizeof out - 1;) {
        if (f[i] != '%') {
            out[o++] = f[i++];
            continue;
        }
        size_t j = i + 1;
        char spec[64];
        size_t k = 0;
        spec[k++] = '%';
        // an argument of w bytes at its alignment (CUDA packs them so)
        auto arg = [&](uint64_t w) -> const char* {
            off = (off + w - 1) & ~(w - 1);
            const char* p = genptr(t, args + off, w, 0, line);
            off += w;
            ++count;
            return p;
        };
        while (f[j] && strchr("-+ #0", f[j]) && k < 8) spec[k++] = f[j++];
        for (int part = 0; part < 2; ++part) {  // width, then .precision; '*' takes an int
            if (part == 1) {
                if (f[j] != '.') break;
                spec[k++] = f[j++];
            }
            if (f[j] == '*') {
                ++j;
                k += (size_t)snprintf(spec + k, 16, "%d", (int)load<int32_t>(arg(4)));
            } else {
                while (f[j] >= '0' && f[j] <= '9' && k < 40) spec[k++] = f[j++];
            }
        }
        int len = 0;  // -2 hh, -1 h, 0 none, 1 l/ll/z/j/t (64 bits: LP64), 2 L
        while (f[j] && strchr("lhzjtL", f[j])) {
            len = f[j] == 'h' ? (len < 0 ? -2 : -1) : f[j] == 'L' ? 2 : 1;
            ++j;
        }
        const char conv = f[j];
        if (!conv) break;
        i = j + 1;
        if (conv == '%') {
            out[o++] = '%';
            continue;
        }
        if (!strchr("diuxXocfeEgGaAFsp", conv))
            trap(t, line, "vprintf: a conversion the simulator does not know");
        const bool integer = strchr("diuxXoc", conv) != nullptr;
        const char* src = arg(integer ? (len == 1 ? 8 : 4) : 8);
        const size_t room = sizeof out - o;
        int r = 0;
        if (conv == 'c') {
            spec[k++] = 'c';
            spec[k] = 0;
            r = snprintf(out + o, room, spec, (int)load<int32_t>(src));
        } else if (integer) {
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv;
            spec[k] = 0;
            const bool sgn = conv == 'd' || conv == 'i';
            const uint64_t raw = len == 1 ? load<uint64_t>(src) : load<uint32_t>(src);
            // h / hh: the promoted int printed as a short / char, as printf converts it
            const uint64_t v = len == -1 ? (sgn ? (uint64_t)(int64_t)(int16_t)raw : (uint16_t)raw)
                             : len == -2 ? (sgn ? (uint64_t)(int64_t)(int8_t)raw : (uint8_t)raw)
                             : len == 1 ? raw : (sgn ? (uint64_t)(int64_t)(int32_t)raw : raw);
            if (sgn)
                r = snprintf(out + o, room, spec, (long long)v);
            else
                r = snprintf(out + o, room, spec, (unsigned long long)v);
        } else if (conv == 's') {
            const uint64_t sp = load<uint64_t>(src);
            char sbuf[512];
            size_t m = 0;
            if (sp == 0) {
                strcpy(sbuf, "(null)");
            } else {
                for (; m < sizeof sbuf - 1; ++m) {
                    sbuf[m] = *genptr(t, sp + m, 1, 0, line);
                    if (!sbuf[m]) break;
                }
                sbuf[m] = 0;
            }
            spec[k++] = 's';
            spec[k] = 0;
            r = snprintf(out + o, room, spec, sbuf);
        } else if (conv == 'p') {
            r = snprintf(out + o, room, "0x%llx", (unsigned long long)load<uint64_t>(src));
        } else {
            spec[k++] = conv;
            spec[k] = 0;
            r = snprintf(out + o, room, spec, load<double>(src));
        }
        if (r > 0) o += (size_t)r < room ? (size_t)r : room - 1;
    }
    Launch* L = t->L;
    if (L->printf_buf) {  // a line's bytes reserved at once: workers' lines never interleave
        uint64_t at = __atomic_load_n(L->printf_at, __ATOMIC_RELAXED), m;
        do {
            if (at >= L->printf_cap) return count;
            m = o < L->printf_cap - at ? o : L->printf_cap - at;
        } while (!__atomic_compare_exchange_n(L->printf_at, &at, at + m, false, __ATOMIC_RELAXED,
                                              __ATOMIC_RELAXED));
        memcpy(L->printf_buf + at, out, m);
    }
    return count;
}

}  // namespace ptx
