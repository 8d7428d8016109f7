/* The host's share between a layer's q/k/v products and its attention when the device is the CPU
 * (kv_host, with linear_host): the queries' and keys' per-head norm, RoPE and query scale, the key
 * transform (k' = T k, q' = T^-T q), and the cache writes: the keys' and values' codes and group
 * parameters (kv_quant.c's encoder, the bit-exact twin of kv_store_quant.comp's) or f16 rows into
 * their blocks, the f16 window rows and the step's f16 copies the attention reads. On lavapipe each
 * of these is a dispatch of ~0.1 ms whatever its size (docs/lavapipe.md): a decode token's writes
 * took 5.3 ms as dispatches and take 0.7 here, most of it the transform's f32 matrices coming from
 * memory (docs/benchmarks-host.md). The formulas and the pool layout are the shaders'
 * (qk_norm_rope.comp, kv_transform.comp, kv_store_quant.comp, kv_store_f16.comp); the geometry
 * comes from the same push-constant fillers (wk_fwd_store_quant_pc, wk_fwd_store_f16_pc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "host/host_attention.h" /* WK_HOST_ATTN_MAX_GQA */
#include "host/host_layer.h"
#include "host/host_transform.h"
#include "kv/kv_quant.h"
#include "model/quant.h"
#include "wushkv/wushkv.h"

int wk_fwd_host_kv_init(wk_fwd *f, char *err, size_t errlen) {
    if (!f->kv_host) return 0;
    const wk_acts *a = &f->a;
    bool ok = f->kv->pool_buf.map && a->rope.map && a->rows.map && a->tables.map && a->win_dest.map && a->k16.map &&
              a->v16.map && a->q.map && a->k.map && a->v.map && f->hp->head_dim <= WK_HOST_MAX_HEAD &&
              f->hp->n_head / f->hp->n_head_kv <= WK_HOST_ATTN_MAX_GQA;
    for (int il = 0; ok && f->hp->qk_norm && il < f->hp->n_layer; il++)
        ok = f->w->layers[il].q_norm.map && f->w->layers[il].k_norm.map;
    if (!ok)
        return snprintf(err, errlen, "the cache writes on the host need the pool, the rope table, the norms and the "
                        "step's buffers in host-mapped memory (and head_dim <= %d, at most %d query heads a KV "
                        "head), and device %s did not map them all", WK_HOST_MAX_HEAD, WK_HOST_ATTN_MAX_GQA,
                        f->vk->props.deviceName), WK_ERR_UNSUPPORTED;
    return 0;
}

int wk_fwd_host_kv_set_transform(wk_fwd *f, const wk_kv_xform *x, char *err, size_t errlen) {
    free(f->xform_cols);
    f->xform_cols = NULL;
    if (!f->kv_host || !x || x->kind == WK_XFORM_NONE) return 0;
    const size_t per = (size_t)x->head_dim * x->block, n = (size_t)x->n_layer * x->n_head_kv * 2;
    if (x->head_dim % x->block)
        return snprintf(err, errlen, "KV transform block %d does not divide head_dim %d", x->block, x->head_dim),
               WK_ERR_UNSUPPORTED;
    if (!(f->xform_cols = malloc(n * per * sizeof(float))))
        return snprintf(err, errlen, "out of memory for the host's KV transform"), WK_ERR_NOMEM;
    for (size_t m = 0; m < n; m++) wk_host_block_columns(x->kq + m * per, x->head_dim, x->block, f->xform_cols + m * per);
    return 0;
}

typedef struct {
    wk_fwd *f;
    int il, T, block; /* the step's tokens, and a job's */
    bool quant;
    wk_pc_kv_store_quant q; /* the store's geometry (quant) */
    wk_pc_kv_store_f16 h;   /* (f16) */
} kv_job;

