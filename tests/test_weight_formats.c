/* Which device weight format each matrix takes (engine/weights.h): on the tiny models with every
 * ggml type (tiny_model.c's mixed quants, gemma3 tied head and llama untied), each matrix's format
 * against its tensor's type: float types f16; Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 q8a16 with half pairs;
 * K-quants f32 pairs; parts joined into one matrix (q, k, v; gate, up) that mix half and f32 pairs
 * stored with f32 pairs, the half parts' halves kept beside them for the steps that take a part
 * alone (the part a q8h view of them), a mix with f16 not joined. Also the counts wk_model_info
 * reports and the bytes the pairs take. Uploaded for the host's products, each layer matrix (and
 * the output head) whose rows fit is stored by panels, byte for byte wk_host_pack_panels of its
 * row-major upload, a join's parts views of it in its format. The kernels' arithmetic on each format is test_matmul_gpu's; the forward pass on
 * these models, test_forward's. */
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "host/host_panels.h"
#include "model/gguf.h"
#include "model/model.h"
#include "test_util.h"
#include "test_vk_open.h"
#include "tiny_model.h"
#include "weights.h"

/* The format a tensor type takes alone (the tiny model's K-quant sub-scale products are not all
 * halves). */
static wk_wfmt format_alone(wk_ggml_type t) {
    return t == WK_GGML_F16 || t == WK_GGML_BF16 || t == WK_GGML_F32 ? WK_WFMT_F16
           : t == WK_GGML_Q4_0 || t == WK_GGML_Q4_1 || t == WK_GGML_Q5_0 || t == WK_GGML_Q5_1 || t == WK_GGML_Q8_0
               ? WK_WFMT_Q8H
               : WK_WFMT_Q8A;
}

static uint64_t elements(const wk_gguf_tensor *t) { return (uint64_t)t->ne[0] * t->ne[1]; }

/* The device bytes of a matrix's scale/offset pairs, by format. */
static uint64_t pair_bytes(const wk_dev_matrix *m) {
    return m->fmt == WK_WFMT_F16 ? 0 : (uint64_t)m->rows * m->cols / 16 * (m->fmt == WK_WFMT_Q8H ? 4 : 8);
}

/* pan (uploaded asking for panels, or not: asked) against rows (the same matrix uploaded for
 * shaders): by panels where asked and its rows fit them, its bytes wk_host_pack_panels of the
 * row-major ones; else row-major, the same bytes. */
static int check_panels(const wk_dev_matrix *rows, const wk_dev_matrix *pan, bool asked) {
    int bad = 0;
    const bool fit = asked && wk_host_panels_fit(rows->rows, rows->cols);
    /* (a packed join keeps no half pairs: only shaders read them) */
    const bool halves = fit ? false : rows->half_scales.buf != VK_NULL_HANDLE;
    bad += pan->host_panels != fit || pan->fmt != rows->fmt || pan->rows != rows->rows ||
           (pan->half_scales.buf != VK_NULL_HANDLE) != halves;
    if (!rows->codes.map || !pan->codes.map) return bad; /* (a device that maps no weights: layout only) */
    const size_t n = (size_t)rows->rows * rows->cols, code_bytes = n * (rows->fmt == WK_WFMT_F16 ? 2 : 1);
    const size_t pair_bytes = rows->fmt == WK_WFMT_F16 ? 0 : n / 16 * (rows->fmt == WK_WFMT_Q8H ? 4 : 8);
    uint8_t *codes = malloc(code_bytes), *pairs = malloc(pair_bytes + 1);
    if (!codes || !pairs) return free(codes), free(pairs), bad + 1;
    if (fit) {
        wk_host_pack_panels(wk_wfmt_on_host(rows->fmt), rows->rows, rows->cols, rows->codes.map,
                            rows->fmt == WK_WFMT_F16 ? NULL : rows->scales.map, codes, pairs);
    } else {
        memcpy(codes, rows->codes.map, code_bytes);
        if (pair_bytes) memcpy(pairs, rows->scales.map, pair_bytes);
    }
    bad += memcmp(codes, pan->codes.map, code_bytes) != 0;
    if (pair_bytes) bad += memcmp(pairs, pan->scales.map, pair_bytes) != 0;
    free(codes), free(pairs);
    return bad;
}

