/* A step's paged attention on the host when the device is the CPU (attn_host, with kv_host): each
 * chunk's rows in groups of up to WK_HOST_ATTN_MAX_ROWS, each (group, KV head) pair's keys in a few
 * splits, a job each on the host pool, their partials then combined into a.attn
 * (host/host_attention.c walks the keys); then the window rows the device would store after the
 * attention (kv_store_window.comp's copy). With the layers' products and the cache writes already
 * on the host, such a step leaves lavapipe only the embedding: no submit a layer, and no dispatch
 * whose cost follows the instructions a key takes (docs/benchmarks-host.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "host/host_attention.h"
#include "wushkv/wushkv.h"

enum { MAX_SPLITS = 16, MIN_SPLIT_KEYS = 128, JOBS_PER_THREAD = 4 };

/* Floats a (row, KV head, split) partial takes: its query heads' m, l and outputs. */
static size_t part_floats(const wk_fwd *f) {
    return (size_t)(f->hp->n_head / f->hp->n_head_kv) * ((size_t)f->hp->head_dim + 2);
}

int wk_fwd_host_attn_init(wk_fwd *f, char *err, size_t errlen) {
    if (!f->attn_host) return 0;
    for (int il = 0; il < f->hp->n_layer; il++) {
        wk_pc_attention_paged pc;
        wk_fwd_attention_pc(f, il, &pc);
        if (!wk_host_attn_supports(&pc))
            return snprintf(err, errlen, "paged_attention=host: layer %d's cache (head_dim %u, %d-bit keys, %d-bit "
                            "values, group %d, %u query heads a KV head) is not one the host reads; use "
                            "paged_attention=device", il, pc.head_dim, pc.k_bits, pc.bits, pc.group,
                            pc.n_head / pc.n_head_kv), WK_ERR_UNSUPPORTED;
    }
    /* Room for every row of a full step unsplit, or a decode row's MAX_SPLITS splits. */
    const size_t rows = (size_t)(f->max_tokens > MAX_SPLITS ? f->max_tokens : MAX_SPLITS);
    f->attn_host_rows = rows * f->hp->n_head_kv;
    f->attn_part = malloc(f->attn_host_rows * part_floats(f) * sizeof(float));
    f->attn_rows = malloc((size_t)f->max_tokens * sizeof *f->attn_rows);
    f->attn_groups = malloc((size_t)f->max_tokens * 2 * sizeof *f->attn_groups);
    if (!f->attn_part || !f->attn_rows || !f->attn_groups) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    return 0;
}

void wk_fwd_host_attn_free(wk_fwd *f) {
    free(f->attn_part);
    free(f->attn_rows);
    free(f->attn_groups);
    f->attn_part = NULL;
    f->attn_rows = NULL;
    f->attn_groups = NULL;
}

bool wk_fwd_host_attn_step(const wk_fwd *f, int T) {
    if (!f->attn_host || f->capture || T > f->max_tokens) return false;
    /* The f16 cache's window rows, if it had any, are stored by the device only. */
    for (int c = 0; c < 2; c++)
        if (f->kv->layout.win[c].sink + f->kv->layout.win[c].recent > 0 && f->kv->fmt.bits == 16) return false;
    return true;
}

typedef struct {
    wk_fwd *f;
    wk_host_attn_layer L;
    int splits;
} attn_job;

/* Where the partials of group g's KV head kh start: [row of the group][split], part_floats each,
 * the groups' rows in step order (g's first row r0 of n). */
static size_t part_base(const wk_fwd *f, uint32_t r0, uint32_t n, int kh, int splits) {
    return ((size_t)r0 * f->hp->n_head_kv + (size_t)kh * n) * (size_t)splits;
}

/* Job j: group g, KV head kh, split s of the keys the group's rows see (its first row's first key
 * to its last row's position), into the rows' partials. */
static void run_job(void *ctx, int j) {
    const attn_job *a = ctx;
    const wk_fwd *f = a->f;
    const int HK = f->hp->n_head_kv, hq = f->hp->n_head / HK, D = f->hp->head_dim;
    const int s = j % a->splits, unit = j / a->splits, g = unit / HK, kh = unit % HK;
    const uint32_t r0 = f->attn_groups[2 * g], n = f->attn_groups[2 * g + 1];
    const wk_host_attn_row *rows = &f->attn_rows[r0];
    const uint32_t lo = rows[0].first, hi = rows[n - 1].pos + 1;
    const uint32_t span = (hi - lo + (uint32_t)a->splits - 1) / (uint32_t)a->splits;
    const uint32_t j0 = lo + (uint32_t)s * span < hi ? lo + (uint32_t)s * span : hi, j1 = j0 + span < hi ? j0 + span : hi;
    const float *q = (const float *)f->a.q.map + ((size_t)r0 * f->hp->n_head + (size_t)kh * hq) * D;
    float *part = f->attn_part + (part_base(f, r0, n, kh, a->splits) + (size_t)s * n) * part_floats(f);
    wk_host_attn_part(f->host_isa, &a->L, rows, (int)n, (uint32_t)kh, q, (size_t)f->hp->n_head * D, hq, j0, j1, part);
}

