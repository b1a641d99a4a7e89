/* simd_math.h - the float32 vector math behind the SIMD maps, written once
 * over a small layer of vector operations that simd_avx2.c (8 lanes) and
 * simd_avx512.c (16 lanes) define before including it.  Both levels run the
 * same operations in the same order, so they give the same bits.
 *
 * The layer: V (float vector), VI (int32 vector), M (lane mask);
 *   V_SET1 V_ZERO V_ADD V_SUB V_MUL V_DIV V_SQRT V_MIN V_MAX V_FMADD V_FNMADD V_FMSUB
 *   V_AND V_OR V_ANDNOT (bitwise on floats) V_ROUND (to nearest integer)
 *   V_TOI V_FROMI (int conversion) V_BITS V_FROMBITS (reinterpretation)
 *   VI_SET1 VI_ADD VI_SUB VI_AND VI_OR VI_SRAI VI_SRLI VI_SLLI
 *   V_CMP(a, b, _CMP_*) -> M, V_SELECT(m, t, f), M_AND, M_ALL;
 *   V_TAB8(const float t[8]) a table, V_LOOKUP8(tab, i) t[i & 7] per lane;
 *   V_LDEXP(p, n): p 2^n in one rounding for 1/16 <= |p| < 4 and n
 *   integer-valued, |n| <= 250 (AVX-512: scalef; AVX2: an exponent-field add
 *   when the result is surely normal, else two exact power-of-two factors;
 *   the same bits).
 *
 * exp: k = round(8 x log2 e), r = x - k ln2/8 (two-part ln2/8, FMA), e^x =
 * 2^(k >> 3) 2^((k & 7)/8) e^r with 2^(j/8) from an 8-entry table (hi + lo)
 * and e^r from a degree-4 polynomial, so the mantissa p carries one rounding
 * (0.59 ulp at most over the floats, measured); p 2^(k >> 3) by an
 * exponent-field add when every lane's result is normal (|x| <= 87, one
 * check per vector or per block of vectors), else by V_LDEXP, so denormal
 * results and overflow to inf come out of one final rounding (the same bits
 * where both apply).  The input is then clamped to [-104, 89] with the bound
 * as min / max's first operand, which lets a NaN through.
 * tanh: (1 - e^(-2|x|)) / (1 + e^(-2|x|)) with both parts formed from
 * expm1's pieces (no cancellation near 0), sign restored.
 * NaN propagates; +-inf give 0 / inf and +-1.
 * sigmoid, silu (from e^-|x|) and the tanh-form gelu as x / (1 + e^(-2u)),
 * u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 x (1 + tanh u) without its
 * cancellation for negative x.  log: Cephes logf.
 * erf: x (c0 + x^2 Q(x^2)) below |x| = 1.2, else 1 - erfc(|x|) with the sign
 * restored;
 * erfc(z) for z >= 0.5 as t e^Q(t) e^(-z^2), t = 1/(1 + z/2), Q a degree-9
 * polynomial fitted (minimax, float32 coefficients) to log(erfc(z) e^(z^2) / t)
 * on [0.5, 10.5] to 1.6e-8, and z^2 split exactly into hi + lo by an FMA so
 * e^(-z^2) carries no error from rounding z^2 (the form of Numerical Recipes'
 * erfcc, refitted); e^(Q - lo) e^(-hi) is one exp of the unrounded sum
 * (exp_sum_scaled).  gelu_erf = x Phi(x), Phi(x) = erfc(-x/sqrt 2) / 2: for
 * x/sqrt 2 below -0.9 straight from erfc with z^2 = x^2/2 split from x itself
 * (no cancellation, accurate far into the tail), from 1.2 on 1 - erfc / 2,
 * between 1/2 (1 + erf) with 1/2 + z/sqrt(pi) in one rounding. */
#include <math.h>

#include "simd.h"

/* e^r - 1 - r for |r| <= ln2 / 2 as r^2 P(r): P of degree 4, fitted (minimax
   in the relative error of e^r = 1 + r + r^2 P(r), float32 coefficients) to
   3.1e-9, so the result carries only the arithmetic's rounding (~0.5 ulp). */
#define EXP_P4 V_SET1(1.3814612757e-3f)
#define EXP_P3 V_SET1(8.3687100559e-3f)
#define EXP_P2 V_SET1(4.1668388993e-2f)
#define EXP_P1 V_SET1(1.6666521132e-1f)
#define EXP_P0 V_SET1(4.9999994040e-1f)
static inline V exp_p(V r) {
    V p = EXP_P4;
    p = V_FMADD(p, r, EXP_P3);
    p = V_FMADD(p, r, EXP_P2);
    p = V_FMADD(p, r, EXP_P1);
    return V_FMADD(p, r, EXP_P0);
}

/* the same P in Estrin's form from r and r2 = r^2: three FMAs in sequence
   instead of four (tanh: a shorter dependency chain keeps fewer operations
   waiting in the scheduler) */
static inline V exp_p_estrin(V r, V r2) {
    V hi = V_FMADD(EXP_P4, r2, V_FMADD(EXP_P3, r, EXP_P2));
    return V_FMADD(hi, r2, V_FMADD(EXP_P1, r, EXP_P0));
}

static inline V exp_poly(V r) { /* e^r = 1 + r (1 + r P(r)), Horner */
    const V one = V_SET1(1.0f);
    return V_FMADD(V_FMADD(exp_p(r), r, one), r, one);
}

/* 2^(j/8) for j = 0..7 in two parts: hi the nearest float32, lo the rest */
static const float EXP_TAB_HI[8] = {1.0f,           1.090507746e+00f, 1.189207077e+00f,
                                    1.296839595e+00f, 1.414213538e+00f, 1.542210817e+00f,
                                    1.681792855e+00f, 1.834008098e+00f};
static const float EXP_TAB_LO[8] = {0.0f,            -1.307753994e-08f, 3.797635273e-08f,
                                    -4.018999533e-08f, 2.420323497e-08f,  8.070904833e-09f,
                                    -2.475532668e-08f, -1.123927795e-08f};

/* e^x = p 2^m for -104 <= x <= 89 or NaN: k = round(8 x log2 e) by the
   1.5 2^23 add (k in t's low bits, exact: |k| < 2^22), r = x - k ln2/8 with
   ln2/8 in two parts (the first difference exact), |r| <= ln2/16; j = k mod 8
   picks 2^(j/8) = hi + lo from the tables and e^r - 1 = r + r^2 (1/2 + c3 r +
   c4 r^2) (minimax in the relative error of e^r, 1.7e-10), so p = 2^(j/8) e^r
   = hi + (hi (e^r - 1) + lo), in [0.95, 1.92], carries one rounding and
   little else (a degree-3 polynomial's 2.6e-8 would be 0.44 ulp of a result
   near 2^(n+1)).  *e = m << 23, m = floor(k / 8). */
/* round(x c) for |x c| < 2^22 by the 1.5 2^23 add: the integer comes back as
   a float (*k) and in the low bits of the returned sum's mantissa */
static inline V round_by_magic(V x, float c, V *k) {
    const V magic = V_SET1(12582912.0f);
    V t = V_FMADD(x, V_SET1(c), magic);
    *k = V_SUB(t, magic);
    return t;
}

static inline V exp_tab(V x, VI *e) {
    V k, t = round_by_magic(x, 1.154156017e+01f, &k);
    V r = V_FNMADD(k, V_SET1(0.086669921875f), x);
    r = V_FNMADD(k, V_SET1(-2.652430521e-05f), r);
    V c = V_FMADD(V_SET1(4.1660394520e-02f), r, V_SET1(1.6668038070e-01f));
    V q = V_FMADD(V_FMADD(c, r, V_SET1(0.5f)), V_MUL(r, r), r);
    VI b = V_BITS(t);
    V hi = V_LOOKUP8(V_TAB8(EXP_TAB_HI), b), lo = V_LOOKUP8(V_TAB8(EXP_TAB_LO), b);
    *e = VI_AND(VI_SLLI(b, 20), VI_SET1(-8388608)); /* 0xff800000 */
    return V_ADD(hi, V_FMADD(hi, q, lo));
}