/* The same model uploaded for the host's products (wk_weights_upload's panels: the layers', the
 * head's or both): with layers, each stored layer matrix (a join, or a part alone) by panels, its
 * parts views of the join in its format (no half pairs: only shaders read them); with head, the
 * output head by panels (the embedding too when it is the head; else row-major); whatever was not
 * asked for row-major, the same bytes as for shaders. */
static void check_host_panels(wk_vk *vk, const wk_model_desc *desc, const wk_weights *rows, wk_weights_panels asked,
                              const char *arch) {
    wk_weights w;
    char err[WK_ERRMSG_LEN] = "";
    const int rc = wk_weights_upload(vk, desc, NULL, asked, &w, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "%s host panels: %s\n", arch, err);
        return;
    }
    int bad = 0, panels = 0, head_panels = 0;
    CHECK_EQ_INT(w.tied, rows->tied);
    bad += check_panels(&rows->tok_embd, &w.tok_embd, asked.head && w.tied);
    head_panels += w.tok_embd.host_panels;
    if (!w.tied) bad += check_panels(&rows->output, &w.output, asked.head), head_panels += w.output.host_panels;
    if (bad) fprintf(stderr, "%s: the head or embedding not in the layout asked for\n", arch);
    for (int il = 0; il < w.n_layer; il++) {
        const wk_dev_layer *R = &rows->layers[il], *D = &w.layers[il];
        const wk_dev_matrix *r[] = {&R->qkv, &R->gate_up, &R->wq, &R->wk, &R->wv, &R->wo, &R->ffn_gate, &R->ffn_up, &R->ffn_down};
        const wk_dev_matrix *d[] = {&D->qkv, &D->gate_up, &D->wq, &D->wk, &D->wv, &D->wo, &D->ffn_gate, &D->ffn_up, &D->ffn_down};
        for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
            CHECK_EQ_INT(d[i]->rows, r[i]->rows);
            if (!d[i]->rows) continue;
            if (d[i]->part) { /* a view of its join, in the join's layout; by panels in its format, else
                               * the format of the shaders' upload (a q8h part of a q8a join) */
                const wk_dev_matrix *join = i < 5 ? &D->qkv : &D->gate_up;
                bad += d[i]->host_panels != join->host_panels || d[i]->fmt != (join->host_panels ? join->fmt : r[i]->fmt) ||
                       d[i]->codes.buf != join->codes.buf || (d[i]->row0 % 16 && join->host_panels);
                continue;
            }
            const int b = check_panels(r[i], d[i], asked.layers);
            if (b) fprintf(stderr, "%s layer %d matrix %zu: not the packing of its row-major upload\n", arch, il, i);
            bad += b;
            panels += d[i]->host_panels;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(panels > 0, asked.layers);
    CHECK_EQ_INT(head_panels, asked.head ? 1 : 0); /* (the tiny models' vocabularies fit panels) */
    printf("%s: %d stored layer matrices and %d head by panels for the host\n", arch, panels, head_panels);
    wk_weights_free(vk, &w);
}