/* The step's rows (their keys) and groups; returns the groups, *most the most keys a group sees. */
static int plan_rows(wk_fwd *f, const wk_pc_attention_paged *pc, int T, uint32_t *most) {
    const wk_row_info *rows = f->a.rows.map;
    int groups = 0;
    *most = 1;
    for (int t = 0; t < T;) {
        const int end = wk_fwd_chunk_end(rows, T, t);
        for (int i = t; i < end; i++) {
            const uint32_t pos = rows[i].pos;
            f->attn_rows[i] = (wk_host_attn_row){
                .pos = pos, .first = pc->window && pos + 1 > pc->window ? pos + 1 - pc->window : 0,
                .table_off = rows[i].kv_base, .win_word = f->step_win_words ? f->step_win_words[i] : 0,
                .chunk_pos0 = rows[t].pos, .chunk_row0 = (uint32_t)t};
        }
        for (int g0 = t; g0 < end; g0 += WK_HOST_ATTN_MAX_ROWS) {
            const int n = end - g0 < WK_HOST_ATTN_MAX_ROWS ? end - g0 : WK_HOST_ATTN_MAX_ROWS;
            f->attn_groups[2 * groups] = (uint32_t)g0, f->attn_groups[2 * groups + 1] = (uint32_t)n, groups++;
            const uint32_t keys = f->attn_rows[g0 + n - 1].pos + 1 - f->attn_rows[g0].first;
            if (keys > *most) *most = keys;
        }
        t = end;
    }
    return groups;
}

/* Layer il's window rows of this step when they were not written with the codes: each row's f16
 * copy (k16, v16) into the row plan_window_rows chose, as kv_store_window.comp. */
static void store_windows_late(wk_fwd *f, int il, int T) {
    const wk_kv_cache *kv = f->kv;
    const int c = kv->win_class_of[il];
    const wk_kv_win *w = &kv->layout.win[c];
    if (w->sink + w->recent == 0 || f->window_early[c]) return;
    const size_t per_kv = (size_t)f->hp->n_head_kv * f->hp->head_dim / 2; /* words of K (or V) a row */
    const uint32_t *dest = (const uint32_t *)f->a.win_dest.map + (size_t)c * T;
    uint32_t *pool = kv->pool_buf.map;
    for (int t = 0; t < T; t++) {
        if (dest[t] == UINT32_MAX) continue;
        uint32_t *row = pool + dest[t] + (size_t)kv->win_layer_of[il] * 2 * per_kv;
        memcpy(row, (const uint32_t *)f->a.k16.map + t * per_kv, per_kv * 4);
        memcpy(row + per_kv, (const uint32_t *)f->a.v16.map + t * per_kv, per_kv * 4);
    }
}

void wk_fwd_host_attention(wk_fwd *f, int il, int T) {
    const double t0 = wk_fwd_prof_now(f);
    wk_pc_attention_paged pc;
    wk_fwd_attention_pc(f, il, &pc);
    uint32_t most;
    const int groups = plan_rows(f, &pc, T, &most);
    /* Splits enough to give every thread a few jobs, none of fewer than MIN_SPLIT_KEYS keys, and
     * no more than the partials hold. */
    const int HK = f->hp->n_head_kv, units = groups * HK;
    int splits = (JOBS_PER_THREAD * wk_host_pool_threads(f->host_pool) + units - 1) / units;
    if (splits > MAX_SPLITS) splits = MAX_SPLITS;
    if ((uint32_t)splits > most / MIN_SPLIT_KEYS) splits = (int)(most / MIN_SPLIT_KEYS);
    if ((size_t)splits * T * HK > f->attn_host_rows) splits = (int)(f->attn_host_rows / ((size_t)T * HK));
    if (splits < 1) splits = 1;
    attn_job job = {.f = f, .splits = splits,
                    .L = {.pool = f->kv->pool_buf.map, .tables = f->a.tables.map, .k16 = f->a.k16.map,
                          .v16 = f->a.v16.map, .pc = &pc}};
    wk_host_pool_run(f->host_pool, units * splits, run_job, &job);
    const int hq = f->hp->n_head / HK, D = f->hp->head_dim;
    const size_t pf = part_floats(f);
    for (int g = 0; g < groups; g++) {
        const uint32_t r0 = f->attn_groups[2 * g], n = f->attn_groups[2 * g + 1];
        for (int kh = 0; kh < HK; kh++)
            for (uint32_t i = 0; i < n; i++)
                for (int h = 0; h < hq; h++) {
                    const float *p = f->attn_part + (part_base(f, r0, n, kh, splits) + i) * pf + (size_t)h * (D + 2);
                    float *out = (float *)f->a.attn.map + ((size_t)(r0 + i) * f->hp->n_head + (size_t)kh * hq + h) * D;
                    wk_host_attn_merge(splits, p, n * pf, D, out);
                }
    }
    store_windows_late(f, il, T);
    wk_fwd_prof_since(f, WK_PROF_ATTN_HOST, t0);
}
