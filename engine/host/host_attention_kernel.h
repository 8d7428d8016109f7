/* host_attention.c's key walk at one vector width, VN floats: a tile's keys decoded into floats once
 * (in each form some row reads them), every row's scores against them, one online-softmax rescale
 * a row, head and tile, then the values the same way. host_attention.c includes this file once a
 * width with VN defined (8: plain C and AVX2; 16: AVX-512, where a chunk of 16 codes is two loads
 * and the 4 x 4 score block's 16 sums of 16 lanes fit its 32 registers, reduced in one butterfly),
 * so the walk is written once; every name it defines ends in _VN. Nothing else includes it. */
#ifndef VN
#error "host_attention_kernel.h belongs to host_attention.c, which includes it with VN defined"
#endif

#define KN_JOIN2(a, b) a##_##b
#define KN_JOIN(a, b) KN_JOIN2(a, b)
#define KN(name) KN_JOIN(name, VN)
#define VF KN(vf)
#define VI KN(vi)
#define VU KN(vu)

typedef float VF __attribute__((vector_size(VN * 4)));
typedef int32_t VI __attribute__((vector_size(VN * 4)));
typedef uint32_t VU __attribute__((vector_size(VN * 4)));

WK_INLINE VF KN(load)(const float *p) {
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}
WK_INLINE void KN(store)(float *p, VF v) { memcpy(p, &v, sizeof v); }


/* Lane i of the result: levels' lane idx[i] modulo VN, one lane permute. GCC's __builtin_shuffle
 * takes a variable index vector; clang has none (it builds only the fuzzing targets, where this
 * loop's speed does not matter). */
WK_INLINE VF KN(pick)(VF levels, VI idx) {
#if defined(__clang__)
    VF r;
    for (int i = 0; i < VN; i++) r[i] = levels[idx[i] & (VN - 1)];
    return r;
#else
    return __builtin_shuffle(levels, idx);
#endif
}

/* Token tt's codes of the slab at word `slab` (codes a token code_words apart, then its groups'
 * f16 parameters from params_words), decoded into y (D floats): u * a + b, a and b the group's
 * (kv_quant.glsl's wk_kvq_affine). Eight codes of b bits are 8b bits, so every run of eight starts
 * on a byte and one 32-bit load holds it (with 2 or 3 bits the rest belongs to the next codes or
 * the parameters, inside the slab); a chunk of VN codes is VN / 8 such loads. With `lookup` (the
 * vector codes, where a group's 2^b levels fit a register's lanes: all widths in 16 lanes, 2 and 3
 * bits in 8) a group's levels are formed once, u * a + b for every u as the plain decode forms
 * each, and a code picks its level by a lane permute of the shifted word, whose lane index is the
 * word's low bits, the next codes' bits above the code's own met by levels that repeat (so the same
 * floats, bit for bit, in 3 instructions for VN codes instead of 7: no mask, conversion or
 * multiply-add a code). */
WK_INLINE void KN(decode_codes)(const uint32_t *pool, uint32_t slab, uint32_t tt, uint32_t P, int bits, uint32_t G,
                                uint32_t D, uint32_t code_words, uint32_t params_words, int f16c, int lookup, float *y) {
    const uint8_t *codes = (const uint8_t *)(pool + slab + tt * code_words);
    const uint32_t groups = D / G;
    const uint16_t *params = (const uint16_t *)(pool + slab + params_words) + (size_t)tt * groups * P;
#if VN == 16
    const VU lane = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
    const VI index = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#else
    const VU lane = {0, 1, 2, 3, 4, 5, 6, 7};
    const VI index = {0, 1, 2, 3, 4, 5, 6, 7};
#endif
    const VU sh = lane * (uint32_t)bits;
    const uint32_t mask = (1u << bits) - 1;
    const VF zero = {0};
    lookup = lookup && (1 << bits) <= VN;
    for (uint32_t g = 0; g < groups; g++) {
        const float a = half1(f16c, params[g * P]);
        const float b = P == 2 ? half1(f16c, params[g * P + 1]) : (0.5f - (float)(1 << (bits - 1))) * a;
        const VF av = zero + a, bv = zero + b;
        const VF levels = __builtin_convertvector(index & (int32_t)mask, VF) * av + bv;
        for (uint32_t c = 0; c < G / VN; c++, codes += VN / 8 * bits, y += VN) {
            uint32_t w0;
            memcpy(&w0, codes, 4);
#if VN == 16
            uint32_t w1;
            memcpy(&w1, codes + bits, 4);
            const VU wv = {w0, w0, w0, w0, w0, w0, w0, w0, w1, w1, w1, w1, w1, w1, w1, w1};
#else
            const VU wv = {w0, w0, w0, w0, w0, w0, w0, w0};
#endif
            if (lookup) {
                KN(store)(y, KN(pick)(levels, (VI)(wv >> sh)));
                continue;
            }
            const VI u = (VI)((wv >> sh) & mask);
            KN(store)(y, __builtin_convertvector(u, VF) * av + bv);
        }
    }
}