/* e^x for -87 <= x <= 87 (e^x normal): p 2^m by an exponent-field add, the
   bits exp_core gives there */
static inline V exp_fast(V x) {
    VI e;
    V p = exp_tab(x, &e);
    return V_FROMBITS(VI_ADD(V_BITS(p), e));
}

/* e^x for -104 <= x <= 89 or NaN: p 2^m in one rounding (V_LDEXP), so
   denormal results and the overflow to inf are rounded once.  m is made NaN
   in NaN lanes (xc 0 is 0 or NaN): AVX2's V_LDEXP adds an in-range m to the
   exponent field, which would turn a NaN p into a number. */
static inline V exp_core(V xc) {
    VI e;
    V p = exp_tab(xc, &e);
    return V_LDEXP(p, V_ADD(V_FROMI(VI_SRAI(e, 23)), V_MUL(xc, V_ZERO())));
}

/* every lane's |v| below bound (NaN: no), for the exp_fast paths */
static inline int all_below(V v, float bound) {
    return M_ALL(V_CMP(V_ANDNOT(V_SET1(-0.0f), v), V_SET1(bound), _CMP_LT_OQ));
}

/* Underflow: an Intel core takes a microcode assist (~150 cycles) for every
   instruction whose result has a denormal or underflowing lane, as V_LDEXP
   has for e^x below x = -87.3; AMD's Zen takes none.  So the lanes in z,
   whose results are known without computing them (e^x rounds to 0, or
   disappears in the caller's 1 + e^x), go through the polynomial as 0 and
   come out as 0: only the results that really are denormal (x in
   (-104, -87.3)) still take the assist.  The bits are the same as computing
   them. */
static inline V exp_core_z(V xc, M z) {
    return V_SELECT(z, V_ZERO(), exp_core(V_SELECT(z, V_ZERO(), xc)));
}

/* e^x: 0 for x <= -104 (e^-104 is below half the smallest denormal), x
   capped at 89 (inf from there); x86's min returns its second operand when
   either is NaN: with the bound first, a NaN input propagates. */
static inline V exp_f(V x, int fast) {
    if (fast || all_below(x, 87.0f)) return exp_fast(x);
    return exp_core_z(V_MIN(V_SET1(89.0f), x), V_CMP(x, V_SET1(-104.0f), _CMP_LE_OQ));
}

/* tanh |x| = (1 - e^z) / (1 + e^z), z = -2|x|, from one reduction kept as
   expm1: e^z = 2^n (1 + q), q = e^r - 1 = r + r^2 P(r), so the numerator is
   (1 - 2^n) - 2^n q and the denominator (1 + 2^n) + 2^n q, each one FMA from
   exact parts (1 -+ 2^n are exact for n >= -23; below, the lost 2^n is under
   half an ulp of the result): no cancellation as |x| -> 0 (n = 0 gives
   -q / (2 + q)), 1.95 ulp at most (measured over the floats), no branch, so a
   vector of mixed small and large inputs costs one path.  |x| is capped at 10
   (tanh is 1.0f from 9.01 on), the sign restored last (tanh(-0) = -0).
   Fewer FMA-pipe operations (the bottleneck; Zen 4 runs a 512-bit one per
   cycle): z = -|x| - |x| on the adders, n = round(z log2 e) by the 1.5 2^23
   add (n in t's low bits, 2^n from them: n is in [-29, 0]), r = z - n ln2 with
   ln2 in one part (its error, n 1.9e-9, moves tanh by at most 0.05 ulp: e^z
   enters tanh scaled by 2 e^z / (1 - e^2z)).  A shorter dependency chain
   (measured faster: fewer operations wait in the scheduler): t from |x|
   (|x| (-2 log2 e) is z log2 e exactly) beside z, P in Estrin's form. */
static inline V v_tanh(V x) {
    const V sign = V_SET1(-0.0f), one = V_SET1(1.0f);
    V ax = V_MIN(V_SET1(10.0f), V_ANDNOT(sign, x)); /* NaN stays NaN */
    V z = V_SUB(V_SUB(V_ZERO(), ax), ax);
    V n, t = round_by_magic(ax, -2.88539008177792682f, &n);
    V r = V_FNMADD(n, V_SET1(0.693147182464599609375f), z);
    V r2 = V_MUL(r, r);
    V q = V_FMADD(exp_p_estrin(r, r2), r2, r);
    V s = V_FROMBITS(VI_ADD(VI_SLLI(V_BITS(t), 23), VI_SET1(0x3f800000))); /* 2^n */
    V w = V_FNMADD(s, q, V_SUB(one, s));
    V d = V_FMADD(s, q, V_ADD(one, s));
    return V_OR(V_DIV(w, d), V_AND(x, sign));
}

static inline V log_core(V xs, V e) { /* xs normal, positive, finite */
    const V one = V_SET1(1.0f);
    VI bits = V_BITS(xs);
    e = V_ADD(e, V_FROMI(VI_SUB(VI_SRLI(bits, 23), VI_SET1(126))));
    V m = V_FROMBITS(VI_OR(VI_AND(bits, VI_SET1(0x007fffff)), VI_SET1(0x3f000000)));
    M lo = V_CMP(m, V_SET1(0.707106781186547524f), _CMP_LT_OQ);
    e = V_SUB(e, V_SELECT(lo, one, V_ZERO()));
    V f = V_SUB(V_ADD(m, V_SELECT(lo, m, V_ZERO())), one);
    V z = V_MUL(f, f);
    V p = V_SET1(7.0376836292E-2f);
    p = V_FMADD(p, f, V_SET1(-1.1514610310E-1f));
    p = V_FMADD(p, f, V_SET1(1.1676998740E-1f));
    p = V_FMADD(p, f, V_SET1(-1.2420140846E-1f));
    p = V_FMADD(p, f, V_SET1(1.4249322787E-1f));
    p = V_FMADD(p, f, V_SET1(-1.6668057665E-1f));
    p = V_FMADD(p, f, V_SET1(2.0000714765E-1f));
    p = V_FMADD(p, f, V_SET1(-2.4999993993E-1f));
    p = V_FMADD(p, f, V_SET1(3.3333331174E-1f));
    V y = V_MUL(V_MUL(p, z), f);
    y = V_FMADD(e, V_SET1(-2.12194440e-4f), y);
    y = V_FNMADD(z, V_SET1(0.5f), y);
    return V_FMADD(e, V_SET1(0.693359375f), V_ADD(f, y));
}

/* log: x = 2^e m with m in [sqrt(1/2), sqrt(2)) from the bits (denormals
   scaled by 2^23 first), f = m - 1, log x = f - f^2/2 + f^3 P(f) + e ln 2
   (Cephes logf; ln 2 in two parts). 0 -> -inf, x < 0 and NaN -> NaN, inf -> inf. */
static inline V v_log(V x) {
    const V fmin = V_SET1(1.17549435e-38f), inf = V_SET1(INFINITY), zero = V_ZERO();
    if (M_ALL(M_AND(V_CMP(x, fmin, _CMP_GE_OQ), V_CMP(x, inf, _CMP_LT_OQ))))
        return log_core(x, zero);
    M tiny = V_CMP(x, fmin, _CMP_LT_OQ);
    V r = log_core(V_SELECT(tiny, V_MUL(x, V_SET1(8388608.0f)), x),
                   V_SELECT(tiny, V_SET1(-23.0f), zero));
    r = V_SELECT(V_CMP(x, inf, _CMP_EQ_OQ), x, r);
    r = V_SELECT(V_CMP(x, zero, _CMP_EQ_OQ), V_SET1(-INFINITY), r);
    return V_SELECT(V_CMP(x, zero, _CMP_NGE_UQ), V_SET1(NAN), r);
}

