/* fuzz_abi.c - libFuzzer harness for the pyautodiff C ABI (not part of CI).
 *
 * Build and run (clang from Debian: apt-get install -y clang), from the repo root:
 *
 *   clang -std=c11 -g -O1 -fno-omit-frame-pointer -pthread \
 *         -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *         -fsanitize-recover=signed-integer-overflow \
 *         -Inative/include -Inative/src \
 *         -mavx2 -mfma -mavx512f -mavx512dq -mavx512bw -mavx512vl \
 *         native/tests/fuzz_abi.c native/src/[a-z]*.c -lm -o build/fuzz_abi
 *   mkdir -p build/fuzz_corpus
 *   ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
 *   UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=native/tests/fuzz_abi.supp \
 *       build/fuzz_abi -max_total_time=180 -rss_limit_mb=0 -timeout=10 \
 *       -max_len=512 build/fuzz_corpus
 *
 * (The one command above spends over 20 minutes compiling gemm_avx512.c with
 * the sanitizers on 2 cores.  Compiling each file to an object instead, the
 * two gemm_avx*.c kernel files with -O2 -fsanitize=fuzzer-no-link only and
 * the others with -fsanitize=fuzzer-no-link,address,undefined and the flags
 * above, then linking the objects with -fsanitize=fuzzer,address,undefined
 * -lm, takes about a minute; the GEMM kernels then run unchecked.)
 *
 * (fuzz_abi.supp suppresses only the known wrap-around of integer tensor
 * arithmetic in the kernels, which is why signed-integer-overflow is built
 * recoverable; halt_on_error=1 still stops at any other finding.  The ISA
 * flags only let the *_avx2.c / *_avx512.c kernels compile in one command
 * (the library still picks its kernels by cpuid at run time, but on a CPU
 * without AVX-512 build those files separately so the rest is not compiled
 * for AVX-512).  A crash input is
 * written to ./crash-<sha1>; replay it with `build/fuzz_abi crash-<sha1>`.)
 *
 * Without clang: gcc with -DFUZZ_STANDALONE gives a main() that feeds
 * random inputs (or replays the files named on the command line):
 *
 *   gcc -std=c11 -g -O1 -pthread -fsanitize=address,undefined -DFUZZ_STANDALONE \
 *       -fno-sanitize-recover=all -fsanitize-recover=signed-integer-overflow \
 *       -Inative/include -Inative/src -mavx2 -mfma -mavx512f -mavx512dq \
 *       -mavx512bw -mavx512vl native/tests/fuzz_abi.c native/src/[a-z]*.c -lm \
 *       -o build/fuzz_abi_gcc
 *   ASAN_OPTIONS=allocator_may_return_null=1 \
 *   UBSAN_OPTIONS=halt_on_error=1:suppressions=native/tests/fuzz_abi.supp \
 *       build/fuzz_abi_gcc 200000   # iterations
 *
 * Each input is decoded into a sequence of ABI calls over a small pool of
 * handles: tensor creation with arbitrary shapes / dtypes / data, ad_op_call
 * with arbitrary op ids, iargs and fargs, ad_unary / ad_binary /
 * ad_scalar_op, the quick calls (each result must be the ordinary call's, to
 * the bit), views, ad_backward / _ex (create_graph) / _hooked (a callback
 * that may stop the walk), the GradStore functions, ad_var_set,
 * ad_tensor_detach, ad_sorted_nodes, the graph introspection getters and
 * memory counters, custom ops (ad_custom_record; a backward that hands back
 * tensors of any shape and dtype, NULLs or a failure; each node's release
 * must run exactly once), the thread count, grad and anomaly mode, allocation
 * failure injection, the op registry (ad_op_info of any value), tensors over
 * external memory (NULL data, zero-length and strided layouts, misaligned
 * addresses; the release callback must run exactly once per storage), the
 * in-place updates (ad_var_axpy and the fused optimizers over any pool
 * tensors, NULLs included), file mappings (bad descriptors, then tensors at
 * any offset/dtype/shape of a real file), DLPack export and re-import, and
 * NULL handles, NULL out-pointers and zero lengths at
 * every entry point that takes a pointer (each must be refused with
 * AD_ERR_VALUE, or read as the header documents for getters).  Every status
 * is checked: it must be a known code, a
 * failing call must leave its out-pointer NULL and set a message, a
 * successful one must give a handle, and every element of every tensor
 * returned is read through its shape and strides (so a view that points
 * outside its storage is caught by ASan).  All handles are released at the
 * end of each input and the live-tensor / live-byte counters must return to
 * where they were, so a leak aborts.
 */
#define _POSIX_C_SOURCE 200809L /* fileno */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AD_TESTING /* ad_testing_fail_alloc_after */
#include "pyautodiff.h"

#define NT 16         /* tensor slots */
#define NG 4          /* gradstore slots */
#define KEEP_MAX 65536 /* results with more elements are released at once */

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned u8(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static uint64_t u64(reader *r) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | u8(r);
    return v;
}

/* Mostly small ints (dims, sizes, indices), sometimes extreme ones. */
static int64_t i64(reader *r) {
    unsigned b = u8(r);
    if (b < 224) return (int64_t)(b % 16) - 4; /* -4 .. 11 */
    /* never a size between 100 and 2**40: those would really be allocated */
    static const int64_t big[] = {INT64_MAX, INT64_MIN, (int64_t)1 << 40, -((int64_t)1 << 40),
                                  (int64_t)1 << 62, (int64_t)1 << 42, (int64_t)1 << 41,
                                  (int64_t)INT32_MIN, -1, 0, 1, 64, 65, 2, 3, 100};
    if (b < 240) return big[b - 224];
    return (int64_t)u64(r) | ((int64_t)1 << 40); /* raw but never a moderate size */
}