/* Key (kv 0) or value (kv 1) j of KV head kh into y, in f16 (f16 1: from the step's copy when j is
 * of the rows' chunk, else from the window slot) or from its block (f16 slab or codes). */
WK_INLINE void KN(load_kv)(const wk_host_attn_layer *L, const wk_host_attn_row *row, uint32_t kh, int kv, uint32_t j,
                           int f16, uint32_t P, int f16c, float *y) {
    const wk_pc_attention_paged *pc = L->pc;
    const uint32_t D = pc->head_dim, HK = pc->n_head_kv;
    if (f16) {
        if (j >= row->chunk_pos0) {
            const uint16_t *copy = kv ? L->v16 : L->k16;
            halves(f16c, copy + ((size_t)(row->chunk_row0 + (j - row->chunk_pos0)) * HK + kh) * D, y, D);
            return;
        }
        const uint32_t wrow = j < pc->sink ? j : pc->sink + (j - pc->sink) % (pc->recent ? pc->recent : 1);
        const uint32_t at = row->win_word + pc->win_off + wrow * pc->f16_row_words + ((pc->win_layer * 2 + (uint32_t)kv) * HK + kh) * (D / 2);
        halves(f16c, (const uint16_t *)(L->pool + at), y, D);
        return;
    }
    const uint32_t blk = L->tables[row->table_off + (j / pc->block_tokens) * pc->table_stride + pc->table_col];
    const uint32_t tt = j % pc->block_tokens;
    const uint32_t slab = blk * pc->block_words + (kv ? pc->v_off + kh * pc->slab_words : pc->k_off + kh * pc->k_slab_words);
    if (pc->bits == 16) {
        halves(f16c, (const uint16_t *)(L->pool + slab) + (size_t)tt * D, y, D);
        return;
    }
    /* The codes with F16C are AVX2's and AVX-512's, whose lane permutes the lookup uses. */
    KN(decode_codes)(L->pool, slab, tt, P, kv ? pc->bits : pc->k_bits, (uint32_t)pc->group, D,
                     kv ? pc->code_words : pc->k_code_words, kv ? pc->params_words : pc->k_params_words, f16c, f16c, y);
}

/* Scores of query heads h0.. (4, the rows past hq repeating its last) against keys k0.. of the
 * tile (4, past nk repeating its last; key kk at kp[kk]) in 16 sums at once: a chunk of VN
 * dimensions is 8 loads for 16 products. Only the real (head, key) pairs are written. */
WK_INLINE void KN(scores_4x4)(const float *q, int hq, int h0, const float *const *kp, uint32_t nk, uint32_t k0,
                              uint32_t D, float sc[][KT]) {
    const float *qr[4], *kr[4];
    for (int x = 0; x < 4; x++) qr[x] = q + (size_t)(h0 + x < hq ? h0 + x : hq - 1) * D;
    for (uint32_t y = 0; y < 4; y++) kr[y] = kp[k0 + y < nk ? k0 + y : nk - 1];
    VF acc[4][4] = {{{0}}};
    for (uint32_t i = 0; i < D; i += VN) {
        const VF k_0 = KN(load)(kr[0] + i), k_1 = KN(load)(kr[1] + i), k_2 = KN(load)(kr[2] + i), k_3 = KN(load)(kr[3] + i);
        for (int x = 0; x < 4; x++) {
            const VF qx = KN(load)(qr[x] + i);
            acc[x][0] += qx * k_0, acc[x][1] += qx * k_1, acc[x][2] += qx * k_2, acc[x][3] += qx * k_3;
        }
    }
#if VN == 16
    /* The 16 sums in one butterfly, 45 instructions instead of ~10 each: a level adds lanes half
     * a span apart and packs two vectors' halves into one, so lane 4x + y of the last holds pair
     * (x, y)'s sum, every pair's lanes added in the same order (its score does not depend on where
     * in a block it sits, so not on the tiles' bounds either). */
    /* __builtin_shufflevector's constant lanes (GCC 12 and clang alike). */
#define LO_A 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HI_A 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LO_B 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define HI_B 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define LO_C 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29
#define HI_C 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31
#define LO_D 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define HI_D 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define HALVES(u, v, LO, HI) (__builtin_shufflevector(u, v, LO) + __builtin_shufflevector(u, v, HI))
    VF a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) {
        const VF u = acc[(2 * i) / 4][(2 * i) % 4], v = acc[(2 * i + 1) / 4][(2 * i + 1) % 4];
        a[i] = HALVES(u, v, LO_A, HI_A);
    }
    for (int i = 0; i < 4; i++) b[i] = HALVES(a[2 * i], a[2 * i + 1], LO_B, HI_B);
    for (int i = 0; i < 2; i++) c[i] = HALVES(b[2 * i], b[2 * i + 1], LO_C, HI_C);
    const VF sums = HALVES(c[0], c[1], LO_D, HI_D);
