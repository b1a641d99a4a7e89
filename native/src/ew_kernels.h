/* ew_kernels.h - the elementwise kernels (binary, comparison, unary,
 * tensor-scalar) and their (op, dtype) tables, compiled once per ISA level:
 * ew_portable.c (baseline), ew_avx2.c (-mavx2 -mfma), ew_avx512.c (AVX-512),
 * each defining EW_SFX before including this file; elementwise.c picks one
 * set of tables at run time (cpu.c).
 *
 * Each kernel family is one template instantiated per dtype; NULL in a table
 * means the op does not support that dtype. Layouts go through the shared n-d
 * iterator, so a kernel only sees a 1-d loop with element strides (contiguous
 * fast paths are the loops the compiler vectorises at each level). In ISO C
 * mode the compiler never contracts a * b + c into an FMA, so every level
 * gives the same bits; the float32 libm calls (exp -> expf through tgmath.h)
 * are the same functions at every level. */
#include <tgmath.h>

#include "ew.h"

#define EW_CAT_(a, b) a##_##b
#define EW_CAT(a, b) EW_CAT_(a, b)
#define EW_NAME(name) EW_CAT(name, EW_SFX)

/* ---- templates ------------------------------------------------------------ */
#define DEF_BINARY(NAME, T, EXPR, TY)                                                    \
    static void NAME(int64_t n, const void *pa, int64_t sa, const void *pb, int64_t sb, \
                     void *py) {                                                         \
        const T *A = (const T *)pa, *B = (const T *)pb;                                  \
        TY *Y = (TY *)py;                                                                \
        if (sa == 1 && sb == 1) {                                                        \
            for (int64_t i = 0; i < n; i++) {                                            \
                T a = A[i], b = B[i];                                                    \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        } else if (sa == 1 && sb == 0) {                                                 \
            T b = B[0];                                                                  \
            for (int64_t i = 0; i < n; i++) {                                            \
                T a = A[i];                                                              \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        } else if (sa == 0 && sb == 1) {                                                 \
            T a = A[0];                                                                  \
            for (int64_t i = 0; i < n; i++) {                                            \
                T b = B[i];                                                              \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                T a = A[i * sa], b = B[i * sb];                                          \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        }                                                                                \
    }

#define SCALAR_AS(T, v) ((T)0.5 != 0 ? (T)(v) : (T)sat_i64(v))

#define DEF_UNARY(NAME, T, EXPR)                                                         \
    static void NAME(int64_t n, const void *px, int64_t sx, void *py, const double *s_) { \
        const T *X = (const T *)px;                                                      \
        T *Y = (T *)py;                                                                  \
        const T s = SCALAR_AS(T, s_[0]), s2 = SCALAR_AS(T, s_[1]);                       \
        (void)s, (void)s2;                                                               \
        if (sx == 1) {                                                                   \
            for (int64_t i = 0; i < n; i++) {                                            \
                T x = X[i];                                                              \
                Y[i] = (T)(EXPR);                                                        \
            }                                                                            \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                T x = X[i * sx];                                                         \
                Y[i] = (T)(EXPR);                                                        \
            }                                                                            \
        }                                                                                \
    }

/* dtype lists: the C type and a suffix per dtype */
#define FLOAT_TYPES(X, ...) X(float, f32, __VA_ARGS__) X(double, f64, __VA_ARGS__)
#define INT_TYPES(X, ...) \
    X(int64_t, i64, __VA_ARGS__) X(int32_t, i32, __VA_ARGS__) X(uint8_t, u8, __VA_ARGS__)

/* ---- binary arithmetic: add sub mul div ----------------------------------- */
#define BIN_ARITH(X)            \
    X(add, a + b, NUM)          \
    X(sub, a - b, NUM)          \
    X(mul, a * b, NUM)          \
    X(div, a / b, FLOAT)        \
    X(maximum, a > b || a != a ? a : b, NUM) \
    X(minimum, a < b || a != a ? a : b, NUM) \
    X(pow, pow(a, b), FLOAT)

#define INST_BIN(T, SUF, OP, EXPR) DEF_BINARY(bin_##OP##_##SUF, T, EXPR, T)
#define DEF_BIN_NUM(OP, EXPR) FLOAT_TYPES(INST_BIN, OP, EXPR) INT_TYPES(INST_BIN, OP, EXPR)
#define DEF_BIN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_BIN, OP, EXPR)
#define DEF_BIN(OP, EXPR, KIND) DEF_BIN_##KIND(OP, EXPR)
BIN_ARITH(DEF_BIN)

/* ---- comparisons: any dtype in, bool out ----------------------------------- */
#define CMP_OPS(X) X(eq, ==) X(ne, !=) X(lt, <) X(le, <=) X(gt, >) X(ge, >=)
#define INST_CMP(T, SUF, OP, SYM) DEF_BINARY(cmp_##OP##_##SUF, T, a SYM b, uint8_t)
#define DEF_CMP(OP, SYM) FLOAT_TYPES(INST_CMP, OP, SYM) INT_TYPES(INST_CMP, OP, SYM)
CMP_OPS(DEF_CMP)

/* ---- unary and tensor-scalar ------------------------------------------------ */
/* (op, expression in x and s, dtypes).  FLOAT ops use fn. */
#define UN_OPS(X)                                        \
    X(neg, -x, NUM)                                      \
    X(sqr, x * x, NUM)                                   \
    X(relu, x > 0 ? x : 0, NUM)                          \
    X(add_scalar, x + s, NUM)                            \
    X(mul_scalar, x * s, NUM)                            \
    X(rsub_scalar, s - x, NUM)                           \
    X(exp, exp(x), FLOAT)                       \
    X(log, log(x), FLOAT)                       \
    X(sqrt, sqrt(x), FLOAT)                     \
    X(tanh, tanh(x), FLOAT)                     \
    X(div_scalar, x / s, FLOAT)                          \
    X(rdiv_scalar, s / x, FLOAT)                         \
    X(pow_scalar, pow(x, s), FLOAT)             \
    X(pow_rscalar, pow(s, x), FLOAT)            \
    X(abs, x < 0 ? -x : x, NUM)                          \
    X(sign, x > 0 ? 1 : (x < 0 ? -1 : x), NUM)           \
    X(clamp, (x < s ? s : x) > s2 ? s2 : (x < s ? s : x), NUM) \
    X(recip, 1 / x, FLOAT)                               \
    X(sin, sin(x), FLOAT)                                \
    X(cos, cos(x), FLOAT)                                \
    X(sigmoid, x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)), FLOAT) \
    X(gelu, x / (1 + exp(-2 * GELU_C * (x + GELU_K * x * x * x))), FLOAT) \
    X(gelu_erf, 0.5 * x * erfc(-x * SQRT1_2), FLOAT)     \
    X(erf, erf(x), FLOAT)                                \
    X(silu, x >= 0 ? x / (1 + exp(-x)) : x * exp(x) / (1 + exp(x)), FLOAT) \
    X(softplus, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), FLOAT) \
    X(elu, x > 0 ? x : s * expm1(x), FLOAT)              \
    X(log1p, log1p(x), FLOAT)                            \
    X(expm1, expm1(x), FLOAT)                            \
    X(floor, floor(x), FLOAT)                            \
    X(ceil, ceil(x), FLOAT)                              \
    X(round, nearbyint(x), FLOAT)
