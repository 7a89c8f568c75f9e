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
        char spec[40];
        size_t k = 0;
        spec[k++] = '%';
        while (f[j] && strchr("-+ #0", f[j]) && k < 20) spec[k++] = f[j++];
        while (f[j] && (strchr("0123456789.", f[j])) && k < 30) spec[k++] = f[j++];
        int longs = 0;
        while (f[j] && strchr("lhzjtL", f[j])) {
            if (strchr("lzjt", f[j])) ++longs;
            ++j;
        }
        const char conv = f[j];
        if (!conv) break;
        i = j + 1;
        if (conv == '%') {
            out[o++] = '%';
            continue;
        }
        int w;
        if (strchr("diuxXoc", conv)) {
            w = longs ? 8 : 4;
        } else if (strchr("feEgGaAFsp", conv)) {
            w = 8;
        } else {
            trap(t, line, "vprintf: a conversion the simulator does not know");
        }
        off = (off + w - 1) & ~(uint64_t)(w - 1);
        const char* src = genptr(t, args + off, w, 0, line);
        off += w;
        ++count;
        const size_t room = sizeof out - o;
        int r = 0;
        if (strchr("diuxXoc", conv)) {
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'c' ? 'c' : conv;
            spec[k] = 0;
            if (conv == 'c') {
                spec[k - 3] = 'c';
                spec[k - 2] = 0;
                r = snprintf(out + o, room, spec, (int)load<int32_t>(src));
            } else if (strchr("di", conv)) {
                long long v = w == 8 ? load<int64_t>(src) : load<int32_t>(src);
                r = snprintf(out + o, room, spec, v);
            } else {
                unsigned long long v = w == 8 ? load<uint64_t>(src) : load<uint32_t>(src);
                r = snprintf(out + o, room, spec, v);
            }
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
    if (L->printf_buf && L->printf_len < L->printf_cap) {
        const size_t m = o < L->printf_cap - L->printf_len ? o : L->printf_cap - L->printf_len;
        memcpy(L->printf_buf + L->printf_len, out, m);
        L->printf_len += m;
    }
    return count;
}

}  // namespace ptx