#undef HALVES
#undef LO_A
#undef HI_A
#undef LO_B
#undef HI_B
#undef LO_C
#undef HI_C
#undef LO_D
#undef HI_D
    for (int x = 0; x < 4 && h0 + x < hq; x++)
        for (uint32_t y = 0; y < 4 && k0 + y < nk; y++) sc[h0 + x][k0 + y] = sums[4 * x + y];
#else
    for (int x = 0; x < 4 && h0 + x < hq; x++)
        for (uint32_t y = 0; y < 4 && k0 + y < nk; y++) sc[h0 + x][k0 + y] = SUM8(acc[x][y]);
#endif
}

/* Chunks of VN dimensions a pass over the tile's values: each output element's sum is a chain of
 * multiply-adds over the keys, 4 cycles a link, so a pass of one chunk (4 chains, one a head) ran
 * at half the rate of two fused multiply-adds a cycle; nc chunks give 4 nc chains, and a
 * probability's broadcast serves nc of them. 16 lanes: 4 chunks, 16 sums in AVX-512's 32
 * registers; 8 lanes: 2 (8 sums in AVX2's 16). */
enum { KN(VALUE_CHUNKS) = VN == 16 ? 4 : 2 };

/* Heads hx[0..3]'s outputs, dimensions i .. i + nc * VN, += their probabilities times the tile's
 * values (key kk's at vp[kk]), in registers over all the keys: each element's sum in key order,
 * as one chunk a pass sums it, so the same floats. */
WK_INLINE void KN(values_chunks)(float *part, size_t stride, int n_out, const int *hx, const float *const *vp,
                                 uint32_t nk, uint32_t i, float sc[][KT], const int nc) {
    VF acc[4][KN(VALUE_CHUNKS)];
    for (int x = 0; x < 4; x++)
        for (int c = 0; c < nc; c++) acc[x][c] = KN(load)(part + hx[x] * stride + 2 + i + (uint32_t)c * VN);
    for (uint32_t kk = 0; kk < nk; kk++) {
        VF v[KN(VALUE_CHUNKS)];
        for (int c = 0; c < nc; c++) v[c] = KN(load)(vp[kk] + i + (uint32_t)c * VN);
        for (int x = 0; x < 4; x++) {
            const float w = sc[hx[x]][kk]; /* broadcast once from memory for the nc chunks */
            for (int c = 0; c < nc; c++) acc[x][c] += w * v[c];
        }
    }
    for (int x = 0; x < n_out; x++)
        for (int c = 0; c < nc; c++) KN(store)(part + hx[x] * stride + 2 + i + (uint32_t)c * VN, acc[x][c]);
}

/* The outputs of query heads h0.. (4, as above) += their probabilities times the tile's values,
 * VALUE_CHUNKS chunks of VN dimensions a pass in the vector codes (`wide`), then one at a time (a
 * head of 8 x odd dimensions; the plain build, whose 8-float vectors are two SSE registers each,
 * spilled 8 sums to the stack and took 2.7x as long a key). */
WK_INLINE void KN(values_4)(float *part, size_t stride, int hq, int h0, const float *const *vp, uint32_t nk,
                            uint32_t D, float sc[][KT], int wide) {
    int hx[4];
    for (int x = 0; x < 4; x++) hx[x] = h0 + x < hq ? h0 + x : hq - 1;
    const int n_out = hq - h0 < 4 ? hq - h0 : 4;
    uint32_t i = 0;
    for (; wide && i + KN(VALUE_CHUNKS) * VN <= D; i += KN(VALUE_CHUNKS) * VN)
        KN(values_chunks)(part, stride, n_out, hx, vp, nk, i, sc, KN(VALUE_CHUNKS));
    for (; i < D; i += VN) KN(values_chunks)(part, stride, n_out, hx, vp, nk, i, sc, 1);
}

/* The tile's keys (kv 0) or values (kv 1) into blk / f16 (KT rows of D floats each): each in the
 * forms some row reads it in (need_blk, need_f16: a bit a key). */