static void check_model(wk_vk *vk, const char *arch) {
    tiny_model_opts o = {.arch = arch, .seed = 9, .mixed_quants = true, .n_layer = 4};
    size_t size = 0;
    uint8_t *bytes = tiny_model_bytes(&o, &size);
    char err[WK_ERRMSG_LEN] = "";
    wk_gguf *g = bytes ? wk_gguf_open_memory(bytes, size, err, sizeof err) : NULL;
    wk_model_desc desc;
    wk_weights w;
    CHECK(g != NULL);
    int rc = g ? wk_model_desc_load(g, &desc, err, sizeof err) : WK_ERR_INVALID;
    if (!rc) rc = wk_weights_upload(vk, &desc, NULL, (wk_weights_panels){0}, &w, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "%s: %s\n", arch, err);
        wk_gguf_close(g), free(bytes);
        return;
    }
    uint64_t want_half = 0, want_all = 0, seen_half = 0, seen_demoted = 0;
    const wk_gguf_tensor *top[2] = {desc.tok_embd, w.tied ? NULL : desc.output};
    const wk_dev_matrix *top_m[2] = {&w.tok_embd, &w.output};
    for (int i = 0; i < 2; i++) {
        if (!top[i]) continue;
        CHECK_EQ_INT(top_m[i]->fmt, format_alone(top[i]->type));
        CHECK_EQ_INT(top_m[i]->scales.bytes >= pair_bytes(top_m[i]), 1);
        want_all += elements(top[i]);
        want_half += format_alone(top[i]->type) == WK_WFMT_Q8H ? elements(top[i]) : 0;
    }
    for (int il = 0; il < desc.hp.n_layer; il++) {
        const wk_layer_weights *L = &desc.layers[il];
        const wk_dev_layer *D = &w.layers[il];
        const wk_gguf_tensor *t[7] = {L->wq, L->wk, L->wv, L->wo, L->ffn_gate, L->ffn_up, L->ffn_down};
        const wk_dev_matrix *m[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->ffn_gate, &D->ffn_up, &D->ffn_down};
        const int group[7] = {0, 0, 0, 1, 2, 2, 3}; /* 0: q, k, v; 2: gate, up */
        for (int i = 0; i < 7; i++) {
            wk_wfmt want = format_alone(t[i]->type);
            bool some_f16 = false, some_q8a = false;
            for (int j = 0; j < 7; j++)
                if (group[j] == group[i]) {
                    some_f16 = some_f16 || format_alone(t[j]->type) == WK_WFMT_F16;
                    some_q8a = some_q8a || format_alone(t[j]->type) == WK_WFMT_Q8A;
                }
            /* Stored: a join of half and f32 pairs takes f32 pairs. Seen by a step that takes the part
             * alone: its own format, its halves kept beside the join's pairs (half_scales). */
            const bool demoted = want == WK_WFMT_Q8H && some_q8a && !some_f16;
            const wk_wfmt stored = demoted ? WK_WFMT_Q8A : want;
            if (m[i]->fmt != want)
                fprintf(stderr, "%s layer %d matrix %d (%s): format %d, expected %d\n", arch, il, i,
                        wk_ggml_type_name(t[i]->type), (int)m[i]->fmt, (int)want);
            CHECK_EQ_INT(m[i]->fmt, want);
            const wk_dev_matrix *join = group[i] == 0 ? &D->qkv : group[i] == 2 ? &D->gate_up : NULL;
            if (demoted) {
                CHECK(m[i]->part && join && join->fmt == WK_WFMT_Q8A);
                CHECK(join && m[i]->scales.buf == join->half_scales.buf && join->half_scales.buf);
                CHECK(join && join->half_scales.bytes >= (uint64_t)join->rows * join->cols / 16 * 4);
                seen_demoted++;
            } else if (join && m[i]->part) {
                CHECK(m[i]->scales.buf == join->scales.buf);
            }
            want_all += elements(t[i]);
            want_half += stored == WK_WFMT_Q8H ? elements(t[i]) : 0;
            seen_half += stored == WK_WFMT_Q8H;
            /* a joined matrix's parts share its buffers; a part alone has its own pairs */
            if (!m[i]->part) CHECK_EQ_INT(m[i]->scales.bytes >= pair_bytes(m[i]), 1);
        }
    }
    check_host_panels(vk, &desc, &w, (wk_weights_panels){.layers = true}, arch);
    check_host_panels(vk, &desc, &w, (wk_weights_panels){.head = true}, arch);
    check_host_panels(vk, &desc, &w, (wk_weights_panels){.layers = true, .head = true}, arch);
    printf("%s: %llu of %llu matrix weights with half pairs\n", arch, (unsigned long long)want_half,
           (unsigned long long)want_all);
    CHECK(seen_half > 0); /* the model reaches the format alone and inside joins */
    CHECK(seen_demoted > 0); /* and half parts inside a join of f32 pairs */
    CHECK_EQ_INT(w.weights, want_all);
    CHECK_EQ_INT(w.half_pair_weights, want_half);
    wk_weights_free(vk, &w);
    wk_gguf_close(g);
    free(bytes);
}

int main(void) {
    wk_vk vk;
    wk_pipelines p;
    if (!test_vk_open(&vk, &p)) return 1;
    check_model(&vk, "gemma3");
    check_model(&vk, "llama");
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
