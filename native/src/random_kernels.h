/* random_kernels.h - the counter-based random draws behind rand, randn and
 * dropout, compiled once per ISA level by ew_kernels.h (the loops are plain
 * C that each level's compiler vectorises: AVX-512's 64-bit multiplies, AVX2's
 * emulated ones).  elementwise.c runs them over chunks of the output
 * (ew_random), so the values depend on the seed and the element's position
 * only: not on the thread count, the chunking or the ISA level.
 *
 * Draw c of seed s is splitmix64's output mix(s + c * golden), c = 1, 2, ...
 * (the stream splitmix64 steps through, computed at any position directly).
 * Element i takes:
 *   uniform: draw i + 1; float64 (z >> 11) 2^-53, float32 (z >> 40) 2^-24,
 *     both in [0, 1) (a float32 rounded from the 53-bit value could be 1);
 *   normal: pair p takes draws 2p + 1 and 2p + 2, u from the first (never 0)
 *     and v from the second, and gives Box-Muller's two values r cos(2 pi v)
 *     and r sin(2 pi v), r = sqrt(-2 log u); in blocks of 32 elements, block
 *     b holds the cosines of pairs 16b .. 16b + 15, then their sines (a
 *     layout the SIMD levels fill a vector at a time).  float32 in float32
 *     arithmetic, u of 31 bits (|values| up to 6.7), v of 24; float64 with
 *     u and v of 53 bits (up to 8.6);
 *   dropout: draw i + 1, kept when z >> 11 >= thr (thr = ceil(p 2^53): the
 *     53-bit uniform >= p), then x scale in double, else 0. */
#define RND_GOLDEN 0x9e3779b97f4a7c15ULL
static inline uint64_t rnd_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* draw c of seed s */
static inline uint64_t rnd_draw(uint64_t s, uint64_t c) { return rnd_mix(s + c * RND_GOLDEN); }

/* The scalar form of simd_entries.h's ad_box_muller_f32 (the portable level;
   libm's float32 functions, so its bits may differ from the SIMD levels') */
static void EW_NAME(box_muller_f32)(int64_t blocks, const int32_t *u, const int32_t *v,
                                    float *y) {
    for (int64_t k = 0; k < blocks * 16; k++) {
        float r = sqrtf(-2.0f * logf(((float)u[k] + 0.5f) * 0x1p-31f));
        float t = 6.28318530717958648f * ((float)v[k] * 0x1p-24f);
        y[32 * (k / 16) + k % 16] = r * cosf(t);
        y[32 * (k / 16) + 16 + k % 16] = r * sinf(t);
    }
}

/* normal float32 over [i0, i1), i0 a multiple of 32: up to 16 blocks' draws
   at a time, then Box-Muller (a part block at the end into a buffer) */
static void EW_NAME(normal_f32)(const ew_random_job *j, int64_t i0, int64_t i1) {
    void (*bm)(int64_t, const int32_t *, const int32_t *, float *) =
        j->box_muller_f32 ? j->box_muller_f32 : EW_NAME(box_muller_f32);
    float *y = (float *)j->y;
    int32_t u[16 * 16], v[16 * 16];
    for (int64_t i = i0; i < i1;) {
        int64_t blocks = (i1 - i + 31) / 32, full;
        if (blocks > 16) blocks = 16;
        uint64_t c = (uint64_t)i + 1; /* pair i / 2 + k: draws 2 (i / 2 + k) + 1 and + 2 */
        for (int64_t k = 0; k < blocks * 16; k++) {
            u[k] = (int32_t)(rnd_draw(j->seed, c + 2 * (uint64_t)k) >> 33);
            v[k] = (int32_t)(rnd_draw(j->seed, c + 2 * (uint64_t)k + 1) >> 40);
        }
        full = (i1 - i) / 32 < blocks ? (i1 - i) / 32 : blocks;
        bm(full, u, v, y + i);
        if (full < blocks) {
            float t[32];
            bm(1, u + 16 * full, v + 16 * full, t);
            memcpy(y + i + 32 * full, t, (size_t)(i1 - i - 32 * full) * sizeof(float));
        }
        i += 32 * blocks;
    }
}

/* normal float64 over [i0, i1), i0 a multiple of 32: the same pairs and
   layout, u and v of 53 bits, libm's double functions */
static void EW_NAME(normal_f64)(const ew_random_job *j, int64_t i0, int64_t i1) {
    double *y = (double *)j->y;
    for (int64_t p = i0 / 2;; p++) {
        int64_t e = 32 * (p / 16) + p % 16; /* the cosine's element; the sine's is e + 16 */
        if (e >= i1) break;
        uint64_t c = 2 * (uint64_t)p + 1;
        double u = ((double)(int64_t)(rnd_draw(j->seed, c) >> 11) + 0.5) * 0x1p-53;
        double v = (double)(int64_t)(rnd_draw(j->seed, c + 1) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u)), t = 6.283185307179586 * v;
        y[e] = r * cos(t);
        if (e + 16 < i1) y[e + 16] = r * sin(t);
    }
}

/* the elements [i0, i1) of j's output (for normal, i0 a multiple of 32) */
void EW_NAME(ew_random)(const ew_random_job *j, int64_t i0, int64_t i1) {
    const uint64_t s = j->seed;
    const uint64_t c0 = (uint64_t)i0 + 1;
    const int64_t n = i1 - i0;
    if (j->kind == EW_RAND_DROPOUT) {
        const int64_t thr = (int64_t)j->thr; /* <= 2^53: a signed compare */
        const double scale = j->scale;
        /* the kept value's bits and-ed with an all-ones or zero mask: a
           branch on the coin would be mispredicted half the time */
        if (j->dtype == AD_FLOAT32) {
            const float *x = (const float *)j->x + i0;
            uint32_t *y = (uint32_t *)j->y + i0;
            for (int64_t k = 0; k < n; k++) {
                int64_t u = (int64_t)(rnd_draw(s, c0 + (uint64_t)k) >> 11);
                float v = (float)((double)x[k] * scale);
                uint32_t b;
                memcpy(&b, &v, sizeof b);
                y[k] = b & -(uint32_t)(u >= thr);
            }
        } else {
            const double *x = (const double *)j->x + i0;
            uint64_t *y = (uint64_t *)j->y + i0;
            for (int64_t k = 0; k < n; k++) {
                int64_t u = (int64_t)(rnd_draw(s, c0 + (uint64_t)k) >> 11);
                double v = x[k] * scale;
                uint64_t b;
                memcpy(&b, &v, sizeof b);
                y[k] = b & -(uint64_t)(u >= thr);
            }
        }
    } else if (j->kind == EW_RAND_UNIFORM) {
        if (j->dtype == AD_FLOAT32) {
            float *y = (float *)j->y + i0;
            for (int64_t k = 0; k < n; k++)
                y[k] = (float)(int32_t)(rnd_draw(s, c0 + (uint64_t)k) >> 40) * 0x1p-24f;
        } else {
            double *y = (double *)j->y + i0;
            for (int64_t k = 0; k < n; k++)
                y[k] = (double)(int64_t)(rnd_draw(s, c0 + (uint64_t)k) >> 11) * 0x1p-53;
        }
    } else if (j->dtype == AD_FLOAT32) {
        EW_NAME(normal_f32)(j, i0, i1);
    } else {
        EW_NAME(normal_f64)(j, i0, i1);
    }
}