WK_INLINE void KN(load_tile)(const wk_host_attn_layer *L, const wk_host_attn_row *row, uint32_t kh, int kv,
                             uint32_t jt, uint32_t nk, uint32_t need_blk, uint32_t need_f16, uint32_t P, int f16c,
                             float *blk, float *f16) {
    const uint32_t D = L->pc->head_dim;
    for (uint32_t kk = 0; kk < nk; kk++) {
        if (need_blk >> kk & 1) KN(load_kv)(L, row, kh, kv, jt + kk, 0, P, f16c, blk + (size_t)kk * D);
        if (need_f16 >> kk & 1) KN(load_kv)(L, row, kh, kv, jt + kk, 1, P, f16c, f16 + (size_t)kk * D);
    }
}

/* wk_host_attn_part's body: per tile of KT keys, the keys decoded (once, in each form a row
 * reads), each row's scores, one rescale a row and head, the values decoded into the same
 * buffers, each row's outputs. */
WK_INLINE void KN(part_body)(const wk_host_attn_layer *L, const wk_host_attn_row *rows, int n_rows, uint32_t kh,
                             const float *q, size_t q_stride, int hq, uint32_t j0, uint32_t j1, float *part, int f16c) {
    const wk_pc_attention_paged *pc = L->pc;
    const uint32_t D = pc->head_dim;
    const size_t stride = (size_t)D + 2;
    /* A code group's f16 parameters (1 or 2), asked once a call rather than once a key. */
    const uint32_t P = pc->bits == 16 ? 0 : (uint32_t)wk_kvq_params_per_group((wk_kvq_kind)pc->kind);
    /* On the stack, sized by the call (72 KiB for Gemma 3: two tiles of 32 x 256 floats; 384 KiB at
     * most, head_dim 1024 and 64 query heads a KV head, within the default 2-8 MiB stacks of the
     * engine's and the pool's threads): static thread storage would grow every thread of the
     * process, small-stacked ones too (bench --url's clients could not start). A key a row does
     * not see reads `zeros` (its weight is 0, and 0 times a stale NaN would not be). */
    static const float zeros[WK_HOST_ATTN_MAX_HEAD];
    float tile_blk[KT * D] __attribute__((aligned(VN * 4))), tile_f16[KT * D] __attribute__((aligned(VN * 4)));
    float sc_rows[n_rows * hq][KT];
    for (int i = 0; i < n_rows * hq; i++) {
        float *p = part + i * stride;
        p[0] = -INFINITY, p[1] = 0;
        memset(p + 2, 0, D * sizeof(float));
    }
    const float *kp[KT];
    for (uint32_t jt = j0; jt < j1; jt += KT) {
        const uint32_t nk = j1 - jt < KT ? j1 - jt : KT;
        /* Which keys some row sees from the blocks, which in f16; which rows see any. */
        uint32_t need_blk = 0, need_f16 = 0, rows_in = 0, seen[WK_HOST_ATTN_MAX_ROWS], f16_keys[WK_HOST_ATTN_MAX_ROWS];
        for (int r = 0; r < n_rows; r++) {
            seen[r] = row_sees(&rows[r], jt, nk);
            f16_keys[r] = seen[r] ? row_f16_keys(pc, rows[r].pos, jt, nk, seen[r]) : 0;
            if (!seen[r]) continue;
            rows_in |= 1u << r;
            need_f16 |= f16_keys[r];
            need_blk |= seen[r] & ~f16_keys[r];
        }
        if (!rows_in) continue;
        KN(load_tile)(L, rows, kh, 0, jt, nk, need_blk, need_f16, P, f16c, tile_blk, tile_f16);
        for (int r = 0; r < n_rows; r++) {
            if (!(rows_in >> r & 1)) continue;
            float(*sc)[KT] = sc_rows + r * hq;
            for (uint32_t kk = 0; kk < nk; kk++) kp[kk] = key_at(seen[r], f16_keys[r], kk, D, tile_blk, tile_f16, zeros);
            for (int h0 = 0; h0 < hq; h0 += 4)
                for (uint32_t k0 = 0; k0 < nk; k0 += 4) KN(scores_4x4)(q + r * q_stride, hq, h0, kp, nk, k0, D, sc);
            softmax_tile(part + (size_t)r * hq * stride, stride, hq, seen[r], nk, D, sc, VN == 16);
        }
        KN(load_tile)(L, rows, kh, 1, jt, nk, need_blk, need_f16, P, f16c, tile_blk, tile_f16);
        for (int r = 0; r < n_rows; r++) {
            if (!(rows_in >> r & 1)) continue;
            for (uint32_t kk = 0; kk < nk; kk++) kp[kk] = key_at(seen[r], f16_keys[r], kk, D, tile_blk, tile_f16, zeros);
            for (int h0 = 0; h0 < hq; h0 += 4)
                KN(values_4)(part + (size_t)r * hq * stride, stride, hq, h0, kp, nk, D, sc_rows + r * hq, f16c);
        }
    }
}

#undef VF
#undef VI
#undef VU
#undef KN
#undef KN_JOIN
#undef KN_JOIN2