/* Box-Muller's pair (random_kernels.h) from u in (0, 1] and v in [0, 1) of 24
   bits: r = sqrt(-2 log u), *c = r cos(2 pi v), *s = r sin(2 pi v).  2 pi v =
   q pi/2 + x, q = round(4 v), x = 2 pi (v - q/4) in [-pi/4, pi/4] (the
   difference exact); sin x and cos x by Cephes sinf / cosf's polynomials,
   then the q quarter turns: sin and cos swapped for odd q, the cosine negated
   for q = 1, 2 and the sine for q = 2, 3 (r's sign bit set). */
static inline void v_box_muller(V u, V v, V *c, V *s) {
    V r = V_SQRT(V_MUL(V_SET1(-2.0f), log_core(u, V_ZERO())));
    V q = V_ROUND(V_MUL(v, V_SET1(4.0f)));
    V x = V_MUL(V_FNMADD(q, V_SET1(0.25f), v), V_SET1(6.28318530717958648f));
    V z = V_MUL(x, x);
    V ps = V_FMADD(V_FMADD(V_SET1(-1.9515295891e-4f), z, V_SET1(8.3321608736e-3f)), z,
                   V_SET1(-1.6666654611e-1f));
    V pc = V_FMADD(V_FMADD(V_SET1(2.443315711809948e-5f), z, V_SET1(-1.388731625493765e-3f)), z,
                   V_SET1(4.166664568298827e-2f));
    V sn = V_FMADD(V_MUL(x, z), ps, x);
    V cs = V_FMADD(V_MUL(z, z), pc, V_FNMADD(z, V_SET1(0.5f), V_SET1(1.0f)));
    VI qi = V_TOI(q);
    M odd = V_CMP(V_FROMI(VI_AND(qi, VI_SET1(1))), V_ZERO(), _CMP_NEQ_OQ);
    V rc = V_OR(r, V_FROMBITS(VI_SLLI(VI_AND(VI_ADD(qi, VI_SET1(1)), VI_SET1(2)), 30)));
    V rs = V_OR(r, V_FROMBITS(VI_SLLI(VI_AND(qi, VI_SET1(2)), 30)));
    *c = V_MUL(rc, V_SELECT(odd, sn, cs));
    *s = V_MUL(rs, V_SELECT(odd, cs, sn));
}

/* num / (1 + e^w).  From w = -17 down 1 + e^w rounds to 1 (e^-17 < 2^-24),
   whatever e^w is there.  So a vector with some |w| >= 17 has w raised to
   -17 (with the bound as max's first operand a NaN w stays NaN): e^w never
   underflows and exp_fast serves every w below 87; only w >= 87 (gelu's x
   below -9.9) or NaN take exp_core.  Before, every such vector did
   (exp_core_z).  The fast form (every |w| < 87: gelu's |x| < 9, the AVX-512
   in-cache map's blocks) takes exp_fast unclamped, 1 + e^w being the same
   float.  Zen 4, 1 thread, tanh-form gelu of N(3, 1), 1e6 float32 in cache,
   AVX-512: 0.35 -> 0.29 ms (N(0, 1): 0.29 either way).  Streamed (1e7) and
   at the AVX2 level every vector takes the two checks, as before: clamping
   every vector instead cost AVX2 10% on N(0, 1) at 1e7.  The same bits. */
static inline V logistic_div(V num, V w, int fast) {
    V e;
    if (fast || all_below(w, 17.0f)) {
        e = exp_fast(w);
    } else {
        w = V_MAX(V_SET1(-17.0f), w);
        e = all_below(w, 87.0f) ? exp_fast(w) : exp_core(V_MIN(V_SET1(89.0f), w));
    }
    return V_DIV(num, V_ADD(V_SET1(1.0f), e));
}

/* sigmoid and silu from e = e^-|x| (never overflows): 1 / (1 + e) and
   x / (1 + e) for x >= 0, e / (1 + e) and x e / (1 + e) below. */
static inline V sigmoid_num(V x, V for_pos, V for_neg, V e) {
    V num = V_SELECT(V_CMP(x, V_ZERO(), _CMP_GE_OQ), for_pos, for_neg);
    return V_DIV(num, V_ADD(V_SET1(1.0f), e));
}

/* e^-|x| (only the lower bound of v_exp's clamp applies), taken as 0 from
   x >= 20 on, where 1 + e^-x is 1 and it only enters as that sum */
static inline V exp_negabs(V x, int fast) {
    V t = V_OR(x, V_SET1(-0.0f));
    if (fast || all_below(x, 20.0f)) return exp_fast(t);
    return exp_core_z(t, M_OR(V_CMP(t, V_SET1(-104.0f), _CMP_LE_OQ),
                              V_CMP(x, V_SET1(20.0f), _CMP_GE_OQ)));
}

static inline V sigmoid_f(V x, int fast) {
    V e = exp_negabs(x, fast);
    return sigmoid_num(x, V_SET1(1.0f), e, e);
}

static inline V silu_f(V x, int fast) {
    V e = exp_negabs(x, fast);
    /* a NaN x and its e differ in sign: which one x e returns depends on the
       compiler's operand order, so NaN is returned as x itself */
    return V_SELECT(V_CMP(x, x, _CMP_UNORD_Q), x, sigmoid_num(x, x, V_MUL(x, e), e));
}

/* gelu's -2 sqrt(2/pi) and -2 sqrt(2/pi) 0.044715 in float32 */
#define GELU_M2C_F (-1.5957691216057308f)
#define GELU_M2CK_F (-0.07135481627260025f)

static inline V gelu_f(V x, int fast) { /* -2u = x (-2c - 2ck x^2) */
    V w = V_FMADD(V_MUL(x, x), V_SET1(GELU_M2CK_F), V_SET1(GELU_M2C_F));
    return logistic_div(x, V_MUL(w, x), fast);
}

/* The maps with an exp_fast form: v_OP checks each vector (OP_f(x, 0)),
   v_OP_fast(x) is OP_f(x, 1), for vectors whose every |x| is below
   OP_FAST_BOUND (where v_OP takes exp_fast as well: the same bits); a map
   may check a block of vectors at once (simd_avx512.c).  The other maps'
   bound is 0 (no fast form). */
