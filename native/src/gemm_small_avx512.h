/* The AVX-512 small-product kernel: included once per dtype by
   gemm_ukr_avx512.h (inside its parameters: T, V, VL, SFX, LOADU, STOREU,
   SET1, FMA, ZERO, MLOAD, MSTORE). No include guard: including it twice is
   the point.

   gemm_small_<SFX> (gemm.h) computes a whole small product C = A @ B with A,
   B and C row-major, all read and written in place: no packing, and no call
   per register tile. Column panels of up to 4 vectors (64 float32, 32
   float64 columns), the last vector of a partial panel loaded and stored
   through a mask (a masked load never reads past the mask, so B's last
   columns are read in place too); rows in tiles of 4 for panels of 2-4
   vectors (8-16 accumulators) and of 8 for one vector, a last tile of up to
   1.5 times that many rows taken whole. Each tile is the register-tile loop
   of gemm_ukr_tile_avx512.h inlined at constant size: every element is the
   same FMA chain over k from zero as in every other GEMM path, so the bits
   do not change.

   On Zen 4 (1 thread, in-process against OpenBLAS's direct sgemm, which
   numpy calls per batch item), batches of 32x64 @ 64x32, 64x32 @ 32x32 and
   64x64 @ 64x64 float32 ran 4-7% slower through macro() and the tail kernels
   (one call per 12 x 32 tile, a partial B panel packed per item) and 1-5%
   faster through this kernel. */

#define SMALL_S(name) UKR_CAT(name, SFX)

static inline __attribute__((always_inline)) void SMALL_S(small_tile)(
    const int MR, const int NV, const int MASKED, int64_t k, const T *restrict a, int64_t rsa,
    const T *restrict b, int64_t rsb, T *restrict c, int64_t rsc, int last)
{
    V acc[12][4];
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) acc[i][j] = ZERO();
    for (int64_t p = 0; p < k; p++) {
        V bv[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) bv[j] =
            MASKED && j == NV - 1 ? MLOAD(b + j * VL, last) : LOADU(b + j * VL);
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {
            V av = SET1(a[i * rsa]);
            _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)
                acc[i][j] = FMA(av, bv[j], acc[i][j]);
        }
        a++;
        b += rsb;
    }
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) {
            if (MASKED && j == NV - 1)
                MSTORE(c + i * rsc + j * VL, acc[i][j], last);
            else
                STOREU(c + i * rsc + j * VL, acc[i][j]);
        }
}

void SMALL_S(gemm_small)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, const T *b,
                         int64_t rsb, T *c, int64_t rsc)
{
    for (int64_t j = 0; j < n; j += 4 * VL) {
        int64_t w = n - j < 4 * VL ? n - j : 4 * VL;
        int nv = (int)((w + VL - 1) / VL);
        int last = (int)(w - (nv - 1) * VL), masked = last < VL;
        int64_t th = nv > 1 ? 4 : 8;
        for (int64_t i = 0, ib; i < m; i += ib) {
            ib = gemm_tile_rows(th, th + th / 2, m - i);
            const T *ai = a + i * rsa, *bj = b + j;
            T *cij = c + i * rsc + j;
#define SMALL_CASE_(MR, NV)                                                                 \
    case (NV) * 16 + (MR):                                                                  \
        if (masked)                                                                         \
            SMALL_S(small_tile)(MR, NV, 1, k, ai, rsa, bj, rsb, cij, rsc, last);            \
        else                                                                                \
            SMALL_S(small_tile)(MR, NV, 0, k, ai, rsa, bj, rsb, cij, rsc, last);            \
        break;
#define SMALL_ROWS6_(NV)                                                                    \
    SMALL_CASE_(1, NV) SMALL_CASE_(2, NV) SMALL_CASE_(3, NV) SMALL_CASE_(4, NV)             \
    SMALL_CASE_(5, NV) SMALL_CASE_(6, NV)
            switch (nv * 16 + (int)ib) {
                SMALL_ROWS6_(1)
                SMALL_CASE_(7, 1) SMALL_CASE_(8, 1) SMALL_CASE_(9, 1) SMALL_CASE_(10, 1)
                SMALL_CASE_(11, 1) SMALL_CASE_(12, 1)
                SMALL_ROWS6_(2)
                SMALL_ROWS6_(3)
                SMALL_ROWS6_(4)
            }
#undef SMALL_ROWS6_
#undef SMALL_CASE_
        }
    }
}

#undef SMALL_S
