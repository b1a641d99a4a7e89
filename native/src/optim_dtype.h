/* optim.c's per-dtype fused update kernels: included once per float dtype
   by optim.c, which defines T (the element type), S(name) (the dtype suffix)
   and SQRT (T's square root) first. No include guard: including it twice is
   the point; it undefines its parameters at the end. */

/* s = {lr, momentum, 1 - dampening, weight_decay}; b0 = momentum buffer. */
OPT_TARGET static void S(sgd)(const opt_job *j, int64_t lo, int64_t hi) {
    T *restrict p = (T *)j->p, *restrict buf = (T *)j->b0;
    const T *restrict gr = (const T *)j->g;
    const T nlr = (T)(-j->s[0]), mom = (T)j->s[1], damp1 = (T)j->s[2], wd = (T)j->s[3];
    const int nesterov = j->flags & SGD_NESTEROV, first = j->flags & SGD_FIRST;
    const int has_wd = j->s[3] != 0;
    for (int64_t i = lo; i < hi; i++) {
        T g = gr[i];
        if (has_wd) g = g + wd * p[i];
        if (buf) {
            T b = first ? g : buf[i] * mom + damp1 * g;
            buf[i] = b;
            g = nesterov ? g + mom * b : b;
        }
        p[i] = p[i] + nlr * g;
    }
}

/* s = {-step_size, 1 - beta1 (the lerp weight), beta2, 1 - beta2,
        sqrt(bias correction 2), eps, weight_decay, decay}, where decay is
   1 - lr * weight_decay for AdamW and 1 otherwise (w * 1 is exact);
   b0 = exp_avg, b1 = exp_avg_sq, b2 = max_exp_avg_sq (amsgrad) or NULL.
   The flags are constants in each inlined copy, so every loop is branch-free. */
INLINE void S(adam_loop)(const opt_job *j, int64_t lo, int64_t hi, const int coupled,
                         const int ams) {
    T *restrict p = (T *)j->p, *restrict m = (T *)j->b0, *restrict v = (T *)j->b1;
    T *restrict vmax = (T *)j->b2;
    const T *restrict gr = (const T *)j->g;
    const T nss = (T)j->s[0], w1 = (T)j->s[1], beta2 = (T)j->s[2], w2 = (T)j->s[3];
    const T bc2s = (T)j->s[4], eps = (T)j->s[5], wd = (T)j->s[6], decay = (T)j->s[7];
    const int near_s = fabs((double)w1) < 0.5;
    const T coeff = near_s ? w1 : w1 - (T)1;
    for (int64_t i = lo; i < hi; i++) {
        T g = gr[i], w = p[i] * decay;
        if (coupled) g = g + wd * w;
        T mi = LERP(near_s, coeff, m[i], g);
        T vi = v[i] * beta2 + w2 * g * g;
        m[i] = mi;
        v[i] = vi;
        if (ams) {
            vi = MAXNAN(vmax[i], vi);
            vmax[i] = vi;
        }
        T denom = SQRT(vi) / bc2s + eps;
        p[i] = w + nss * mi / denom;
    }
}

OPT_TARGET static void S(adam)(const opt_job *j, int64_t lo, int64_t hi) {
    const int coupled = j->s[6] != 0 && !(j->flags & ADAM_DECOUPLED);
    if (coupled)
        j->b2 ? S(adam_loop)(j, lo, hi, 1, 1) : S(adam_loop)(j, lo, hi, 1, 0);
    else
        j->b2 ? S(adam_loop)(j, lo, hi, 0, 1) : S(adam_loop)(j, lo, hi, 0, 0);
}

/* s = {lr, alpha, 1 - alpha (the lerp weight), eps, weight_decay, momentum};
   b0 = square_avg, b1 = momentum buffer or NULL, b2 = grad_avg (centered) or NULL. */
INLINE void S(rmsprop_loop)(const opt_job *j, int64_t lo, int64_t hi, const int has_wd,
                            const int has_buf, const int centered) {
    T *restrict p = (T *)j->p, *restrict sq = (T *)j->b0, *restrict buf = (T *)j->b1;
    T *restrict ga = (T *)j->b2;
    const T *restrict gr = (const T *)j->g;
    const T nlr = (T)(-j->s[0]), alpha = (T)j->s[1], w = (T)j->s[2], eps = (T)j->s[3];
    const T wd = (T)j->s[4], mom = (T)j->s[5];
    const int near_s = fabs((double)w) < 0.5;
    const T coeff = near_s ? w : w - (T)1;
    for (int64_t i = lo; i < hi; i++) {
        T g = gr[i];
        if (has_wd) g = g + wd * p[i];
        T s = sq[i] * alpha + w * g * g;
        sq[i] = s;
        T avg;
        if (centered) {
            T a = LERP(near_s, coeff, ga[i], g);
            ga[i] = a;
            avg = SQRT(s + (T)(-1) * a * a);
        } else {
            avg = SQRT(s);
        }
        avg = avg + eps;
        if (has_buf) {
            T b = buf[i] * mom + g / avg;
            buf[i] = b;
            p[i] = p[i] + nlr * b;
        } else {
            p[i] = p[i] + nlr * g / avg;
        }
    }
}

OPT_TARGET static void S(rmsprop)(const opt_job *j, int64_t lo, int64_t hi) {
    switch ((j->s[4] != 0) | (j->b1 != NULL) << 1 | (j->b2 != NULL) << 2) {
    case 0: S(rmsprop_loop)(j, lo, hi, 0, 0, 0); break;
    case 1: S(rmsprop_loop)(j, lo, hi, 1, 0, 0); break;
    case 2: S(rmsprop_loop)(j, lo, hi, 0, 1, 0); break;
    case 3: S(rmsprop_loop)(j, lo, hi, 1, 1, 0); break;
    case 4: S(rmsprop_loop)(j, lo, hi, 0, 0, 1); break;
    case 5: S(rmsprop_loop)(j, lo, hi, 1, 0, 1); break;
    case 6: S(rmsprop_loop)(j, lo, hi, 0, 1, 1); break;
    default: S(rmsprop_loop)(j, lo, hi, 1, 1, 1); break;
    }
}

#undef T
#undef S
#undef SQRT