static double f64(reader *r) {
    unsigned b = u8(r);
    static const double special[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 1e-310, 1e308,
                                     -1e308, 1e30, 4.9e-324, 0.1, 100.0, 7.0};
    if (b < 200) return special[b % 16];
    if (b < 210) return NAN;
    if (b < 220) return INFINITY;
    if (b < 230) return -INFINITY;
    if (b < 240) return (double)i64(r);
    uint64_t bits = u64(r);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static void die(const char *what, int line) {
    fprintf(stderr, "fuzz_abi: contract violation at line %d: %s (last error: %s)\n", line, what,
            ad_last_error());
    abort();
}
#define REQUIRE(c) \
    do {           \
        if (!(c)) die(#c, __LINE__); \
    } while (0)

static ad_tensor *T[NT];
static ad_gradstore *G[NG];
static volatile uint64_t sink;

/* Reads every element through shape and strides: ASan flags a view that
   reaches outside its storage. */
static void touch(const ad_tensor *t) {
    int nd = ad_tensor_ndim(t);
    REQUIRE(nd >= 0 && nd <= 64);
    int64_t shape[64], strides[64], idx[64] = {0};
    ad_tensor_shape(t, shape);
    ad_tensor_strides(t, strides);
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        REQUIRE(shape[i] >= 0);
        numel *= shape[i];
    }
    REQUIRE(numel == ad_tensor_numel(t));
    int dt = ad_tensor_dtype(t);
    size_t es = ad_dtype_size(dt);
    REQUIRE(es == 1 || es == 4 || es == 8);
    if (numel == 0 || numel > KEEP_MAX) return;
    const uint8_t *base = ad_tensor_data(t);
    REQUIRE(base != NULL);
    for (int64_t k = 0; k < numel; k++) {
        int64_t off = 0;
        for (int i = 0; i < nd; i++) off += idx[i] * strides[i];
        const uint8_t *e = base + off * (int64_t)es;
        uint64_t v = 0;
        memcpy(&v, e, es);
        sink += v;
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < shape[i]) break;
            idx[i] = 0;
        }
    }
    if (numel <= 4096) { /* and the row-major copy */
        uint8_t buf[4096 * 8];
        REQUIRE(ad_tensor_copy_to(t, buf, (size_t)numel * es) == AD_OK);
        REQUIRE(ad_tensor_copy_to(t, buf, (size_t)numel * es + 1) != AD_OK);
    }
}

static long quick_taken; /* quick calls that did not decline (the standalone run reports it) */

/* Two results of one computation: the same dtype, shape and bytes. */
static void same_bits(const ad_tensor *x, const ad_tensor *y, int line) {
    int nd = ad_tensor_ndim(x);
    int64_t sx[64], sy[64];
    if (ad_tensor_dtype(x) != ad_tensor_dtype(y) || nd != ad_tensor_ndim(y))
        die("quick and ordinary results differ in dtype or rank", line);
    ad_tensor_shape(x, sx);
    ad_tensor_shape(y, sy);
    if (memcmp(sx, sy, (size_t)nd * sizeof sx[0]))
        die("quick and ordinary results differ in shape", line);
    int64_t numel = ad_tensor_numel(x);
    size_t es = ad_dtype_size(ad_tensor_dtype(x));
    if (numel > 4096) return;
    static uint8_t bx[4096 * 8], by[4096 * 8];
    REQUIRE(ad_tensor_copy_to(x, bx, (size_t)numel * es) == AD_OK);
    REQUIRE(ad_tensor_copy_to(y, by, (size_t)numel * es) == AD_OK);
    if (memcmp(bx, by, (size_t)numel * es)) die("quick and ordinary results differ", line);
}

/* Checks a call's status and out-pointer; keeps or releases the result. */
static void result(ad_status st, ad_tensor *out, int slot, int line) {
    if (st < AD_OK || st > AD_ERR_INTERNAL) die("unknown status", line);
    if (st == AD_ERR_INTERNAL) die("AD_ERR_INTERNAL", line);
    if (st != AD_OK) {
        if (out) die("failed call returned a handle", line);
        if (!ad_last_error() || !ad_last_error()[0]) die("failure without a message", line);
        return;
    }
    if (!out) die("successful call returned no handle", line);
    touch(out);
    (void)ad_tensor_id(out);
    (void)ad_tensor_op(out);
    (void)ad_tensor_site(out);
    (void)ad_tensor_version(out);
    (void)ad_tensor_is_contiguous(out);
    if (ad_tensor_numel(out) > KEEP_MAX) {
        ad_tensor_release(out);
        return;
    }
    slot &= NT - 1;
    ad_tensor_release(T[slot]);
    T[slot] = out;
}
#define RESULT(st, out, slot) result((st), (out), (slot), __LINE__)

static ad_tensor *pick(reader *r) {
    unsigned b = u8(r);
    if (b == 255) return NULL; /* the library must reject a NULL input */
    ad_tensor *t = T[b % NT];
    if (!t)
        for (int i = 0; i < NT && !t; i++) t = T[i];
    return t;
}