/* Token t's key (kv 0) or value (kv 1) head kh, x, into its block: codes and parameters. */
static void store_quant(const kv_job *j, uint32_t *pool, uint32_t blk, uint32_t tt, int kv, int kh, const float *x) {
    const wk_pc_kv_store_quant *pc = &j->q;
    const int bits = kv ? pc->bits : pc->k_bits, G = pc->group, D = (int)pc->head_dim;
    const uint32_t code_words = kv ? pc->code_words : pc->k_code_words;
    const uint32_t params_words = kv ? pc->params_words : pc->k_params_words;
    const uint32_t slab = blk * pc->block_words + (kv ? pc->v_off + kh * pc->slab_words : pc->k_off + kh * pc->k_slab_words);
    const wk_kvq_kind kind = (wk_kvq_kind)pc->kind;
    /* The shaders take the percentile's rank; rank / G is exact and gives it back. */
    const float rho = (float)(kv ? pc->rank_v : pc->rank_k) / (float)G;
    const float c2 = kv ? pc->quest_c2 : pc->k_quest_c2;
    const int P = wk_kvq_params_per_group(kind), groups = D / G;
    const size_t cb = wk_kvq_code_bytes(bits, G);
    uint8_t *codes = (uint8_t *)(pool + slab + tt * code_words);
    uint16_t *params = (uint16_t *)(pool + slab + params_words) + (size_t)tt * groups * P;
    uint8_t buf[WK_KVQ_MAX_GROUP / 2 + 4];
    for (int g = 0; g < groups; g++) {
        wk_kvq_encode_c2(kind, bits, G, rho, c2, x + (size_t)g * G, buf);
        memcpy(codes + g * cb, buf, cb);
        /* Parameters a u16 each: a neighbouring token may share the word (an odd count a token). */
        for (int p = 0; p < P; p++) memcpy(params + (size_t)g * P + p, buf + cb + 2 * p, 2);
    }
}

/* Key (kv 0) or value (kv 1) head kh of token t, x, into the cache: f16 into its block, or codes and
 * parameters with its f16 window row and copy. */
static void store_head(const kv_job *j, int t, int kv, int kh, const float *x) {
    wk_fwd *f = j->f;
    const int HK = f->hp->n_head_kv;
    const wk_row_info *row = &((const wk_row_info *)f->a.rows.map)[t];
    uint32_t *pool = f->kv->pool_buf.map;
    const uint32_t *tables = f->a.tables.map;
    const uint32_t bt = j->quant ? j->q.block_tokens : j->h.block_tokens;
    const uint32_t stride = j->quant ? j->q.table_stride : j->h.table_stride, col = j->quant ? j->q.table_col : j->h.table_col;
    const uint32_t blk = tables[row->kv_base + (row->pos / bt) * stride + col], tt = row->pos % bt;
    const uint32_t half_d = (uint32_t)f->hp->head_dim / 2;
    /* The halves, in the words' order (a pair's first in the low half), once for all its copies. */
    uint16_t halves[WK_HOST_MAX_HEAD];
    const size_t row_bytes = (size_t)half_d * 4;
    if (!j->quant) {
        const wk_pc_kv_store_f16 *pc = &j->h;
        wk_host_to_halves(f->host_isa, x, halves, 2 * (size_t)half_d);
        memcpy(pool + blk * pc->block_words + ((pc->slab_layer * 2 + kv) * HK + kh) * pc->slab_words + tt * half_d,
               halves, row_bytes);
        return;
    }
    store_quant(j, pool, blk, tt, kv, kh, x);
    const uint32_t wrow = j->q.win_store ? ((const uint32_t *)f->a.win_dest.map)[j->q.dest_base + t] : UINT32_MAX;
    uint32_t *win = wrow == UINT32_MAX ? NULL : pool + wrow + (j->q.win_layer * 2 + kv) * HK * half_d + kh * half_d;
    uint32_t *copy = !j->q.copy_f16 ? NULL : (uint32_t *)(kv ? f->a.v16.map : f->a.k16.map) + ((size_t)t * HK + kh) * half_d;
    if (win || copy) wk_host_to_halves(f->host_isa, x, halves, 2 * (size_t)half_d);
    if (win) memcpy(win, halves, row_bytes);
    if (copy) memcpy(copy, halves, row_bytes);
}

