/* index.c's per-dtype kernels: included once per dtype by index.c through
   each_dtype.h, which defines T (the element type) and S(name) (the dtype
   suffix) first. No include guard: including it twice is the point; it
   undefines its parameters at the end. */

/* dst[i] += src[i] for n contiguous elements */
static void S(add)(void *dst, const void *src, int64_t n) {
    T *d = (T *)dst;
    const T *s = (const T *)src;
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
}

/* dst[0..n) = value, rounded to T once */
static void S(fill)(void *dst, int64_t n, double value) {
    T *d = (T *)dst, v = (T)value;
    for (int64_t i = 0; i < n; i++) d[i] = v;
}

#undef T
#undef S