static int read_shape(reader *r, int64_t *shape) {
    unsigned b = u8(r);
    int nd = b < 250 ? (int)(b % 5) : b == 250 ? -1 : b == 251 ? 64 : b == 252 ? 65 : 8;
    for (int i = 0; i < nd && i < 65; i++) {
        unsigned c = u8(r);
        shape[i] = c < 240 ? (int64_t)(c % 6) : i64(r);
    }
    return nd;
}

static int read_dtype(reader *r) {
    unsigned b = u8(r);
    return b < 250 ? (int)(b % 6) : b == 250 ? -1 : b == 251 ? 6 : (int)b;
}

static void gs_check(ad_status st, int line) {
    if (st < AD_OK || st > AD_ERR_INTERNAL || st == AD_ERR_INTERNAL) die("gradstore status", line);
}


/* ad_backward_hooked's callback (case 14): touches what it is given and
   fails (AD_ERR_VALUE) on call number hook_stop + 1, when hook_stop >= 0. */
static int hook_stop, hook_calls;
static ad_status hook_ready(void *ctx, const ad_tensor *t, const ad_tensor *grad) {
    REQUIRE(ctx == &hook_calls && t && grad);
    touch(grad);
    REQUIRE(ad_tensor_ndim(t) == ad_tensor_ndim(grad));
    return hook_calls++ == hook_stop ? AD_ERR_VALUE : AD_OK;
}

/* Custom ops (case 33): the backward's plan, and a count of the nodes made
   and of the release calls, which must match at the end of each input. */
typedef struct {
    int fail;         /* return AD_ERR_VALUE */
    uint8_t slot[4];  /* grads[i]: pool slot slot[i] % NT (255: NULL) */
} custom_plan;
static int64_t custom_made, custom_released;
static ad_status custom_backward(void *ctx, const ad_tensor *grad, const ad_tensor *out,
                                 ad_tensor **grads, int n) {
    const custom_plan *c = ctx;
    REQUIRE(grad && out && n >= 0 && n <= 4 && (n == 0 || grads));
    touch(grad);
    if (c->fail) return AD_ERR_VALUE;
    for (int i = 0; i < n; i++) {
        ad_tensor *t = c->slot[i] == 255 ? NULL : T[c->slot[i] % NT];
        if (t) ad_tensor_retain(t);
        grads[i] = t;
    }
    return AD_OK;
}
static void custom_release(void *ctx) {
    free(ctx);
    custom_released++;
}

/* External memory (case 27): a buffer the tensors view, and a release
   callback that counts, so that every storage made over it is released
   exactly once by the end of each input. */
static _Alignas(64) uint8_t ext_buf[8192];
static int64_t ext_made, ext_released;
static void ext_release(void *ctx) { ++*(int64_t *)ctx; }

/* File mappings (case 29): a small regular file, opened once. */
static const uint8_t map_bytes[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0x80, 0xff, 0x7f, 0x3f};
static int map_fd = -1;
static void map_init(void) {
    static int done;
    if (done) return;
    done = 1;
    FILE *f = tmpfile();
    if (!f) return;
    if (fwrite(map_bytes, 1, sizeof map_bytes, f) != sizeof map_bytes || fflush(f)) return;
    map_fd = fileno(f); /* kept open for the process's life */
}