/* sigmoid and silu take e^-|x| (no overflow), gelu is 0.5 x (1 + tanh u) as
   x sigmoid(2u) and gelu_erf 0.5 x (1 + erf) as 0.5 x erfc: neither loses its
   digits to cancellation for negative x. */
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K 0.044715
#define SQRT1_2 0.7071067811865476

#define INST_UN(T, SUF, OP, EXPR) DEF_UNARY(un_##OP##_##SUF, T, EXPR)
#define DEF_UN_NUM(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR) INT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN(OP, EXPR, KIND) DEF_UN_##KIND(OP, EXPR)
/* unsigned negation and relu comparisons are intended (uint8 wraps) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
UN_OPS(DEF_UN)
#pragma GCC diagnostic pop

/* ---- tables ------------------------------------------------------------------- */
#define ROW_FLOAT(P, OP) {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64}
#define ROW_NUM(P, OP)                                                          \
    {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64, [AD_INT64] = P##OP##_i64, \
     [AD_INT32] = P##OP##_i32, [AD_UINT8] = P##OP##_u8}
#define ROW_ALL(P, OP)                                                          \
    {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64, [AD_INT64] = P##OP##_i64, \
     [AD_INT32] = P##OP##_i32, [AD_UINT8] = P##OP##_u8, [AD_BOOL] = P##OP##_u8}

const bin_kernel EW_NAME(ew_bin_table)[AD_OP__COUNT][6] = {
    [AD_OP_ADD] = ROW_NUM(bin_, add), [AD_OP_SUB] = ROW_NUM(bin_, sub),
    [AD_OP_MUL] = ROW_NUM(bin_, mul), [AD_OP_DIV] = ROW_FLOAT(bin_, div),
    [AD_OP_MAXIMUM] = ROW_NUM(bin_, maximum), [AD_OP_MINIMUM] = ROW_NUM(bin_, minimum),
    [AD_OP_POW] = ROW_FLOAT(bin_, pow),
    [AD_OP_EQ] = ROW_ALL(cmp_, eq),   [AD_OP_NE] = ROW_ALL(cmp_, ne),
    [AD_OP_LT] = ROW_ALL(cmp_, lt),   [AD_OP_LE] = ROW_ALL(cmp_, le),
    [AD_OP_GT] = ROW_ALL(cmp_, gt),   [AD_OP_GE] = ROW_ALL(cmp_, ge),
};

const un_kernel EW_NAME(ew_un_table)[AD_OP__COUNT][6] = {
    [AD_OP_NEG] = ROW_NUM(un_, neg),
    [AD_OP_SQR] = ROW_NUM(un_, sqr),
    [AD_OP_RELU] = ROW_NUM(un_, relu),
    [AD_OP_ADD_SCALAR] = ROW_NUM(un_, add_scalar),
    [AD_OP_MUL_SCALAR] = ROW_NUM(un_, mul_scalar),
    [AD_OP_RSUB_SCALAR] = ROW_NUM(un_, rsub_scalar),
    [AD_OP_EXP] = ROW_FLOAT(un_, exp),
    [AD_OP_LOG] = ROW_FLOAT(un_, log),
    [AD_OP_SQRT] = ROW_FLOAT(un_, sqrt),
    [AD_OP_TANH] = ROW_FLOAT(un_, tanh),
    [AD_OP_DIV_SCALAR] = ROW_FLOAT(un_, div_scalar),
    [AD_OP_RDIV_SCALAR] = ROW_FLOAT(un_, rdiv_scalar),
    [AD_OP_POW_SCALAR] = ROW_FLOAT(un_, pow_scalar),
    [AD_OP_POW_RSCALAR] = ROW_FLOAT(un_, pow_rscalar),
    [AD_OP_ABS] = ROW_NUM(un_, abs),
    [AD_OP_SIGN] = ROW_NUM(un_, sign),
    [AD_OP_CLAMP] = ROW_NUM(un_, clamp),
    [AD_OP_RECIP] = ROW_FLOAT(un_, recip),
    [AD_OP_SIN] = ROW_FLOAT(un_, sin),
    [AD_OP_COS] = ROW_FLOAT(un_, cos),
    [AD_OP_SIGMOID] = ROW_FLOAT(un_, sigmoid),
    [AD_OP_GELU] = ROW_FLOAT(un_, gelu),
    [AD_OP_GELU_ERF] = ROW_FLOAT(un_, gelu_erf),
    [AD_OP_ERF] = ROW_FLOAT(un_, erf),
    [AD_OP_SILU] = ROW_FLOAT(un_, silu),
    [AD_OP_SOFTPLUS] = ROW_FLOAT(un_, softplus),
    [AD_OP_ELU] = ROW_FLOAT(un_, elu),
    [AD_OP_LOG1P] = ROW_FLOAT(un_, log1p),
    [AD_OP_EXPM1] = ROW_FLOAT(un_, expm1),
    [AD_OP_FLOOR] = ROW_FLOAT(un_, floor),
    [AD_OP_CEIL] = ROW_FLOAT(un_, ceil),
    [AD_OP_ROUND] = ROW_FLOAT(un_, round),
};

