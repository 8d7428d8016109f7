/* Fuzz target: the WUSH-KV sidecar reader. Arbitrary bytes are opened as a GGUF and checked
 * against a fixed small model (engine/wush/wush_sidecar.c, wk_wush_sidecar_check_gguf: version,
 * fingerprint, shapes, every tensor); a sidecar that passes has every head's four tensors read
 * (wk_wush_sidecar_read), and one that fails must say why. The seeds (tests/fuzz/corpus/sidecar,
 * written by make_corpus) are valid sidecars for that model, so mutations get past the
 * fingerprint. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wushkv/wushkv.h"
#include "fuzz_fixtures.h"
#include "model/gguf.h"
#include "wush/wush_sidecar.h"

#define FUZZ_CHECK(c)                                                                       \
    do {                                                                                    \
        if (!(c)) {                                                                         \
            fprintf(stderr, "fuzz_sidecar: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static wk_gguf *g_model;
static wk_hparams g_hp;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    size_t size;
    uint8_t *bytes = fz_sidecar_model(&size); /* kept for the process's life, as the model is */
    char err[256];
    g_model = bytes ? wk_gguf_open_memory(bytes, size, err, sizeof err) : NULL;
    if (!g_model) {
        fprintf(stderr, "fuzz_sidecar: cannot build the model\n");
        abort();
    }
    fz_sidecar_hparams(&g_hp);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    wk_gguf *sc = wk_gguf_open_memory(data, size, err, sizeof err);
    if (!sc) return 0;
    int block = -1;
    err[0] = 0;
    int rc = wk_wush_sidecar_check_gguf(g_model, &g_hp, sc, &block, err, sizeof err);
    if (rc == WK_OK) {
        const int D = g_hp.head_dim;
        FUZZ_CHECK(block > 0 && D % block == 0);
        size_t n = (size_t)block * (size_t)D; /* D/B blocks of B x B */
        float *f = malloc(n * sizeof *f);
        double *d = malloc(n * sizeof *d);
        FUZZ_CHECK(f && d);
        for (int l = 0; l < g_hp.n_layer; l++)
            for (int h = 0; h < g_hp.n_head_kv; h++)
                for (int w = 0; w < 4; w++)
                    FUZZ_CHECK(wk_wush_sidecar_read(sc, l, h, (wk_wush_tensor)w, n, f, d, err, sizeof err) == 0);
        free(f);
        free(d);
    } else {
        FUZZ_CHECK(rc < 0 && err[0] != 0);
        /* Reading what is there (or is not) must fail cleanly too. */
        float f[64];
        wk_wush_sidecar_read(sc, 0, 0, WK_WUSH_K_T, 64, f, NULL, err, sizeof err);
    }
    wk_gguf_close(sc);
    return 0;
}
