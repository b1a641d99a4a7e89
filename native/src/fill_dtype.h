/* tensor.c's creation kernel: included once per dtype by tensor.c through
   each_dtype.h, which defines T (the element type) and S(name) (the dtype
   suffix) first, and once more for bool, which also defines CAST(x) (any
   nonzero value is true; by default a C conversion). No include guard:
   including it twice is the point; it undefines its parameters at the end. */
#ifndef CAST
#define CAST(x) ((T)(x))
#endif

/* t's elements (a new contiguous tensor): the value a (FILL_VALUE) or
   a + i * b (FILL_ARANGE). The kind is a constant at every call, so each call
   keeps one loop. (Random fills: random_kernels.h.) */
static inline __attribute__((always_inline)) void S(fill)(ad_tensor *t, int kind, double a,
                                                          double b) {
    T *d = (T *)t->storage->data;
    switch (kind) {
    case FILL_VALUE: for (int64_t i = 0; i < t->numel; i++) d[i] = CAST(a); break;
    case FILL_ARANGE:
        for (int64_t i = 0; i < t->numel; i++) d[i] = CAST(a + (double)i * b);
        break;
    }
}

#undef CAST
#undef T
#undef S
