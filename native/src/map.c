/* map.c - open-addressing hash map from tensor id (never 0) to a pointer. */
#include <string.h>

#include "internal.h"

static inline uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

ad_status map_init(id_map *m, int64_t cap_hint) {
    int64_t cap = 16;
    while (cap < cap_hint * 2) cap *= 2;
    m->keys = ad_calloc((size_t)cap * sizeof *m->keys);
    m->vals = ad_calloc((size_t)cap * sizeof *m->vals);
    m->cap = cap;
    m->len = 0;
    if (!m->keys || !m->vals) {
        map_free(m);
        return ad_fail_nomem("gradient map");
    }
    return AD_OK;
}

void map_free(id_map *m) {
    ad_mfree(m->keys);
    ad_mfree(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->len = 0;
}

static int64_t slot(const id_map *m, uint64_t key) {
    int64_t i = (int64_t)(mix(key) & (uint64_t)(m->cap - 1));
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

void **map_get(const id_map *m, uint64_t key) {
    if (!m->cap) return NULL;
    int64_t i = slot(m, key);
    return m->keys[i] ? &m->vals[i] : NULL;
}

static ad_status grow(id_map *m) {
    id_map bigger;
    ad_status st = map_init(&bigger, m->cap);
    if (st) return st;
    for (int64_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        int64_t j = slot(&bigger, m->keys[i]);
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
        bigger.len++;
    }
    map_free(m);
    *m = bigger;
    return AD_OK;
}

ad_status map_put(id_map *m, uint64_t key, void *val) {
    if ((m->len + 1) * 4 > m->cap * 3) {
        ad_status st = grow(m);
        if (st) return st;
    }
    int64_t i = slot(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->len++;
    }
    m->vals[i] = val;
    return AD_OK;
}

void *map_del(id_map *m, uint64_t key) {
    if (!m->cap) return NULL;
    int64_t i = slot(m, key);
    if (!m->keys[i]) return NULL;
    void *old = m->vals[i];
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->len--;
    /* backward-shift deletion keeps probe chains intact */
    int64_t j = i;
    for (;;) {
        j = (j + 1) & (m->cap - 1);
        if (!m->keys[j]) break;
        int64_t home = (int64_t)(mix(m->keys[j]) & (uint64_t)(m->cap - 1));
        /* move j to i if its home is not in (i, j] cyclically */
        bool between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            m->keys[j] = 0;
            m->vals[j] = NULL;
            i = j;
        }
    }
    return old;
}
