// The PTX executor's interpreter: runs a module's decoded form (ptx/_decode.py)
// without compiling the module.
//
// Built once per toolchain (ptx/_interp.py), after the runtime support
// headers (ptxrt.h, ptx_sync.h, ptx_num.h, ptx_printf.h), and run by the
// same fiber runtime as a translated build: ga_ptx_interp is an entry with
// the runtime's signature, whose launch record (ptx::Launch) names the
// decoded entry in `code`.  Everything an instruction does is a handler --
// the C++ the translator's own instruction writers produce for it, its
// operands in slots (ptx/_slots.py), compiled once per form for every module
// that uses it -- so a translated build and this interpreter run the same
// code per instruction.  What this file does itself is what the translator
// writes around the instructions: a function's frame (registers, .local
// frames in declaration order, zeroed .param arrays), guards, branches (a
// loop's branch lets the block's other threads run every kSpinEvery-th time,
// ptx::spin), return, exit and calls of the module's functions (direct, or
// through a register: its address looked up among the prototype's functions), and the
// entry's thread lifecycle (ptx::begin, ptx::end, the local arena).
#include <alloca.h>

namespace ptx {
namespace interp {

typedef void (*Handler)(Thread*, uint64_t*, const uint64_t*, char* const*, char*);
enum Op : uint32_t { HANDLER = 0, BRA = 1, RET = 2, EXIT = 3, CALL = 4, ICALL = 5 };

// One step (ptx/_interp.py mirrors these layouts).
struct Step {
    Handler fn;
    const uint64_t* k;  // the step's constants: K[0] its line (handlers); a call's arguments
    uint32_t op, guard, neg, target, back, line;
};
struct Local {
    uint64_t size, align;
    uint32_t slot, line;
};
struct Func {
    const Step* steps;
    const Local* locals;
    uint32_t nlocals, nregs, param_bytes, max_args;
};
struct Entry {
    const Func* funcs;
    uint64_t func;
    uint64_t local_bytes;
};

const uint64_t kLocalOnStack = 16 << 10;  // _emit.LOCAL_ON_STACK

static void run(Thread* T, const Func* funcs, uint32_t fi, char* const* A) {
    const Func& f = funcs[fi];
    uint64_t* R = static_cast<uint64_t*>(alloca(8 * (size_t)f.nregs));
    char* PB = nullptr;
    if (f.param_bytes) {
        PB = reinterpret_cast<char*>(
            (reinterpret_cast<uintptr_t>(alloca(f.param_bytes + 16)) + 15) & ~(uintptr_t)15);
        memset(PB, 0, f.param_bytes);
    }
    char** av = static_cast<char**>(alloca(sizeof(char*) * (f.max_args ? f.max_args : 1)));
    for (uint32_t i = 0; i < f.nlocals; ++i) {
        const Local& l = f.locals[i];
        R[l.slot] = kLocal + frame(T, l.size, l.align, l.line);
    }
    const uint64_t sp0 = T->sp;
    uint32_t spins = 0;
    const Step* s = f.steps;
    for (;;) {
        if (s->guard && *reinterpret_cast<const bool*>(R + (s->guard - 1)) == (s->neg != 0)) {
            ++s;
            continue;
        }
        switch (s->op) {
            case HANDLER:
                s->fn(T, R, s->k, A, PB);
                ++s;
                break;
            case BRA:
                if (s->back && __builtin_expect(++spins >= kSpinEvery, 0)) {
                    spins = 0;
                    spin(T, s->line);
                }
                s = f.steps + s->target;
                break;
            case RET:
                T->sp = sp0;
                return;
            case EXIT:
                throw Exit();
            case CALL: {  // k = [argument count, offsets of the .param arrays in PB]
                const uint32_t n = (uint32_t)s->k[0];
                for (uint32_t i = 0; i < n; ++i) av[i] = PB + s->k[1 + i];
                run(T, funcs, s->target, av);
                ++s;
                break;
            }
            default: {  // ICALL: target = the address register's slot; k = [argument count,
                        // .param offsets, number of callees, (address, function index | skip << 32)...]
                const uint32_t n = (uint32_t)s->k[0];
                for (uint32_t i = 0; i < n; ++i) av[i] = PB + s->k[1 + i];
                const uint64_t fp = R[s->target];
                const uint64_t nc = s->k[1 + n];
                const uint64_t* c = s->k + 2 + n;
                uint64_t fi = ~0ull;
                for (uint64_t j = 0; j < nc; ++j)
                    if (c[2 * j] == fp) {
                        fi = c[2 * j + 1];
                        break;
                    }
                if (fi == ~0ull) bad_call(T, fp, s->line);
                run(T, funcs, (uint32_t)fi, av + (fi >> 32));  // >> 32: result arrays skipped
                ++s;
                break;
            }
        }
    }
}

}  // namespace interp
}  // namespace ptx

// The fiber runtime's entry for an interpreted kernel: the decoded entry is
// the launch record's `code` (ptx::interp::Entry).
GA_HOST_EXPORT void ga_ptx_interp(ga_host_rt* rt, const void* p) {
    ptx::Launch* L = (ptx::Launch*)p;
    const ptx::interp::Entry* e = static_cast<const ptx::interp::Entry*>(L->code);
    ptx::Thread t;
    const uint64_t nbytes = e->local_bytes;
    if (nbytes <= ptx::interp::kLocalOnStack) {  // on the fiber's stack, as a translated build
        char* local_ = reinterpret_cast<char*>(
            (reinterpret_cast<uintptr_t>(alloca(nbytes + 16)) + 15) & ~(uintptr_t)15);
        ptx::begin(&t, rt, L, local_, nbytes);
    } else {
        ptx::begin(&t, rt, L, nullptr, nbytes);
        t.local = ptx::pool_slice(&t, nbytes);
    }
    try {
        ptx::interp::run(&t, e->funcs, (uint32_t)e->func, nullptr);
    } catch (const ptx::Exit&) {
    }
    ptx::end(&t);
}