#define DEF_FAST(OP, BOUND)                                                \
    static inline V v_##OP(V x) { return OP##_f(x, 0); }                   \
    static inline V v_##OP##_fast(V x) { return OP##_f(x, 1); }            \
    enum { OP##_FAST_BOUND = BOUND };
DEF_FAST(exp, 87)
DEF_FAST(sigmoid, 20)
DEF_FAST(silu, 20)
DEF_FAST(gelu, 9) /* |x| < 9: |2u| < 66.4 */
#undef DEF_FAST

/* f e^(a + b) for -111 <= a <= 0, -1.5 <= b <= 0 and f in [0.1, 2], without
   rounding a + b: n = round((a + b) log2 e), r = (a - n ln2) + b, where
   a - n ln2_hi is exact (n ln2_hi has 17 bits, the difference is below 1);
   f e^r (normal) is scaled by 2^n with V_LDEXP, so a denormal result comes
   out of one rounding. */
static inline V exp_sum_scaled(V a, V b, V f) {
    V n = V_ROUND(V_MUL(V_ADD(a, b), V_SET1(1.44269504088896341f)));
    V r = V_FNMADD(n, V_SET1(0.693359375f), a);
    r = V_ADD(V_FNMADD(n, V_SET1(-2.12194440e-4f), r), b);
    return V_LDEXP(V_MUL(exp_poly(r), f), n);
}

/* erf(z) = z (c0 + s Q(s)) for s = z^2 <= 1.44: Q of degree 5 fitted (minimax
   in the relative error of erf, float32 coefficients rounded one at a time
   from the highest, the others refitted) to 1.5e-8, c0 = 2/sqrt(pi) in two
   parts.  erf_sq(s) = s Q(s) + c0lo, so erf(z) = z c0hi + z erf_sq(s) with
   the leading term's product exact in the last FMA: 1.9 ulp at most over
   |z| < 1.2 (the degree-5 P(z^2) this replaces, over |z| < 0.9: 2.4). */
#define ERF_C0HI 1.128379225730896f
static inline V erf_sq(V s) {
    V p = V_SET1(6.581855268450454e-05f);
    p = V_FMADD(p, s, V_SET1(-0.0007587853469885886f));
    p = V_FMADD(p, s, V_SET1(0.005135927349328995f));
    p = V_FMADD(p, s, V_SET1(-0.02682422287762165f));
    p = V_FMADD(p, s, V_SET1(0.1128285676240921f));
    p = V_FMADD(p, s, V_SET1(-0.376125693321228f));
    return V_FMADD(p, s, V_SET1(-5.8635382771399236e-08f));
}

/* erfc(z) for 0.5 <= z <= 10.5, z^2 = hi + lo exactly */
static inline V erfc_big(V z, V hi, V lo) {
    const V one = V_SET1(1.0f);
    V t = V_DIV(one, V_FMADD(z, V_SET1(0.5f), one));
    V q = V_SET1(2.53020316362381e-1f);
    q = V_FMADD(q, t, V_SET1(-1.190372109413147f));
    q = V_FMADD(q, t, V_SET1(2.193493366241455f));
    q = V_FMADD(q, t, V_SET1(-1.8877677917480469f));
    q = V_FMADD(q, t, V_SET1(7.694945931434631e-1f));
    q = V_FMADD(q, t, V_SET1(-3.8752391934394836e-1f));
    q = V_FMADD(q, t, V_SET1(1.4836956560611725e-1f));
    q = V_FMADD(q, t, V_SET1(3.661649525165558e-1f));
    q = V_FMADD(q, t, V_SET1(1.0006853342056274f));
    q = V_FMADD(q, t, V_SET1(-1.2655352354049683f));
    return exp_sum_scaled(V_SUB(V_ZERO(), hi), V_SUB(q, lo), t);
}

/* erf in two parts as gelu_erf below: the polynomial for |x| < 1.2
   (erf_mid), 1 - erfc(|x|) with the sign restored for the others (erf_tail),
   then NaN restored (erf_fix; the mid lanes hold no NaN) */
static inline M erf_mid_lanes(V x) {
    return V_CMP(V_ANDNOT(V_SET1(-0.0f), x), V_SET1(1.2f), _CMP_LT_OQ);
}

static inline V erf_mid(V x) { return V_FMADD(x, V_SET1(ERF_C0HI), V_MUL(x, erf_sq(V_MUL(x, x)))); }

static inline V erf_tail(V x) {
    const V sign = V_SET1(-0.0f);
    /* erf is 1.0f from |x| = 3.92 on: the cap at 4 keeps e^(-z^2) normal (and
       turns NaN into 4) */
    V z = V_MIN(V_ANDNOT(sign, x), V_SET1(4.0f));
    V hi = V_MUL(z, z), lo = V_FMSUB(z, z, hi);
    return V_OR(V_SUB(V_SET1(1.0f), erfc_big(z, hi, lo)), V_AND(x, sign));
}

static inline V erf_fix(V x, V y) { return V_SELECT(V_CMP(x, x, _CMP_UNORD_Q), x, y); }

static inline V v_erf(V x) {
    V y = erf_mid(x);
    M mid = erf_mid_lanes(x);
    return M_ALL(mid) ? y : V_SELECT(mid, y, erf_fix(x, erf_tail(x)));
}

/* gelu_erf in two parts: the polynomial for -0.9 <= x / sqrt 2 < 1.2 (the
   lanes in gelu_erf_mid_lanes, compared on x) and the erfc form for the
   others (gelu_erf_tail, then gelu_erf_fix: sign and NaN; the mid lanes need
   neither).  v_gelu_erf skips the tail when a vector has none; a map may also
   gather the tail lanes of many vectors first (DEF_GATHERED below): the same
   bits, lane by lane.
   The mid form is Phi = 1/2 + u c0hi + u erf_sq(z^2), u = z / 2, times x:
   1/2 + u c0hi in one rounding takes the cancellation of 1 + erf(z) for
   negative z exactly, so the polynomial reaches z = -0.9 (Phi = 0.10) at
   3.05 ulp at most, under the erfc form's 4.3 over z in [-0.9, -0.5) (every
   float32 x measured; 2.2 for positive x, 1.8 before).  Against the
   polynomial to z = -0.5 and 0.9 before: a seventh of N(0, 1) lanes take the
   erfc form, not a third. */
static inline M gelu_erf_mid_lanes(V x) { /* 0.9 sqrt 2, 1.2 sqrt 2 */
    return M_AND(V_CMP(x, V_SET1(-1.2727922f), _CMP_GE_OQ), V_CMP(x, V_SET1(1.6970563f), _CMP_LT_OQ));
}

static inline V gelu_erf_mid(V x) {
    V z = V_MUL(x, V_SET1(0.70710678118654752f)), u = V_MUL(z, V_SET1(0.5f));
    V phi = V_FMADD(u, erf_sq(V_MUL(z, z)), V_FMADD(u, V_SET1(ERF_C0HI), V_SET1(0.5f)));
    return V_MUL(x, phi);
}

static inline V gelu_erf_tail(V x) {
    const V sign = V_SET1(-0.0f), half = V_SET1(0.5f);
    V h = V_MUL(x, half);
    /* the flat lanes: x >= 7.5 (x erfc(x / sqrt 2) / 2 is below half an ulp of
       x: the result is x), x <= -14.25 (the result is below half the
       smallest denormal: -0) and NaN take erfc = 0, computed from |x| = 1,
       so e^(-x^2/2) never underflows there (the result stays x, -0, and
       NaN for x = -inf) */
    M flat = M_OR(V_CMP(x, V_SET1(7.5f), _CMP_NLT_UQ), V_CMP(x, V_SET1(-14.25f), _CMP_LE_OQ));
    V ax = V_SELECT(flat, V_SET1(1.0f), V_ANDNOT(sign, x));
    V az = V_MUL(ax, V_SET1(0.70710678118654752f));
    V xx = V_MUL(ax, ax), xl = V_FMSUB(ax, ax, xx);
    V c = V_SELECT(flat, V_ZERO(), erfc_big(az, V_MUL(xx, half), V_MUL(xl, half)));
    /* below: x erfc / 2 (x = -inf gives NaN like the libm form); above:
       x - |x| erfc / 2 */
    V lo = V_MUL(h, c);
    V hi = V_FNMADD(V_MUL(ax, half), c, x);
    return V_SELECT(V_CMP(x, V_ZERO(), _CMP_LT_OQ), lo, hi);
}

static inline V gelu_erf_fix(V x, V y) {
    y = V_OR(y, V_AND(x, V_SET1(-0.0f))); /* x Phi(x) has x's sign: gelu_erf(-0) = -0 */
    return V_SELECT(V_CMP(x, x, _CMP_UNORD_Q), x, y);
}

static inline V v_gelu_erf(V x) {
    V y = gelu_erf_mid(x);
    M mid = gelu_erf_mid_lanes(x);
    return M_ALL(mid) ? y : V_SELECT(mid, y, gelu_erf_fix(x, gelu_erf_tail(x)));
}

/* gelu_erf and erf over whole vectors of a contiguous x, a block at a time:
   the lanes of the block not in LANES compressed into a buffer and run
   through the erfc form and FIX (TAIL) densely, then the polynomial (MID) for
   every vector with those lanes expanded into it as it is stored.  In N(0, 1)
   data a seventh of gelu_erf's lanes need TAIL, but most vectors have one
   (92% of 16-lane ones), so the one-vector form (v_gelu_erf) would run both
   on nearly all.  Each lane's result is the one-vector form's, bit for bit.
   Returns the elements done (a multiple of VW); y may be x.  The layer: M_BITS(m) a mask's lanes as
   bits, V_COMPRESS(t, v) the lanes set in t first, V_EXPAND(old, t, v) v's
   first lanes into those set in t (old's elsewhere), LANE_COUNT(t),
   GATHER_INIT() (AVX2: its permutation tables). */
enum { GE_BLOCK = 512 };
#define DEF_GATHERED(NAME, LANES, MID, TAIL, FIX)                                          \
    static int64_t NAME(int64_t n, const float *x, float *y) {                             \
        float buf[GE_BLOCK + VW];                                                          \
        unsigned tails[GE_BLOCK / VW];                                                     \
        V xs[GE_BLOCK / VW]; /* the block's x (y may be x) */                               \
        int64_t done = n & ~(int64_t)(VW - 1);                                             \
        GATHER_INIT();                                                                     \
        for (int64_t b = 0; b < done; b += GE_BLOCK) {                                     \
            int64_t m = done - b < GE_BLOCK ? done - b : GE_BLOCK;                         \
            unsigned k = 0;                                                                \
            for (int64_t i = 0; i < m; i += VW) {                                          \
                V v = xs[i / VW] = V_LOADU(x + b + i);                                     \
                unsigned t = ~M_BITS(LANES(v)) & ((1u << VW) - 1);                         \
                tails[i / VW] = t;                                                         \
                V_STOREU(buf + k, V_COMPRESS(t, v));                                       \
                k += LANE_COUNT(t);                                                        \
            }                                                                              \
            V_STOREU(buf + k, V_ZERO()); /* the last vector's rest */                      \
            for (unsigned j = 0; j < k; j += VW) {                                         \
                V v = V_LOADU(buf + j);                                                    \
                V_STOREU(buf + j, FIX(v, TAIL(v)));                                        \
            }                                                                              \
            k = 0;                                                                         \
            for (int64_t i = 0; i < m; i += VW) {                                          \
                unsigned t = tails[i / VW];                                                \
                V_STOREU(y + b + i, V_EXPAND(MID(xs[i / VW]), t, V_LOADU(buf + k)));       \
                k += LANE_COUNT(t);                                                        \
            }                                                                              \
        }                                                                                  \
        return done;                                                                       \
    }
DEF_GATHERED(gelu_erf_contig, gelu_erf_mid_lanes, gelu_erf_mid, gelu_erf_tail, gelu_erf_fix)
DEF_GATHERED(erf_contig, erf_mid_lanes, erf_mid, erf_tail, erf_fix)
#undef DEF_GATHERED

/* the maps without a fast form */
#define NO_FAST(OP)                                                        \
    static inline V v_##OP##_fast(V x) { return v_##OP(x); }               \
    enum { OP##_FAST_BOUND = 0 };
NO_FAST(tanh)
NO_FAST(log)
NO_FAST(erf)
NO_FAST(gelu_erf)
#undef NO_FAST

/* ---- softmax rows ---------------------------------------------------------------
 * One contiguous lane of the softmax family in three passes that stay in
 * vector registers: the maximum m; the terms e^(x - m), with x - m split into
 * d + dl exactly (TwoSum) and e^d (1 + dl) so the terms carry only exp's
 * ~1 ulp, summed in double; then softmax scales the terms by 1 / sum
 * (row_scale) and log_softmax writes x - (m + log sum), each with the double
 * value split into two floats.  The sum goes into 16 double partial sums,
 * partial j taking the elements i = j (mod 16), folded in one fixed order at
 * both levels: AVX2 and AVX-512 give the same bits.  Each .c file defines,
 * before including this file: VW (lanes), V_LOADU, V_STOREU, V_LOAD_PART /
 * V_STORE_PART (the first n lanes; the others load as 0), V_KEEP(v, n)
 * (lanes from n on set to 0), row_acc (a step's terms added to the partials;
 * steps start at multiples of VW), row_acc_sum (the partials folded: j + 8,
 * then + 4, + 2, + 1), V_MUL_D (per lane, (float)((double)v * s)), V_HMAX
 * (the largest lane), and for the gradient rows row_acc_prod (a step's
 * products a b, exact in double, added to the partials) and V_SMGRAD_DV /
 * V_LSMGRAD_DV below (per lane, (float) of a (b - s) and b - a s in double,
 * s the lane's own from a COLS_D), over the double layer VD (half a V's
 * lanes): VD_LO, VD_HI, V_FROM_VD2, VD_ZERO, VD_SET1, VD_ADD, VD_SUB, VD_MUL,
 * VD_FMADD, VD_STOREU. */

/* VW lanes in double, lane k in a[k / (VW / 2)]: the lanes side by side keep
   one of these per partial sum (cols_softmax) */
typedef struct { VD a[2]; } COLS_D;
static inline COLS_D cols_d_set1(double v) { return (COLS_D){{VD_SET1(v), VD_SET1(v)}}; }
static inline COLS_D cols_d_zero(void) { return (COLS_D){{VD_ZERO(), VD_ZERO()}}; }
static inline COLS_D cols_d_add(COLS_D s, V e) { /* e's lanes added in double */
    return (COLS_D){{VD_ADD(s.a[0], VD_LO(e)), VD_ADD(s.a[1], VD_HI(e))}};
}
static inline COLS_D cols_d_fmadd(COLS_D s, V a, V b) { /* products a b, exact in double */
    return (COLS_D){{VD_FMADD(VD_LO(a), VD_LO(b), s.a[0]), VD_FMADD(VD_HI(a), VD_HI(b), s.a[1])}};
}
static inline COLS_D cols_d_sum(COLS_D s, COLS_D t) {
    return (COLS_D){{VD_ADD(s.a[0], t.a[0]), VD_ADD(s.a[1], t.a[1])}};
}
static inline void cols_d_store(double *p, COLS_D s) {
    VD_STOREU(p, s.a[0]);
    VD_STOREU(p + VW / 2, s.a[1]);
}
static inline V V_SMGRAD_DV(V a, V b, COLS_D s) { /* a (b - s) */
    return V_FROM_VD2(VD_MUL(VD_LO(a), VD_SUB(VD_LO(b), s.a[0])),
                      VD_MUL(VD_HI(a), VD_SUB(VD_HI(b), s.a[1])));
}
static inline V V_LSMGRAD_DV(V a, V b, COLS_D s) { /* b - a s */
    return V_FROM_VD2(VD_SUB(VD_LO(b), VD_MUL(VD_LO(a), s.a[0])),
                      VD_SUB(VD_HI(b), VD_MUL(VD_HI(a), s.a[1])));
}

/* TwoSum of x and -m: s = fl(x - m), err = (x - m) - s exactly; 0 where s is
   not finite */
static inline V row_term(V x, V m) {
    V s = V_SUB(x, m);
    V bv = V_SUB(s, x);
    V err = V_ADD(V_SUB(x, V_SUB(s, bv)), V_SUB(V_ZERO(), V_ADD(m, bv)));
    err = V_SELECT(V_CMP(V_SUB(s, s), V_ZERO(), _CMP_EQ_OQ), err, V_ZERO());
    V e = v_exp(s);
    return V_FMADD(e, err, e);
}

/* the lane's maximum; NaN skipped (max(a, b) returns b when a is NaN).  The
   lanes are folded by a tree of max (V_HMAX): which zero a zero maximum is
   then depends on the order, but its sign is never seen (e^(x -+ 0) is the
   same, and m + log sum, log sum >= 0, is +0 or positive either way). */
static inline float row_max(const float *x, int64_t len) {
    V mv = V_SET1(-INFINITY);
    int64_t i = 0;
    for (; i + VW <= len; i += VW) mv = V_MAX(V_LOADU(x + i), mv);
    if (i < len) mv = V_MAX(V_LOAD_PART(x + i, len - i, -INFINITY), mv);
    return V_HMAX(mv);
}

/* the sum of the terms e^(x - m) (m finite) in double, the terms written to y
   when y is not NULL */
static inline double row_exp_sum(const float *x, float *y, int64_t len, float m) {
    const V M = V_SET1(m);
    ROW_ACC acc;
    row_acc_zero(&acc);
    int64_t i = 0;
    for (; i + VW <= len; i += VW) {
        V e = row_term(V_LOADU(x + i), M);
        if (y) V_STOREU(y + i, e);
        row_acc(&acc, e, i);
    }
    if (i < len) {
        V e = V_KEEP(row_term(V_LOAD_PART(x + i, len - i, m), M), len - i);
        if (y) V_STORE_PART(y + i, len - i, e);
        row_acc(&acc, e, i);
    }
    return row_acc_sum(&acc);
}

/* v as hi + lo, two floats (hi = (float)v, lo the rest rounded), broadcast */
static inline void split_f2(double v, V *hi, V *lo) {
    const float fh = (float)v;
    *hi = V_SET1(fh);
    *lo = V_SET1((float)(v - fh));
}

/* y = y s rounded once, for terms 0 <= y <= 1: for 2^-60 <= |s| <= 2^60, s
   = hi + lo in two floats and y s = y hi + y lo in one FMA (y lo, 2^-24 the
   size, rounded first: the rounding of y s up to 2^-48 of it, as
   (float)((double)y s) has 2^-53; one FMA and a multiply where the double
   form takes two conversions each way); else in double.  y lo is a denormal
   (a microcode assist on Intel) only where y s is below about 2^-100. */
static inline void row_scale(float *y, int64_t len, double s) {
    int64_t i = 0;
    if (fabs(s) >= 0x1p-60 && fabs(s) <= 0x1p60) {
        V hi, lo;
        split_f2(s, &hi, &lo);
        for (; i + VW <= len; i += VW) {
            V v = V_LOADU(y + i);
            V_STOREU(y + i, V_FMADD(v, hi, V_MUL(v, lo)));
        }
        if (i < len) {
            V v = V_LOAD_PART(y + i, len - i, 0.0f);
            V_STORE_PART(y + i, len - i, V_FMADD(v, hi, V_MUL(v, lo)));
        }
        return;
    }
    for (; i + VW <= len; i += VW) V_STOREU(y + i, V_MUL_D(V_LOADU(y + i), s));
    if (i < len) V_STORE_PART(y + i, len - i, V_MUL_D(V_LOAD_PART(y + i, len - i, 0.0f), s));
}

/* mode 0: softmax into y; 1: log_softmax into y; 2: logsumexp into y[0].
   0 when the lane's maximum is not finite (the caller's double loop keeps its
   inf / NaN arithmetic), else 1. */
static inline int row_softmax(const float *x, float *y, int64_t len, int mode) {
    float m = row_max(x, len);
    if (!isfinite(m)) return 0;
    double sum = row_exp_sum(x, mode == 0 ? y : NULL, len, m);
    if (mode == 2) {
        *y = (float)((double)m + log(sum));
    } else if (mode == 1) {
        /* x - lz as (x - hi) - lo, lz = hi + lo in two floats: within about an
           ulp of x - lz (two roundings, where (double)x - lz rounded once
           takes two conversions each way) */
        V hi, lo;
        split_f2((double)m + log(sum), &hi, &lo);
        int64_t i = 0;
        for (; i + VW <= len; i += VW) V_STOREU(y + i, V_SUB(V_SUB(V_LOADU(x + i), hi), lo));
        if (i < len)
            V_STORE_PART(y + i, len - i, V_SUB(V_SUB(V_LOAD_PART(x + i, len - i, 0.0f), hi), lo));
    } else {
        row_scale(y, len, 1.0 / sum);
    }
    return 1;
}

/* cross_entropy's rows: log sum e^x in double into *lse (forward), and
   softmax(x) s into y (backward, s the row's gradient scale); 0 when the
   lane's maximum is not finite (the caller's double loop) */
static inline int row_lse(const float *x, int64_t len, double *lse) {
    float m = row_max(x, len);
    if (!isfinite(m)) return 0;
    *lse = (double)m + log(row_exp_sum(x, NULL, len, m));
    return 1;
}

static inline int row_softmax_scaled(const float *x, float *y, int64_t len, double s) {
    float m = row_max(x, len);
    if (!isfinite(m)) return 0;
    row_scale(y, len, s / row_exp_sum(x, y, len, m));
    return 1;
}

/* nl <= VW lanes side by side (lane k's element r at x[r xs + k]), each run
   as row_softmax runs a contiguous lane of len elements, vertically: the
   maximum, the terms and their 16 double partial sums (partial j taking the
   rows r = j mod 16, in order) and the fold in row_acc_sum's order are per
   lane the same operations, so each lane gets row_softmax's bits.  y's
   element r of lane k at y[r ys + k] (modes 0 and 1) or y[k yk] (mode 2).
   0 when a lane's maximum is not finite (row_softmax's double loop takes
   those lanes), or softmax's sum is not (row_scale's other form): y may have
   been written then, and the caller runs the lanes again. */
static inline V cols_load(const float *p, int nl) {
    return nl == VW ? V_LOADU(p) : V_LOAD_PART(p, nl, 0.0f);
}
static inline void cols_store(float *p, int nl, V v) {
    if (nl == VW) V_STOREU(p, v);
    else V_STORE_PART(p, nl, v);
}

static inline int cols_softmax(const float *x, int64_t xs, float *y, int64_t ys, int64_t yk,
                               int64_t len, int nl, int mode) {
    V mv = V_SET1(-INFINITY);
    for (int64_t r = 0; r < len; r++) mv = V_MAX(cols_load(x + r * xs, nl), mv);
    /* the lanes past nl load as 0: finite */
    if (!M_ALL(V_CMP(V_ANDNOT(V_SET1(-0.0f), mv), V_SET1(INFINITY), _CMP_LT_OQ))) return 0;
    COLS_D part[16];
    int used = len < 16 ? (int)len : 16;
    for (int j = 0; j < used; j++) part[j] = cols_d_zero();
    for (int64_t r = 0; r < len; r++) {
        V t = row_term(cols_load(x + r * xs, nl), mv);
        if (mode == 0) cols_store(y + r * ys, nl, t);
        part[r & 15] = cols_d_add(part[r & 15], t);
    }
    for (int w = 8; w >= 1; w /= 2) /* row_acc_sum: j + 8, then + 4, + 2, + 1 */
        for (int j = 0; j < w; j++)
            if (j + w < used) part[j] = cols_d_sum(part[j], part[j + w]);
    float m[VW];
    double sum[VW];
    V_STOREU(m, mv);
    cols_d_store(sum, part[0]);
    if (mode == 2) {
        for (int k = 0; k < nl; k++) y[k * yk] = (float)((double)m[k] + log(sum[k]));
        return 1;
    }
    double v[VW]; /* split_f2 per lane of m + log sum, or of 1 / sum (row_scale) */
    float hi[VW], lo[VW];
    for (int k = nl; k < VW; k++) v[k] = 1.0; /* the lanes past nl */
    if (mode) {
        for (int k = 0; k < nl; k++) v[k] = (double)m[k] + log(sum[k]);
    } else {
        for (int k = 0; k < nl; k++) v[k] = 1.0 / sum[k];
        for (int k = 0; k < nl; k++)
            if (!(v[k] >= 0x1p-60 && v[k] <= 0x1p60)) return 0;
    }
    for (int k = 0; k < VW; k++) {
        hi[k] = (float)v[k];
        lo[k] = (float)(v[k] - hi[k]);
    }
    const V H = V_LOADU(hi), L = V_LOADU(lo);
    for (int64_t r = 0; r < len; r++) {
        if (mode) {
            cols_store(y + r * ys, nl, V_SUB(V_SUB(cols_load(x + r * xs, nl), H), L));
        } else { /* row_scale's FMA form (1 / sum is in [1 / len, 1] unless NaN) */
            V v = cols_load(y + r * ys, nl);
            cols_store(y + r * ys, nl, V_FMADD(v, H, V_MUL(v, L)));
        }
    }
    return 1;
}

/* softmax's (mode 0) and log_softmax's (mode 1) gradient along a contiguous
   lane, y the forward's output and g its gradient: dx = y (g - sum(g y)) and
   dx = g - e^y sum(g), the sum in the 16 double partials (the products g y
   exact in double), each dx rounded once from double: the same bits at both
   levels. */
static inline void row_softmax_grad(const float *y, const float *g, float *dx, int64_t len,
                                    int mode) {
    ROW_ACC acc;
    row_acc_zero(&acc);
    int64_t i = 0;
    for (; i + VW <= len; i += VW) {
        if (mode) row_acc(&acc, V_LOADU(g + i), i);
        else row_acc_prod(&acc, V_LOADU(y + i), V_LOADU(g + i), i);
    }
    if (i < len) {
        V gv = V_LOAD_PART(g + i, len - i, 0.0f);
        if (mode) row_acc(&acc, gv, i);
        else row_acc_prod(&acc, V_LOAD_PART(y + i, len - i, 0.0f), gv, i);
    }
    const double s = row_acc_sum(&acc);
    const COLS_D sv = cols_d_set1(s);
#define SMG(yv, gv) (mode ? V_LSMGRAD_DV(v_exp(yv), (gv), sv) : V_SMGRAD_DV((yv), (gv), sv))
    for (i = 0; i + VW <= len; i += VW) V_STOREU(dx + i, SMG(V_LOADU(y + i), V_LOADU(g + i)));
    if (i < len)
        V_STORE_PART(dx + i, len - i,
                     SMG(V_LOAD_PART(y + i, len - i, 0.0f), V_LOAD_PART(g + i, len - i, 0.0f)));
#undef SMG
}

/* row_softmax_grad over nl <= VW lanes side by side (lane k's element r at
   y[r rs + k], g[...], dx[...]), vertically as cols_softmax: each lane's
   partials, their fold and its dx are row_softmax_grad's, so its bits */
static inline void cols_softmax_grad(const float *y, const float *g, float *dx, int64_t rs,
                                     int64_t len, int nl, int mode) {
    COLS_D part[16];
    int used = len < 16 ? (int)len : 16;
    for (int j = 0; j < used; j++) part[j] = cols_d_zero();
    for (int64_t r = 0; r < len; r++) {
        V gv = cols_load(g + r * rs, nl);
        part[r & 15] = mode ? cols_d_add(part[r & 15], gv)
                            : cols_d_fmadd(part[r & 15], cols_load(y + r * rs, nl), gv);
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            if (j + w < used) part[j] = cols_d_sum(part[j], part[j + w]);
    for (int64_t r = 0; r < len; r++) {
        V yv = cols_load(y + r * rs, nl), gv = cols_load(g + r * rs, nl);
        cols_store(dx + r * rs, nl,
                   mode ? V_LSMGRAD_DV(v_exp(yv), gv, part[0]) : V_SMGRAD_DV(yv, gv, part[0]));
    }
}

/* ---- gelu_erf's and gelu's gradients and layer_norm rows ------------------------
 * d gelu_erf = g (Phi(x) + x phi(x)), the backward's composite formula
 * (Phi = (1 + erf(x / sqrt 2)) / 2, phi = e^(-x^2/2) / sqrt(2 pi)) in one
 * pass that reads x and g once.  layer_norm rows: sums in the 16 double
 * partials of the softmax rows (row_acc), folded in one fixed order, so
 * AVX2 and AVX-512 agree; the terms are float32. */
/* from e = erf(x / sqrt 2) */
static inline V gelu_erf_grad_e(V x, V g, V e) {
    V P = V_FMADD(V_SET1(0.5f), e, V_SET1(0.5f));
    /* e^(-x^2/2) as 0 from x >= 7 on as well (x phi(x) < 2^-33, P = 1: the sum is 1) */
    V a = V_MUL(V_MUL(x, x), V_SET1(-0.5f));
    M z = M_OR(V_CMP(a, V_SET1(-104.0f), _CMP_LE_OQ), V_CMP(x, V_SET1(7.0f), _CMP_GE_OQ));
    V ph = V_MUL(all_below(x, 7.0f) ? exp_fast(a) : exp_core_z(a, z), V_SET1(0.3989422804014327f));
    return V_MUL(g, V_FMADD(x, ph, P));
}

static inline V v_gelu_erf_grad(V x, V g) {
    return gelu_erf_grad_e(x, g, v_erf(V_MUL(x, V_SET1(0.70710678118654752f))));
}

/* d gelu (the tanh form) = g (s + x s (1 - s) 2c (1 + 3k x^2)), s = sigmoid(2u),
   u = c (x + k x^3): the backward's formula (1 + t) / 2 + x / 2 (1 - t^2) c
   (1 + 3k x^2), t = tanh u, with 1 + t = 2s and 1 - t^2 = 4 s (1 - s).  From
   |x| >= 10 on (inf included) it is exactly 1 or 0: s rounds to 1 above 10,
   |d| < 3e-36 below -10, and x s (1 - s) would be inf * 0 there. */
static inline V v_gelu_grad(V x, V g) {
    V xx = V_MUL(x, x);
    V s = v_sigmoid(V_MUL(V_FNMADD(xx, V_SET1(GELU_M2CK_F), V_SET1(-GELU_M2C_F)), x));
    V q = V_FNMADD(xx, V_SET1(3.0f * GELU_M2CK_F), V_SET1(-GELU_M2C_F));
    V d = V_FMADD(V_MUL(x, V_MUL(s, V_SUB(V_SET1(1.0f), s))), q, s);
    M big = V_CMP(V_ANDNOT(V_SET1(-0.0f), x), V_SET1(10.0f), _CMP_GE_OQ);
    d = V_SELECT(big, V_SELECT(V_CMP(x, V_ZERO(), _CMP_GT_OQ), V_SET1(1.0f), V_ZERO()), d);
    return V_MUL(g, d);
}

/* tanh's, sigmoid's and relu's gradients from the output y and silu's from
   x, the recorded formulas' float32 operations (backward.c) in their order:
   the same bits in one pass.  relu's is g times 1 or 0 (y > 0), so an inf or
   NaN g still gives NaN where y <= 0, as the formula's product does. */
static inline V v_tanh_grad(V y, V g) { return V_MUL(V_SUB(V_SET1(1.0f), V_MUL(y, y)), g); }
static inline V v_sigmoid_grad(V y, V g) { return V_MUL(V_MUL(g, y), V_SUB(V_SET1(1.0f), y)); }
static inline V v_relu_grad(V y, V g) {
    return V_MUL(V_SELECT(V_CMP(y, V_ZERO(), _CMP_GT_OQ), V_SET1(1.0f), V_ZERO()), g);
}
static inline V v_silu_grad(V x, V g) {
    const V one = V_SET1(1.0f);
    V s = v_sigmoid(x);
    return V_MUL(g, V_MUL(s, V_ADD(V_MUL(x, V_SUB(one, s)), one)));
}

/* dx = GRAD(x, g) a vector at a time over n elements, g contiguous (sg = 1)
   or one value for every element (sg = 0: the gradient of a sum) */
#define DEF_GRAD_MAP(NAME, GRAD)                                                              \
    static inline void NAME(int64_t n, const float *x, const float *g, int64_t sg, float *dx) { \
        int64_t i = 0;                                                                        \
        if (!sg) {                                                                            \
            const V gv = V_SET1(*g);                                                          \
            for (; i + VW <= n; i += VW) V_STOREU(dx + i, GRAD(V_LOADU(x + i), gv));          \
            if (i < n) V_STORE_PART(dx + i, n - i, GRAD(V_LOAD_PART(x + i, n - i, 0.0f), gv)); \
            return;                                                                           \
        }                                                                                     \
        for (; i + VW <= n; i += VW) V_STOREU(dx + i, GRAD(V_LOADU(x + i), V_LOADU(g + i)));  \
        if (i < n)                                                                            \
            V_STORE_PART(dx + i, n - i,                                                       \
                         GRAD(V_LOAD_PART(x + i, n - i, 0.0f), V_LOAD_PART(g + i, n - i, 0.0f))); \
    }
DEF_GRAD_MAP(gelu_erf_grad_vectors, v_gelu_erf_grad)
DEF_GRAD_MAP(gelu_grad_map, v_gelu_grad)
DEF_GRAD_MAP(tanh_grad_map, v_tanh_grad)
DEF_GRAD_MAP(sigmoid_grad_map, v_sigmoid_grad)
DEF_GRAD_MAP(relu_grad_map, v_relu_grad)
DEF_GRAD_MAP(silu_grad_map, v_silu_grad)
#undef DEF_GRAD_MAP

static inline void gelu_erf_grad_map(int64_t n, const float *x, const float *g, int64_t sg,
                                     float *dx) {
    int64_t i = 0;
    /* erf(x / sqrt 2) of a block first, through the map's gathered form
       (erf_contig), then the rest a vector at a time */
    float u[GE_BLOCK];
    for (; i + GE_BLOCK <= n; i += GE_BLOCK) {
        for (int j = 0; j < GE_BLOCK; j += VW)
            V_STOREU(u + j, V_MUL(V_LOADU(x + i + j), V_SET1(0.70710678118654752f)));
        erf_contig(GE_BLOCK, u, u);
        for (int j = 0; j < GE_BLOCK; j += VW)
            V_STOREU(dx + i + j, gelu_erf_grad_e(V_LOADU(x + i + j),
                                                 sg ? V_LOADU(g + i + j) : V_SET1(*g),
                                                 V_LOADU(u + j)));
    }
    gelu_erf_grad_vectors(n - i, x + i, g + i * sg, sg, dx + i);
}

/* 16 float32 partial sums, partial j taking the elements i = j (mod 16) in
   order (16 / VW vectors), folded pairwise in one fixed order (V_FOLD16:
   j + 8, then + 4, + 2, + 1): AVX2 and AVX-512 give the same bits */
typedef struct { V a[16 / VW]; } ACC16;
static inline void acc16_zero(ACC16 *c) {
    for (int u = 0; u < 16 / VW; u++) c->a[u] = V_ZERO();
}
static inline double acc16_fold(const ACC16 *c) { return (double)V_FOLD16(c->a); }
/* the lanes of a row from element i on: k = min(VW, len - i) of them, the
   others loaded as 0 */
#define LN_LD(p, i, k) ((k) == VW ? V_LOADU((p) + (i)) : V_LOAD_PART((p) + (i), (k), 0.0f))
#define LN_ST(p, i, k, v)                                                  \
    do {                                                                   \
        if ((k) == VW) V_STOREU((p) + (i), (v));                           \
        else V_STORE_PART((p) + (i), (k), (v));                            \
    } while (0)
/* runs BODY(i, k, u) over a row: 16 elements a step (u the partial's
   vector), then the tail */
#define LN_ROW(len, BODY)                                                  \
    do {                                                                   \
        int64_t i_ = 0;                                                    \
        for (; i_ + 16 <= (len); i_ += 16)                                 \
            for (int u_ = 0; u_ < 16 / VW; u_++) BODY(i_ + u_ * VW, VW, u_); \
        for (; i_ < (len); i_ += VW) {                                     \
            int64_t k_ = (len) - i_ < VW ? (len) - i_ : VW;                \
            BODY(i_, k_, (int)((i_ & 15) / VW));                           \
        }                                                                  \
    } while (0)

/* mean and 1 / sqrt(var + eps) of a row, the variance from the deviations
   x - mean, mean as a float32 pair hi + lo (two passes, no cancellation) */
typedef struct { float hi, lo, rstd; } ln_stats;
static inline ln_stats row_moments(const float *x, int64_t len, double eps) {
    ACC16 acc;
    acc16_zero(&acc);
#define SUM_X(i, k, u) acc.a[u] = V_ADD(acc.a[u], LN_LD(x, i, k))
    LN_ROW(len, SUM_X);
#undef SUM_X
    double m = acc16_fold(&acc) / (double)len;
    ln_stats st = {(float)m, 0.0f, 0.0f};
    st.lo = (float)(m - (double)st.hi);
    const V MH = V_SET1(st.hi), ML = V_SET1(st.lo), SC = V_SET1(0x1p-100f); /* see below */
    acc16_zero(&acc);
#define SUM_D2(i, k, u, SCALED)                                            \
    do {                                                                   \
        V d_ = V_SUB(V_SUB(LN_LD(x, i, k), MH), ML);                       \
        if (SCALED) d_ = V_MUL(d_, SC);                                    \
        if ((k) != VW) d_ = V_KEEP(d_, k);                                 \
        acc.a[u] = V_FMADD(d_, d_, acc.a[u]);                              \
    } while (0)
#define SUM_D2_AS_IS(i, k, u) SUM_D2(i, k, u, 0)
#define SUM_D2_SCALED(i, k, u) SUM_D2(i, k, u, 1)
    LN_ROW(len, SUM_D2_AS_IS);
    double ss = acc16_fold(&acc);
    if (isinf(ss) && isfinite(m)) {
        /* deviations past 2^64, whose squares overflow float32 (rstd would
           be 0 and the row 0, silently): again from the deviations scaled
           by 2^-100, as layer_norm does not depend on the scale; beside
           them the small ones' squares underflow harmlessly */
        acc16_zero(&acc);
        LN_ROW(len, SUM_D2_SCALED);
        st.rstd = (float)(0x1p-100 / sqrt(acc16_fold(&acc) / (double)len + eps * 0x1p-200));
        return st;
    }
#undef SUM_D2_SCALED
#undef SUM_D2_AS_IS
#undef SUM_D2
    st.rstd = (float)(1.0 / sqrt(ss / (double)len + eps));
    return st;
}

/* y = (x - mean) rstd w + b (w, b may be NULL) */
static inline void row_layer_norm(const float *x, const float *w, const float *b, float *y,
                                  int64_t len, double eps) {
    ln_stats st = row_moments(x, len, eps);
    const V MH = V_SET1(st.hi), ML = V_SET1(st.lo), R = V_SET1(st.rstd);
#define NORM(i, k, u)                                                      \
    do {                                                                   \
        V v_ = V_MUL(V_SUB(V_SUB(LN_LD(x, i, k), MH), ML), R);             \
        if (w) v_ = V_MUL(v_, LN_LD(w, i, k));                             \
        if (b) v_ = V_ADD(v_, LN_LD(b, i, k));                             \
        LN_ST(y, i, k, v_);                                                \
    } while (0)
    LN_ROW(len, NORM);
#undef NORM
}

/* One row of layer_norm's gradient: xhat = (x - mean) rstd, gw = g w (g
   without w), dx = rstd (gw - mean(gw) - xhat mean(gw xhat)); dw += g xhat
   and db += g (either NULL to skip) */
static inline void row_layer_norm_grad(const float *x, const float *g, const float *w, float *dx,
                                       float *dw, float *db, int64_t len, double eps) {
    ln_stats st = row_moments(x, len, eps);
    const V MH = V_SET1(st.hi), ML = V_SET1(st.lo), R = V_SET1(st.rstd);
    ACC16 s1, s2;
    acc16_zero(&s1);
    acc16_zero(&s2);
#define SUMS(i, k, u)                                                      \
    do {                                                                   \
        V xh_ = V_MUL(V_SUB(V_SUB(LN_LD(x, i, k), MH), ML), R);            \
        if ((k) != VW) xh_ = V_KEEP(xh_, k);                               \
        V g_ = LN_LD(g, i, k);                                             \
        V gw_ = w ? V_MUL(g_, LN_LD(w, i, k)) : g_;                        \
        s1.a[u] = V_ADD(s1.a[u], gw_);                                     \
        s2.a[u] = V_FMADD(gw_, xh_, s2.a[u]);                              \
        if (dw) LN_ST(dw, i, k, V_FMADD(g_, xh_, LN_LD(dw, i, k)));        \
        if (db) LN_ST(db, i, k, V_ADD(g_, LN_LD(db, i, k)));               \
    } while (0)
    LN_ROW(len, SUMS);
#undef SUMS
    const V M1 = V_SET1((float)(acc16_fold(&s1) / (double)len));
    const V M2 = V_SET1((float)(acc16_fold(&s2) / (double)len));
#define DX(i, k, u)                                                        \
    do {                                                                   \
        V xh_ = V_MUL(V_SUB(V_SUB(LN_LD(x, i, k), MH), ML), R);            \
        V g_ = LN_LD(g, i, k);                                             \
        V gw_ = w ? V_MUL(g_, LN_LD(w, i, k)) : g_;                        \
        LN_ST(dx, i, k, V_MUL(V_FNMADD(xh_, M2, V_SUB(gw_, M1)), R));      \
        (void)(u);                                                         \
    } while (0)
    LN_ROW(len, DX);
#undef DX
}
