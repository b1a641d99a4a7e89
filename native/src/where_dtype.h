/* elementwise.c's where kernel: included once per dtype by elementwise.c
   through each_dtype.h, which defines T (the element type) and S(name) (the
   dtype suffix) first. No include guard: including it twice is the point; it
   undefines its parameters at the end. */

/* y = c ? a : b over n strided elements: a select (never a blend), so a
   non-finite value in the unselected branch never reaches the output. It goes
   by element size, through the integer instantiations (where_inner), so the
   float ones go unused. */
__attribute__((unused)) static void S(where)(int64_t n, char **p, const int64_t *s) {
    T *y = (T *)p[0];
    const uint8_t *c = (const uint8_t *)p[1];
    const T *A = (const T *)p[2], *B = (const T *)p[3];
    for (int64_t i = 0; i < n; i++) y[i * s[0]] = c[i * s[1]] ? A[i * s[2]] : B[i * s[3]];
}

#undef T
#undef S