/* q or k head x of token t, in place: norm, RoPE and (queries) the scale, as qk_norm_rope.comp. */
static void norm_rope(const kv_job *j, int t, bool is_q, float *x) {
    const wk_fwd *f = j->f;
    const wk_hparams *hp = f->hp;
    const wk_dev_layer *L = &f->w->layers[j->il];
    const wk_row_info *row = &((const wk_row_info *)f->a.rows.map)[t];
    const size_t rope_row = (hp->is_swa[j->il] ? (size_t)f->max_ctx : 0) + row->pos;
    const float *rope = (const float *)f->a.rope.map + rope_row * (size_t)hp->n_rot;
    const wk_buf *w = is_q ? &L->q_norm : &L->k_norm;
    wk_host_norm_rope(x, hp->head_dim, hp->qk_norm ? w->map : NULL, hp->eps, rope, hp->n_rot,
                      hp->rope_type == WK_ROPE_NEOX, is_q ? hp->attn_scale : 1.0f);
}

enum { TOKENS_A_JOB = 8 }; /* a prompt's tokens a job: its 32 query heads share T_K^-T's loads */

/* Job (token block b, unit u), units 3 n_head_kv: KV head kh's query heads (u < n_head_kv: norm,
 * RoPE, scale, then T_K^-T for all of them together), its key head (the same with T_K, then the
 * store) or its value head (the store), for the block's tokens. A decode token's three units
 * spread over the threads; a prompt's blocks too. */
static void unit_job(void *ctx, int job) {
    const kv_job *j = ctx;
    wk_fwd *f = j->f;
    const wk_hparams *hp = f->hp;
    const int D = hp->head_dim, H = hp->n_head, HK = hp->n_head_kv, hq = H / HK;
    const int b = job / (3 * HK), u = job % (3 * HK), kh = u % HK, kind = u / HK; /* 0 q, 1 k, 2 v */
    const int t0 = b * j->block, t1 = t0 + j->block < j->T ? t0 + j->block : j->T;
    if (kind == 2) {
        for (int t = t0; t < t1; t++) store_head(j, t, 1, kh, (const float *)f->a.v.map + ((size_t)t * HK + kh) * D);
        return;
    }
    float *xs[TOKENS_A_JOB * WK_HOST_ATTN_MAX_GQA];
    int n = 0;
    for (int t = t0; t < t1; t++)
        for (int h = 0; h < (kind ? 1 : hq); h++) {
            float *x = kind ? (float *)f->a.k.map + ((size_t)t * HK + kh) * D
                            : (float *)f->a.q.map + ((size_t)t * H + (size_t)kh * hq + h) * D;
            norm_rope(j, t, !kind, x);
            xs[n++] = x;
        }
    if (f->xform) {
        const size_t per = (size_t)D * f->xform->block; /* T_K, then T_K^-T for the queries */
        wk_host_block_transform_n(f->host_isa, f->xform_cols + (((size_t)j->il * HK + kh) * 2 + !kind) * per, D,
                                  f->xform->block, xs, n);
    }
    for (int t = t0; kind && t < t1; t++) store_head(j, t, 0, kh, xs[t - t0]);
}

void wk_fwd_host_kv(wk_fwd *f, int il, int T) {
    kv_job j = {.f = f, .il = il, .quant = f->kv->fmt.bits != 16, .T = T, .block = T > 1 ? TOKENS_A_JOB : 1};
    if (j.quant) wk_fwd_store_quant_pc(f, il, (uint32_t)T, &j.q);
    else wk_fwd_store_f16_pc(f, il, (uint32_t)T, &j.h);
    wk_host_pool_run(f->host_pool, (T + j.block - 1) / j.block * 3 * f->hp->n_head_kv, unit_job, &j);
}