static void one_input(reader *r) {
    ad_tensor *out = NULL;
    int64_t shape[72];
    unsigned cmd = u8(r);
    unsigned slot = u8(r);
    ad_status st;
    switch (cmd % 34) {
    case 0: { /* from data */
        int dt = read_dtype(r);
        int nd = read_shape(r, shape);
        uint8_t buf[512];
        size_t want = 1;
        int ok = nd >= 0 && nd <= 64;
        for (int i = 0; ok && i < nd; i++) {
            if (shape[i] < 0 || shape[i] > 512) ok = 0;
            else want *= (size_t)shape[i];
        }
        size_t es = ad_dtype_size(dt);
        want *= es ? es : 1;
        unsigned how = u8(r);
        size_t nb = (ok && want <= sizeof buf) ? want : sizeof buf;
        if (how % 5 == 0) nb = how % 3 ? nb + 1 : (nb ? nb - 1 : 0); /* wrong byte count */
        for (size_t i = 0; i < nb && i < sizeof buf; i++) buf[i] = (uint8_t)u8(r);
        const void *data = (how % 7 == 0 || nb > sizeof buf) ? NULL : buf;
        if (!data && nb > sizeof buf) nb = want;
        st = ad_tensor_from_data(data, nb, dt, nd > 0 ? shape : NULL, nd, &out);
        RESULT(st, out, slot);
        break;
    }
    case 1: {
        int dt = read_dtype(r);
        int nd = read_shape(r, shape);
        double v = f64(r);
        st = ad_tensor_full(v, dt, shape, nd, &out);
        RESULT(st, out, slot);
        break;
    }
    case 2: {
        double a = f64(r), s = f64(r);
        int64_t n = i64(r);
        st = ad_tensor_arange(a, s, n, read_dtype(r), &out);
        RESULT(st, out, slot);
        break;
    }
    case 3: {
        int kind = (int)(u8(r) % 4) - 1;
        int dt = read_dtype(r);
        int nd = read_shape(r, shape);
        st = ad_tensor_random(kind, u64(r), dt, shape, nd, &out);
        RESULT(st, out, slot);
        break;
    }
    case 4: { /* Var (a NULL tensor must be refused) */
        ad_tensor *t = pick(r);
        st = ad_var_from_tensor(t, &out);
        RESULT(st, out, slot);
        break;
    }
    case 5:
    case 6:
    case 7:
    case 8: { /* generic op call */
        int op = (int)u8(r);
        if (op >= 250) op = op == 250 ? -1 : op == 251 ? AD_OP__COUNT : (int)u64(r);
        unsigned c = u8(r);
        int nin = (int)(c % 5);
        if (c >= 250) nin = c == 250 ? -1 : 9;
        const ad_tensor *in[9] = {0};
        for (int i = 0; i < nin && i < 9; i++) in[i] = pick(r);
        c = u8(r);
        int ni = (int)(c % 11);
        if (c >= 252) ni = c == 252 ? -1 : 65;
        int64_t iargs[72];
        for (int i = 0; i < ni && i < 72; i++) iargs[i] = i64(r);
        c = u8(r);
        int nf = (int)(c % 4);
        if (c >= 254) nf = -1;
        double fargs[4];
        for (int i = 0; i < nf && i < 4; i++) fargs[i] = f64(r);
        st = ad_op_call(op, in, nin, ni ? iargs : NULL, ni, nf ? fargs : NULL, nf, &out);
        RESULT(st, out, slot);
        break;
    }
    case 9: {
        ad_tensor *x = pick(r);
        st = ad_unary((int)u8(r) - 2, x, &out);
        RESULT(st, out, slot);
        break;
    }
    case 10:
    case 11: {
        int op = (int)u8(r) % 100;
        ad_tensor *a = pick(r), *b = pick(r);
        st = ad_binary(op, a, b, &out);
        RESULT(st, out, slot);
        break;
    }
    case 12: {
        int op = (int)u8(r) % 100;
        ad_tensor *x = pick(r);
        st = ad_scalar_op(op, x, f64(r), &out);
        RESULT(st, out, slot);
        break;
    }
    case 13: { /* views: slice / permute / reshape / broadcast with raw iargs */
        static const int vops[] = {AD_OP_SLICE, AD_OP_PERMUTE, AD_OP_RESHAPE, AD_OP_BROADCAST,
                                   AD_OP_CONTIGUOUS, AD_OP_TO_DTYPE, AD_OP_COPY};
        int op = vops[u8(r) % 7];
        const ad_tensor *in[1] = {pick(r)};
        int ni = (int)(u8(r) % 6);
        int64_t iargs[8];
        for (int i = 0; i < ni; i++) iargs[i] = i64(r);
        if (op == AD_OP_CONTIGUOUS || op == AD_OP_COPY) ni = 0;
        st = ad_op_call(op, in, 1, ni ? iargs : NULL, ni, NULL, 0, &out);
        RESULT(st, out, slot);
        break;
    }
    case 14: { /* backward; NULL root, NULL retain entries, a NULL retain array */
        ad_tensor *root = pick(r);
        ad_tensor *grad = u8(r) % 2 ? NULL : pick(r);
        const ad_tensor *keep[4];
        int nk = (int)(u8(r) % 6) - 1; /* -1 .. 4 */
        for (int i = 0; i < nk; i++) keep[i] = pick(r);
        unsigned how = u8(r);
        ad_gradstore *g = NULL;
        unsigned form = u8(r) % 4; /* ad_backward, _ex (create_graph or not), _hooked */
        int flags = form == 2 ? AD_BACKWARD_CREATE_GRAPH : 0;
        hook_stop = form == 3 ? (int)(u8(r) % 4) - 1 : -1; /* stop at the 1st..3rd call, or never */
        hook_calls = 0;
        const ad_tensor *const *ks = how % 7 == 0 ? NULL : keep;
        st = form == 0   ? ad_backward(root, grad, ks, nk, &g)
             : form == 3 ? ad_backward_hooked(root, grad, ks, nk, u8(r) % 2 ? flags : 0,
                                              u8(r) % 8 ? hook_ready : NULL, &hook_calls, &g)
                         : ad_backward_ex(root, grad, ks, nk, flags, &g);
        if (form == 3 && hook_stop >= 0 && hook_calls > hook_stop) {
            REQUIRE(st == AD_ERR_VALUE && g == NULL); /* the callback's status, no store */
            break;
        }
        if ((!root || nk < 0 || (how % 7 == 0 && nk > 0)) && st != AD_ERR_VALUE)
            die("backward accepted a NULL / negative argument", __LINE__);
        gs_check(st, __LINE__);
        if (st) {
            REQUIRE(g == NULL);
            break;
        }
        REQUIRE(g != NULL);
        unsigned s = slot % NG;
        ad_gradstore_release(G[s]);
        G[s] = g;
        break;
    }
    case 15: { /* gradstore ops */
        unsigned s = slot % NG;
        unsigned c = u8(r) % 8;
        if (!G[s] || c == 0) {
            ad_gradstore *g = NULL;
            st = ad_gradstore_new(&g);
            gs_check(st, __LINE__);
            if (!st) {
                ad_gradstore_release(G[s]);
                G[s] = g;
            }
            break;
        }
        ad_gradstore *g = G[s];
        ad_tensor *t = pick(r); /* may be NULL: refused with AD_ERR_VALUE */
        if (c == 1) {
            st = ad_gradstore_get(g, t, &out);
            gs_check(st, __LINE__);
            if (!st && out) RESULT(st, out, u8(r));
        } else if (c == 2) {
            ad_tensor *v = pick(r);
            st = ad_gradstore_insert(g, t, v);
            gs_check(st, __LINE__);
            if ((!t || !v) && st != AD_ERR_VALUE) die("insert accepted NULL", __LINE__);
        } else if (c == 3) {
            st = ad_gradstore_remove(g, t, u8(r) % 2 ? &out : NULL);
            gs_check(st, __LINE__);
            ad_tensor_release(out);
        } else if (c == 4) {
            REQUIRE(ad_gradstore_len(g) >= 0);
        } else if (c == 5) {
            ad_gradstore *src = G[u8(r) % NG];
            if (src) gs_check(ad_gradstore_extend(g, src), __LINE__);
        } else if (c == 6) {
            uint64_t id = 0;
            int64_t i = i64(r);
            st = ad_gradstore_item(g, i, &id, &out);
            gs_check(st, __LINE__);
            if (st) REQUIRE(out == NULL);
            else RESULT(st, out, u8(r));
        } else if (c == 7 && u8(r) % 2) { /* every entry at once */
            uint64_t *ids = NULL;
            ad_tensor **gv = NULL;
            int64_t n = -1;
            int with = u8(r) % 2;
            st = ad_gradstore_items(g, &ids, with ? &gv : NULL, &n);
            gs_check(st, __LINE__);
            if (!st) {
                REQUIRE(n == ad_gradstore_len(g) && ids != NULL);
                for (int64_t k = 0; k < n; k++) {
                    REQUIRE(ids[k] != 0);
                    if (with) {
                        touch(gv[k]);
                        ad_tensor_release(gv[k]);
                    }
                }
                ad_free(ids);
                ad_free(gv);
            }
        } else {
            ad_gradstore_release(g);
            G[s] = NULL;
        }
        break;
    }
    case 16: { /* Var.set */
        ad_tensor *v = pick(r), *src = pick(r);
        st = ad_var_set(v, src);
        if (st < 0 || st >= AD_ERR_INTERNAL) die("var_set status", __LINE__);
        if (!v || !src) {
            REQUIRE(st == AD_ERR_VALUE);
            break;
        }
        touch(v);
        break;
    }
    case 17: {
        ad_tensor *t = pick(r);
        st = ad_tensor_detach(t, &out);
        RESULT(st, out, slot);
        break;
    }
    case 18: { /* graph introspection and the memory counters */
        ad_tensor *t = pick(r);
        if (u8(r) % 2) {
            ad_tensor *par[8] = {0};
            int cap = (int)(u8(r) % 9), n = -1, output = -1;
            unsigned tracked = 0, saved = 0, ins = 0;
            st = ad_tensor_parents(t, cap ? par : NULL, cap, &n, &tracked, &saved);
            gs_check(st, __LINE__);
            if (!t) REQUIRE(st == AD_ERR_VALUE);
            if (!st) {
                REQUIRE(n >= 0 && (ad_tensor_op_name(t) || n == 0));
                for (int i = 0; i < cap && i < n; i++)
                    if (par[i]) {
                        touch(par[i]);
                        ad_tensor_release(par[i]);
                    }
                REQUIRE(ad_tensor_saved(t, &ins, &output) == AD_OK);
                REQUIRE(output == 0 || output == 1);
                REQUIRE(n > 0 || (ins == 0 && output == 0));
            }
            if (t) {
                REQUIRE(ad_tensor_is_external(t) == 0 || ad_tensor_is_external(t) == 1);
                REQUIRE(ad_tensor_is_readonly(t) <= ad_tensor_is_external(t));
            }
            ad_memory_stats_t ms;
            ad_memory_stats(&ms);
            REQUIRE(ms.live_bytes >= 0 && ms.peak_bytes >= ms.live_bytes && ms.saved_bytes >= 0);
            REQUIRE(ad_saved_var_bytes() >= 0);
            if (u8(r) % 8 == 0) ad_reset_peak_memory();
            break;
        }
        ad_tensor **nodes = NULL;
        int64_t n = -1;
        st = ad_sorted_nodes(t, &nodes, &n);
        gs_check(st, __LINE__);
        if (!st) {
            REQUIRE(n >= 0);
            for (int64_t i = 0; i < n; i++) {
                REQUIRE(nodes[i] != NULL);
                ad_tensor_release(nodes[i]);
            }
            ad_free(nodes);
        }
        break;
    }
    case 19: { /* release / retain */
        unsigned s = slot % NT;
        if (u8(r) % 2 && T[s]) {
            ad_tensor_retain(T[s]);
            ad_tensor_release(T[s]);
        }
        ad_tensor_release(T[s]);
        T[s] = NULL;
        break;
    }
    case 20: { /* grad mode, and the checkpoint strategy (2: unknown, rejected) */
        int b = u8(r);
        ad_set_grad_enabled(b % 2);
        st = ad_set_checkpoint_strategy((b >> 1) % 3, NULL);
        REQUIRE(((b >> 1) % 3 == 2) == (st == AD_ERR_VALUE));
        break;
    }
    case 21:
        ad_set_anomaly_enabled(u8(r) % 2);
        break;
    case 22: /* the next allocations: one of them fails */
        ad_testing_fail_alloc_after((int64_t)(u8(r) % 24));
        break;
    case 23: { /* NULL out-pointers, NULL handles and zero lengths at the
                  entry points that take them: refused, never a crash */
        ad_tensor *t = pick(r);
        unsigned which = u8(r) % 12;
        int64_t n = 0;
        uint64_t id = 0;
        ad_gradstore *g = G[slot % NG];
        switch (which) {
        case 0: REQUIRE(ad_tensor_from_data(NULL, 0, AD_FLOAT32, NULL, 0, NULL) == AD_ERR_VALUE); break;
        case 1: REQUIRE(ad_tensor_full(1.0, AD_FLOAT32, NULL, 1 + (int)(u8(r) % 3), &out) ==
                        AD_ERR_VALUE && !out); break;
        case 2: REQUIRE(ad_tensor_arange(0, 1, 3, AD_FLOAT32, NULL) == AD_ERR_VALUE); break;
        case 3: REQUIRE(ad_tensor_random(0, 1, AD_FLOAT32, NULL, 2, &out) == AD_ERR_VALUE); break;
        case 4: REQUIRE(ad_var_from_tensor(t, NULL) == AD_ERR_VALUE); break;
        case 5: REQUIRE(ad_tensor_detach(t, NULL) == AD_ERR_VALUE); break;
        case 6: REQUIRE(ad_sorted_nodes(t, NULL, &n) == AD_ERR_VALUE); break;
        case 7: REQUIRE(ad_gradstore_new(NULL) == AD_ERR_VALUE); break;
        case 8: /* a store's entry points with a NULL store or out-pointer */
            REQUIRE(ad_gradstore_get(NULL, t, &out) == AD_ERR_VALUE && !out);
            REQUIRE(ad_gradstore_len(NULL) == -1);
            REQUIRE(ad_gradstore_item(g, 0, NULL, &out) == AD_ERR_VALUE && !out);
            REQUIRE(ad_gradstore_item(NULL, 0, &id, &out) == AD_ERR_VALUE);
            REQUIRE(ad_gradstore_items(g, NULL, NULL, &n) == AD_ERR_VALUE);
            REQUIRE(ad_gradstore_extend(NULL, g) == AD_ERR_VALUE);
            if (g) REQUIRE(ad_gradstore_extend(g, NULL) == AD_ERR_VALUE);
            REQUIRE(ad_gradstore_remove(NULL, t, NULL) == AD_ERR_VALUE);
            break;
        case 9: /* copy_to: NULL destination, zero length */
            if (t) {
                size_t nb = (size_t)ad_tensor_numel(t) * ad_dtype_size(ad_tensor_dtype(t));
                REQUIRE((ad_tensor_copy_to(t, NULL, nb) == AD_OK) == (nb == 0));
            } else {
                REQUIRE(ad_tensor_copy_to(NULL, NULL, 0) == AD_ERR_VALUE);
            }
            break;
        case 10: { /* getters on a NULL handle */
            int64_t buf[2] = {7, 7};
            REQUIRE(ad_tensor_ndim(NULL) == -1 && ad_tensor_numel(NULL) == -1);
            REQUIRE(ad_tensor_dtype(NULL) == -1 && ad_tensor_id(NULL) == 0);
            REQUIRE(!ad_tensor_data(NULL) && !ad_tensor_version(NULL) && !ad_tensor_op(NULL));
            REQUIRE(!ad_tensor_is_variable(NULL) && !ad_tensor_track_op(NULL));
            REQUIRE(!ad_tensor_is_contiguous(NULL) && !ad_tensor_same_storage(NULL, t));
            REQUIRE(ad_tensor_site(NULL)[0] == 0);
            ad_tensor_shape(NULL, buf);
            ad_tensor_strides(t, NULL);
            REQUIRE(buf[0] == 7 && buf[1] == 7);
            ad_tensor_retain(NULL);
            ad_tensor_release(NULL);
            ad_gradstore_release(NULL);
            ad_free(NULL);
            break;
        }
        default: /* a zero-length shape: a 0-d tensor */
            st = ad_tensor_from_data(NULL, 0, read_dtype(r), NULL, 0, &out);
            RESULT(st, out, slot);
            break;
        }
        break;
    }
    case 26: { /* the op registry: every value, and a NULL out-pointer */
        int op = (int)(int16_t)(u8(r) | u8(r) << 8);
        ad_op_info_t info;
        memset(&info, 0xAB, sizeof info);
        st = ad_op_info(op, u8(r) % 8 ? &info : NULL);
        gs_check(st, __LINE__);
        if (!st) {
            REQUIRE(info.name && info.args && info.doc);
            REQUIRE(strcmp(info.name, ad_op_name(op)) == 0);
            sink += strlen(info.args) + strlen(info.doc);
            REQUIRE(info.n_inputs >= -1 && info.n_iargs >= -1 && info.n_fargs >= 0);
        }
        break;
    }
    case 27: { /* external memory: NULL data, zero-length and odd shapes, strides */
        int dt = read_dtype(r);
        int nd = read_shape(r, shape);
        int64_t strides[72];
        unsigned how = u8(r);
        for (int i = 0; i < nd && i < 65; i++)
            strides[i] = how & 1 ? (int64_t)(u8(r) % 9) - 4 : 0;
        /* the library cannot know how far the caller's memory goes: pass
           data only for a layout that stays inside ext_buf (or none at all) */
        size_t es = ad_dtype_size(dt);
        int64_t lo = 0, hi = 0, numel = 1;
        int fits = nd >= 0 && nd <= 8 && es;
        for (int i = 0; fits && i < nd; i++) {
            if (shape[i] < 0 || shape[i] > 64) fits = 0;
            else numel *= shape[i];
        }
        for (int i = 0; fits && i < nd; i++) {
            int64_t st_i = how & 1 ? strides[i] : 0, span = (shape[i] - 1) * st_i;
            if (shape[i] == 0) continue;
            if (!(how & 1)) { /* row-major: the extent is numel */
                hi = numel - 1;
                break;
            }
            if (span < 0) lo += span; else hi += span;
        }
        if (fits && numel && (hi - lo + 1) * (int64_t)es > (int64_t)sizeof ext_buf / 2) fits = 0;
        int use_null = (how >> 1) % 4 == 0;
        if (!fits && !use_null) break;
        char *data = use_null ? NULL : (char *)ext_buf + (-lo) * (int64_t)es;
        if (!use_null && (how >> 3) % 5 == 0) data += 1; /* misaligned for es > 1 */
        ext_made++;
        st = ad_tensor_from_external(data, dt, (how >> 4) % 7 == 0 ? NULL : shape,
                                     how & 1 ? strides : NULL, nd, (how >> 5) & 1, ext_release,
                                     &ext_released, (how >> 6) % 9 == 0 ? NULL : &out);
        if (st) {
            ext_made--; /* on failure the caller keeps ctx: no release */
            REQUIRE(!out);
        }
        RESULT(st, out, slot);
        break;
    }
    case 28: { /* in-place updates: axpy and the fused optimizers, NULLs included */
        ad_tensor *v = pick(r), *g = pick(r), *b0 = pick(r), *b1 = pick(r), *b2 = pick(r);
        unsigned which = u8(r) % 4;
        double x0 = f64(r), x1 = f64(r), x2 = f64(r), x3 = f64(r), x4 = f64(r);
        unsigned flags = u8(r);
        if (which == 0)
            st = ad_var_axpy(v, x0, g);
        else if (which == 1)
            st = ad_optim_sgd(v, g, b0, x0, x1, x2, x3, flags & 1, flags & 2);
        else if (which == 2)
            st = ad_optim_adam(v, g, b0, b1, flags & 4 ? b2 : NULL, i64(r), x0, x1, x2, x3, x4,
                               flags & 8);
        else
            st = ad_optim_rmsprop(v, g, b0, flags & 16 ? b1 : NULL, flags & 32 ? b2 : NULL, x0,
                                  x1, x2, x3, x4);
        gs_check(st, __LINE__);
        if (!v || (which == 0 && !g)) REQUIRE(st != AD_OK);
        if (v) touch(v);
        break;
    }
    case 29: { /* file mappings: bad descriptors, then tensors over a real file */
        unsigned how = u8(r) % 6;
        ad_mapping *m = NULL;
        int fd = how == 0 ? -1 : how == 1 ? 1 << 20 : how == 2 ? INT32_MIN : map_fd;
        st = ad_mapping_open(fd, u8(r) % 16 ? &m : NULL);
        gs_check(st, __LINE__);
        if (fd != map_fd || map_fd < 0) {
            REQUIRE(st != AD_OK && !m);
            break;
        }
        if (st) break; /* an injected allocation failure */
        REQUIRE(m && ad_mapping_size(m) == (int64_t)sizeof map_bytes);
        for (int k = 0; k < 3; k++) {
            int dt = read_dtype(r);
            int nd = read_shape(r, shape);
            int64_t off = u8(r) % 4 ? (int64_t)(u8(r) % 80) : i64(r);
            st = ad_tensor_from_mapping(u8(r) % 16 ? m : NULL, off, dt,
                                        u8(r) % 16 ? shape : NULL, nd, &out);
            RESULT(st, out, u8(r));
            out = NULL;
        }
        ad_mapping_release(m); /* the tensors keep it mapped */
        break;
    }
    case 30: { /* DLPack both ways; a failed import leaves the caller the owner */
        ad_tensor *t = pick(r);
        int versioned = u8(r) % 2;
        void *managed = NULL;
        st = ad_tensor_to_dlpack(t, versioned, u8(r) % 2, u8(r) % 16 ? &managed : NULL);
        gs_check(st, __LINE__);
        if (st) {
            REQUIRE(!managed);
            REQUIRE(ad_tensor_from_dlpack(NULL, versioned, &out) == AD_ERR_VALUE && !out);
            break;
        }
        REQUIRE(managed && t);
        if (u8(r) % 4 == 0) {
            ad_dlpack_delete(managed, versioned);
            break;
        }
        st = ad_tensor_from_dlpack(managed, versioned, u8(r) % 16 ? &out : NULL);
        gs_check(st, __LINE__);
        if (st) ad_dlpack_delete(managed, versioned);
        RESULT(st, out, slot);
        break;
    }
    case 31: { /* quick calls: NULL (declined) or the ordinary call's result, to the bit */
        unsigned how = u8(r) % 5;
        int op = (int)u8(r);
        if (op >= 250) op = op == 250 ? -1 : op == 251 ? AD_OP__COUNT : (int)u64(r);
        ad_tensor *a = pick(r), *b = pick(r);
        if (how == 4) { /* release_quick of a slot's reference (often the last one): 1
                           ended it, 0 changed nothing and ad_tensor_release must */
            unsigned i = slot % NT;
            ad_tensor *t = T[i];
            T[i] = NULL;
            int ended = ad_tensor_release_quick(t);
            REQUIRE(ended == 1 || (ended == 0 && t));
            if (!ended) ad_tensor_release(t);
            break;
        }
        double sv = f64(r);
        int64_t all = 0;
        ad_tensor *q = how == 0   ? ad_binary_quick(op, a, b)
                       : how == 1 ? ad_unary_quick(op, a)
                       : how == 2 ? ad_scalar_quick(op, a, sv)
                                  : ad_reduce_quick(op, a);
        if (!q) break;
        quick_taken++;
        touch(q);
        st = how == 0   ? ad_binary(op, a, b, &out)
             : how == 1 ? ad_unary(op, a, &out)
             : how == 2 ? ad_scalar_op(op, a, sv, &out)
                        : ad_op_call(op, (const ad_tensor *const[]){a}, 1, &all, 1, NULL, 0, &out);
        if (st == AD_ERR_NOMEM) { /* an injected allocation failure */
            ad_tensor_release(q);
            break;
        }
        if (st != AD_OK) die("a quick call took what the ordinary call refuses", __LINE__);
        same_bits(q, out, __LINE__);
        REQUIRE(ad_tensor_op(q) == ad_tensor_op(out));
        REQUIRE(ad_tensor_is_variable(q) == ad_tensor_is_variable(out));
        ad_tensor_release(out);
        RESULT(AD_OK, q, slot);
        break;
    }
    case 32: { /* the thread count: loops and GEMMs split or not */
        REQUIRE(ad_set_num_threads(1 + (int)(u8(r) % 2)) == AD_OK);
        break;
    }
    case 33: { /* a custom op, whose backward hands back pool tensors (any shape or
                  dtype: the library must check them), NULLs or a failure */
        const ad_tensor *in[4] = {0}, *saved[2] = {0};
        int nin = (int)(u8(r) % 5) - (u8(r) % 16 == 0); /* -1 .. 4 */
        for (int i = 0; i < nin; i++) in[i] = pick(r);
        int ns = (int)(u8(r) % 3);
        for (int i = 0; i < ns; i++) saved[i] = pick(r);
        ad_tensor *output = pick(r);
        custom_plan *c = malloc(sizeof *c);
        if (!c) break;
        c->fail = u8(r) % 8 == 0;
        for (int i = 0; i < 4; i++) c->slot[i] = (uint8_t)u8(r);
        unsigned how = u8(r);
        st = ad_custom_record(how % 16 ? "fuzz_custom" : NULL, nin > 0 ? in : NULL, nin, output,
                              ns ? saved : NULL, ns, how % 17 ? custom_backward : NULL,
                              custom_release, c, &out);
        if (!st && ad_tensor_op(out) == AD_OP_CUSTOM) custom_made++; /* the node owns c */
        else free(c);
        RESULT(st, out, slot);
        break;
    }
    default: { /* names and sizes of arbitrary enum values */
        int v = (int)(int8_t)u8(r);
        (void)ad_op_name(v);
        (void)ad_dtype_name(v);
        (void)ad_dtype_size(v);
        (void)ad_abi_version();
        (void)ad_ew_kernel();
        break;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ad_live_tensors(), bytes0 = ad_live_bytes();
    map_init();
    reader r = {data, size};
    int prev_grad = ad_set_grad_enabled(1), prev_anom = ad_set_anomaly_enabled(0);
    int prev_threads = ad_get_num_threads(); /* case 32 changes it: restored, so an input replays alone */
    for (int steps = 0; r.n && steps < 64; steps++) one_input(&r);
    ad_testing_fail_alloc_after(0);
    ad_set_checkpoint_strategy(AD_CHECKPOINT_NONE, NULL);
    ad_set_grad_enabled(prev_grad);
    ad_set_anomaly_enabled(prev_anom);
    REQUIRE(ad_set_num_threads(prev_threads) == AD_OK);
    for (int i = 0; i < NT; i++) {
        ad_tensor_release(T[i]);
        T[i] = NULL;
    }
    for (int i = 0; i < NG; i++) {
        ad_gradstore_release(G[i]);
        G[i] = NULL;
    }
    if (custom_made != custom_released) {
        fprintf(stderr, "fuzz_abi: %lld custom nodes made, %lld released\n",
                (long long)custom_made, (long long)custom_released);
        abort();
    }
    if (ext_made != ext_released) {
        fprintf(stderr, "fuzz_abi: %lld external storages made, %lld released\n",
                (long long)ext_made, (long long)ext_released);
        abort();
    }
    if (ad_live_tensors() != live0 || ad_live_bytes() != bytes0) {
        fprintf(stderr, "fuzz_abi: leak: live tensors %lld -> %lld, bytes %lld -> %lld\n",
                (long long)live0, (long long)ad_live_tensors(), (long long)bytes0,
                (long long)ad_live_bytes());
        abort();
    }
    return 0;
}

#ifdef FUZZ_STANDALONE
/* gcc fallback: replays the files given, or runs N random inputs. */
int main(int argc, char **argv) {
    long iters = 100000;
    if (argc > 1 && argv[1][0] >= '0' && argv[1][0] <= '9') {
        iters = atol(argv[1]); /* and argv[2], if given, a seed */
    } else if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            FILE *f = fopen(argv[i], "rb");
            if (!f) continue;
            static uint8_t buf[1 << 16];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            LLVMFuzzerTestOneInput(buf, n);
        }
        return 0;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    if (argc > 2) s ^= strtoull(argv[2], NULL, 0) * 0xD1B54A32D192ED03ull; /* a seed */
    if (!s) s = 1;
    static uint8_t buf[512];
    for (long it = 0; it < iters; it++) {
        size_t n = 16 + (size_t)(s % 480);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[i] = (uint8_t)s;
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_abi: %ld inputs, no crash (%ld quick calls taken, %lld custom nodes made)\n",
           iters, quick_taken, (long long)custom_made);
    return 0;
}
#endif
