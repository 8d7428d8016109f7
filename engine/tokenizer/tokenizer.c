/* Tokenizer from GGUF vocabulary metadata, matching llama.cpp (llama-vocab.cpp): vocabulary load,
 * special-token partition, SentencePiece (SPM) merge and token_to_piece. GPT-2 BPE is in
 * tokenizer_bpe.c. */
#include "tokenizer/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

/* FNV-1a: short keys (tokens average ~8 bytes), so a byte loop is fast enough and simple. */
uint64_t wk_tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int32_t wk_tok_lookup(const wk_tokenizer *t, const char *s, size_t n) {
    if (n == 0 || n > t->max_token_len) return -1;
    uint32_t i = (uint32_t)wk_tok_hash(s, n) & t->map_mask;
    for (;; i = (i + 1) & t->map_mask) {
        int32_t id = t->map[i];
        if (id < 0) return -1;
        if (t->tok[id].len == n && memcmp(t->tok[id].text, s, n) == 0) return id;
    }
}

size_t wk_utf8_len(unsigned char c) {
    static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

/* Array of `type` with at least n elements, or NULL (absent). *bad is set if present but wrong. */
static const wk_gguf_kv *find_arr(const wk_gguf *g, const char *key, wk_gguf_type type, uint64_t n, bool *bad) {
    const wk_gguf_kv *kv = wk_gguf_find(g, key);
    *bad = false;
    if (!kv) return NULL;
    if (kv->type != WK_GGUF_ARRAY || kv->arr_type != type || kv->arr_count < n) *bad = true;
    return kv;
}

static void read_id(const wk_gguf *g, const char *key, int32_t *id, int n_vocab) {
    uint32_t v;
    if (*id >= n_vocab) *id = -1; /* default out of range: disabled, as llama.cpp */
    if (wk_gguf_get_u32(g, key, &v) && v < (uint32_t)n_vocab) *id = (int32_t)v;
}

/* Token texts that llama.cpp recognises by name (llama-vocab.cpp, "auto-detect special tokens"). */
static const char *const k_eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const k_eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~[", NULL};

static int32_t find_name(const wk_tokenizer *t, const char *const *names) {
    for (int i = 0; names[i]; i++) {
        int32_t id = wk_tok_lookup(t, names[i], strlen(names[i]));
        if (id >= 0) return id;
    }
    return -1;
}

/* llama.cpp forces CONTROL on tokens it treats as end markers, which also makes them special
 * for the partition. */
static void mark_control(wk_tokenizer *t, int32_t id) {
    if (id >= 0) t->tok[id].attr |= WK_ATTR_CONTROL;
}

static void add_eog(wk_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Per-model whitespace stripping that llama.cpp decides by name ("Handle per token attributes"). */
static void set_attr(wk_tokenizer *t, const char *text, uint32_t attr, bool on) {
    int32_t id = wk_tok_lookup(t, text, strlen(text));
    if (id >= 0) t->tok[id].attr = on ? t->tok[id].attr | attr : t->tok[id].attr & ~attr;
}

static void set_strip_attrs(wk_tokenizer *t, const wk_gguf *g) {
    char name[256] = "", pre[64] = "", arch[64] = "";
    wk_gguf_get_str(g, "general.name", name, sizeof name);
    wk_gguf_get_str(g, "tokenizer.ggml.pre", pre, sizeof pre);
    wk_gguf_get_str(g, "general.architecture", arch, sizeof arch);
    for (char *c = name; *c; c++)
        if (*c >= 'A' && *c <= 'Z') *c = (char)(*c + 32);
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
        set_attr(t, "<mask>", WK_ATTR_LSTRIP, true);
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (int i = 0; i < t->n_special; i++) t->tok[t->special[i]].attr |= WK_ATTR_RSTRIP;
        set_attr(t, "</s>", WK_ATTR_RSTRIP, true);
        set_attr(t, "<unk>", WK_ATTR_RSTRIP, false);
        set_attr(t, "<s>", WK_ATTR_RSTRIP, false);
        set_attr(t, "<|endoftext|>", WK_ATTR_RSTRIP, false);
    } else if (strstr(name, "modern-bert")) {
        set_attr(t, "[MASK]", WK_ATTR_LSTRIP, true);
    }
}

wk_tokenizer *wk_tokenizer_load(const wk_gguf *g, char *err, size_t errlen) {
    wk_tokenizer *t = calloc(1, sizeof *t);
    char model[64];
    bool bad;
    if (!t) { snprintf(err, errlen, "out of memory"); return NULL; }
    if (!g) FAIL("no GGUF");
    if (!wk_gguf_get_str(g, "tokenizer.ggml.model", model, sizeof model))
        FAIL("missing or invalid tokenizer.ggml.model");
    if (strcmp(model, "llama") == 0) t->kind = WK_TOK_SPM;
    else if (strcmp(model, "gpt2") == 0) t->kind = WK_TOK_BPE;
    else FAIL("unknown tokenizer model '%s' (supported: llama, gpt2)", model);

    const wk_gguf_kv *toks = find_arr(g, "tokenizer.ggml.tokens", WK_GGUF_STRING, 0, &bad);
    if (!toks) FAIL("cannot find tokenizer.ggml.tokens");
    if (bad || !toks->arr_strs) FAIL("tokenizer.ggml.tokens is not a string array");
    if (toks->arr_count == 0 || toks->arr_count > INT32_MAX / 4)
        FAIL("tokenizer.ggml.tokens has %llu entries", (unsigned long long)toks->arr_count);
    int n = t->n_vocab = (int)toks->arr_count;

    const wk_gguf_kv *sc = find_arr(g, "tokenizer.ggml.scores", WK_GGUF_FLOAT32, n, &bad);
    if (sc && bad) sc = find_arr(g, "tokenizer.ggml.scores", WK_GGUF_INT32, n, &bad);
    if (sc && bad)
        FAIL("tokenizer.ggml.scores must be an f32/i32 array of at least %d entries (has %llu)", n,
             (unsigned long long)sc->arr_count);
    const wk_gguf_kv *tt = find_arr(g, "tokenizer.ggml.token_type", WK_GGUF_INT32, n, &bad);
    if (tt && bad)
        FAIL("tokenizer.ggml.token_type must be an i32 array of at least %d entries (has %llu)", n,
             (unsigned long long)tt->arr_count);

    /* One blob for all texts; empty tokens become "[EMPTY_i]" as in llama.cpp. */
    size_t total = 0;
    for (int i = 0; i < n; i++) total += toks->arr_strs[i].len ? toks->arr_strs[i].len : 24;
    t->tok = malloc((size_t)n * sizeof *t->tok);
    t->blob = malloc(total + 1);
    t->map_mask = pow2_at_least((uint64_t)n * 2) - 1;
    t->map = malloc(((size_t)t->map_mask + 1) * sizeof *t->map);
    if (!t->tok || !t->blob || !t->map) FAIL("out of memory for %d tokens", n);
    memset(t->map, 0xff, ((size_t)t->map_mask + 1) * sizeof *t->map);

    static const uint32_t type_attr[7] = {0, WK_ATTR_NORMAL, WK_ATTR_UNKNOWN, WK_ATTR_CONTROL,
                                          WK_ATTR_USER_DEFINED, WK_ATTR_UNUSED, WK_ATTR_BYTE};
    char *p = t->blob;
    for (int i = 0; i < n; i++) {
        wk_tok_entry *e = &t->tok[i];
        const wk_gguf_str *s = &toks->arr_strs[i];
        e->text = p;
        if (s->len) { memcpy(p, s->ptr, s->len); e->len = (uint32_t)s->len; }
        else e->len = (uint32_t)snprintf(p, 24, "[EMPTY_%d]", i);
        p += e->len;
        if (e->len > t->max_token_len) t->max_token_len = e->len;
        e->score = 0.0f;
        if (sc && sc->arr_type == WK_GGUF_FLOAT32) memcpy(&e->score, sc->arr_data + 4 * (size_t)i, 4);
        else if (sc) { int32_t v; memcpy(&v, sc->arr_data + 4 * (size_t)i, 4); e->score = (float)v; }
        e->attr = WK_ATTR_NORMAL;
        if (tt) {
            int32_t ty;
            memcpy(&ty, tt->arr_data + 4 * (size_t)i, 4);
            e->attr = ty >= 0 && ty < 7 ? type_attr[ty] : 0;
        }
        /* Later duplicates win, like token_to_id[word] = i. */
        uint32_t h = (uint32_t)wk_tok_hash(e->text, e->len) & t->map_mask;
        for (;; h = (h + 1) & t->map_mask) {
            int32_t o = t->map[h];
            if (o < 0 || (t->tok[o].len == e->len && memcmp(t->tok[o].text, e->text, e->len) == 0)) {
                t->map[h] = i;
                break;
            }
        }
    }

    /* Defaults per model type (llama-vocab.cpp load()), then the file's values. */
    t->eot = t->eom = -1;
    if (t->kind == WK_TOK_SPM) {
        t->bos = 1; t->eos = 2; t->unk = 0;
        t->add_space_prefix = true; t->add_bos = true; t->add_eos = false;
    } else {
        t->bos = 11; t->eos = 11; t->unk = -1;
        t->add_space_prefix = false; t->add_bos = false; t->add_eos = false;
        if (!wk_bpe_load(t, g, err, errlen)) goto fail;
    }
    bool bv;
    if (wk_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &bv)) t->add_space_prefix = bv;
    read_id(g, "tokenizer.ggml.bos_token_id", &t->bos, n);
    read_id(g, "tokenizer.ggml.eos_token_id", &t->eos, n);
    read_id(g, "tokenizer.ggml.eot_token_id", &t->eot, n);
    read_id(g, "tokenizer.ggml.eom_token_id", &t->eom, n);
    read_id(g, "tokenizer.ggml.unknown_token_id", &t->unk, n);
    if (wk_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bv)) t->add_bos = bv;
    if (wk_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &bv)) t->add_eos = bv;
    if (t->add_bos && t->bos < 0) FAIL("add_bos_token is set but there is no valid BOS id");
    if (t->add_eos && t->eos < 0) FAIL("add_eos_token is set but there is no valid EOS id");

    if (t->eot < 0) t->eot = find_name(t, k_eot_names);
    mark_control(t, t->eot);
    if (t->eom < 0) t->eom = wk_tok_lookup(t, "<|eom_id|>", 10);
    mark_control(t, t->eom);

    /* End-of-generation set: every known end marker present, plus eos/eot/eom. (llama.cpp also
     * adds FIM pad/repo/sep markers and has gpt-oss/Gemma 4 special cases; not needed here.) */
    int n_names = 0;
    while (k_eog_names[n_names]) n_names++;
    t->eog = malloc((size_t)(n_names + 3) * sizeof *t->eog);
    if (!t->eog) FAIL("out of memory");
    for (int i = 0; i < n_names; i++) {
        int32_t id = wk_tok_lookup(t, k_eog_names[i], strlen(k_eog_names[i]));
        mark_control(t, id);
        add_eog(t, id);
    }
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, t->eom);
    qsort(t->eog, (size_t)t->n_eog, sizeof *t->eog, cmp_i32);

    /* Special cache: longest text first like llama.cpp's std::sort; equal lengths (unspecified
     * order there) by id. Sort keys (~len << 32 | id) keep qsort free of global context. */
    uint64_t *keys = malloc((size_t)n * sizeof *keys);
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!keys || !t->special) { free(keys); FAIL("out of memory"); }
    for (int i = 0; i < n; i++)
        if (t->tok[i].attr & (WK_ATTR_CONTROL | WK_ATTR_USER_DEFINED | WK_ATTR_UNKNOWN))
            keys[t->n_special++] = (uint64_t)(UINT32_MAX - t->tok[i].len) << 32 | (uint32_t)i;
    qsort(keys, (size_t)t->n_special, sizeof *keys, cmp_u64);
    for (int i = 0; i < t->n_special; i++) t->special[i] = (int32_t)(keys[i] & 0xffffffffu);
    free(keys);
    set_strip_attrs(t, g);
    return t;

fail:
    wk_tokenizer_free(t);
    return NULL;
}

void wk_tokenizer_free(wk_tokenizer *t) {
    if (!t) return;
    free(t->tok); free(t->blob); free(t->map); free(t->special); free(t->eog);
    free(t->merges); free(t->merge_blob); free(t->merge_map);
    free(t);
}

int wk_tokenizer_n_vocab(const wk_tokenizer *t) { return t->n_vocab; }
wk_tok_kind wk_tokenizer_kind(const wk_tokenizer *t) { return t->kind; }
int32_t wk_tokenizer_bos(const wk_tokenizer *t) { return t->bos; }
int32_t wk_tokenizer_eos(const wk_tokenizer *t) { return t->eos; }
int32_t wk_tokenizer_eot(const wk_tokenizer *t) { return t->eot; }
bool wk_tokenizer_add_bos(const wk_tokenizer *t) { return t->add_bos; }

bool wk_tokenizer_is_eog(const wk_tokenizer *t, int32_t id) {
    return id >= 0 && bsearch(&id, t->eog, (size_t)t->n_eog, sizeof *t->eog, cmp_i32) != NULL;
}

int32_t wk_tokenizer_find(const wk_tokenizer *t, const char *text, size_t len) {
    return text ? wk_tok_lookup(t, text, len) : -1;
}

/* ---- special-token partition (tokenizer_st_partition) ---- */

static bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); } /* isspace, "C" locale */

typedef struct { size_t off, len; int32_t token; int next; } frag; /* token < 0: raw text */
typedef struct { frag *v; int n, cap; } frag_list;

static int frag_new(frag_list *l, size_t off, size_t len, int32_t token, int next) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        frag *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v; l->cap = cap;
    }
    l->v[l->n] = (frag){off, len, token, next};
    return l->n++;
}

/* Splits every raw fragment at each special token's occurrences, one token at a time in cache
 * order, exactly as llama.cpp does (the order matters when matches overlap). A bitmap of the byte
 * pairs in the text skips the thousands of tokens (Gemma's <unusedN>) that cannot occur. */
/* Whether [off, off+n) overlaps one of the plain ranges. */
static bool in_plain(const wk_text_range *plain, int n_plain, size_t off, size_t n) {
    for (int i = 0; i < n_plain; i++)
        if (off < plain[i].off + plain[i].len && plain[i].off < off + n) return true;
    return false;
}

static int partition(const wk_tokenizer *t, const char *text, size_t len, bool parse_special,
                     const wk_text_range *plain, int n_plain, frag_list *l) {
    uint8_t *pairs = calloc(8192, 1), present[32] = {0};
    if (!pairs) return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned a = (unsigned char)text[i];
        present[a >> 3] |= (uint8_t)(1u << (a & 7));
        if (i + 1 < len) {
            unsigned pr = a << 8 | (unsigned char)text[i + 1];
            pairs[pr >> 3] |= (uint8_t)(1u << (pr & 7));
        }
    }
    if (frag_new(l, 0, len, -1, -1) < 0) goto oom;
    for (int k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        const wk_tok_entry *e = &t->tok[id];
        const bool control = e->attr & (WK_ATTR_CONTROL | WK_ATTR_UNKNOWN);
        if (!parse_special && control) continue;
        if (e->len > len) continue;
        unsigned a = (unsigned char)e->text[0];
        if (!(present[a >> 3] & (1u << (a & 7)))) continue;
        if (e->len >= 2) {
            unsigned pr = a << 8 | (unsigned char)e->text[1];
            if (!(pairs[pr >> 3] & (1u << (pr & 7)))) continue;
        }
        for (int f = 0; f != -1; f = l->v[f].next) {
            size_t skip = 0; /* bytes of fragment f searched past: matches inside plain text */
            while (l->v[f].token < 0) {
                size_t off = l->v[f].off, flen = l->v[f].len;
                const char *m = skip < flen ? memmem(text + off + skip, flen - skip, e->text, e->len) : NULL;
                if (!m) break;
                if (control && n_plain && in_plain(plain, n_plain, (size_t)(m - text), e->len)) {
                    skip = (size_t)(m - text) - off + 1; /* a user typed it: text, not a control token */
                    continue;
                }
                /* Pieces: [off, off+llen) raw, the token, [roff, roff+rlen) raw; LSTRIP/RSTRIP
                 * tokens swallow the whitespace next to them. */
                size_t mo = (size_t)(m - text), llen = mo - off, roff = mo + e->len, rlen = off + flen - roff;
                if (e->attr & WK_ATTR_LSTRIP)
                    while (llen && is_c_space(text[off + llen - 1])) llen--;
                if (e->attr & WK_ATTR_RSTRIP)
                    while (rlen && is_c_space(text[roff])) { roff++; rlen--; }
                int next = l->v[f].next, right = -1;
                if (rlen && (right = frag_new(l, roff, rlen, -1, next)) < 0) goto oom;
                int tokf = frag_new(l, mo, e->len, id, right >= 0 ? right : next);
                if (tokf < 0) goto oom;
                if (llen) { /* keep f as the left remainder */
                    l->v[f].len = llen;
                    l->v[f].next = tokf;
                    f = tokf;
                } else { /* f becomes the token itself */
                    l->v[f] = l->v[tokf];
                    l->n--;
                }
                if (right < 0) break;
                f = right;
                skip = 0;
            }
        }
    }
    free(pairs);
    return 0;
oom:
    free(pairs);
    return -1;
}

/* ---- SPM (llm_tokenizer_spm_session) ---- */

typedef struct { uint32_t off, n; int prev, next; } spm_sym;
typedef struct { float score; int left, right; uint32_t size; } spm_bigram;
typedef struct { uint32_t off, len; int left, right; } spm_rev; /* rev_merge entry; len 0 = empty */

typedef struct {
    const wk_tokenizer *t;
    const char *text;
    spm_sym *sym;
    spm_bigram *heap;
    int nheap, capheap;
    spm_rev *rev;
    uint32_t rev_mask, nrev;
    wk_tok_sink *sink;
} spm_session;

/* Max-heap order: higher score first, then the smaller left index (llm_bigram_spm::comparator). */
static bool spm_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool rev_put(spm_session *s, uint32_t off, uint32_t len, int left, int right) {
    if ((s->nrev + 1) * 2 > s->rev_mask + 1) {
        uint32_t ncap = (s->rev_mask + 1) * 2;
        spm_rev *nr = calloc(ncap, sizeof *nr);
        if (!nr) return false;
        for (uint32_t i = 0; i <= s->rev_mask; i++) {
            if (!s->rev[i].len) continue;
            uint32_t h = (uint32_t)wk_tok_hash(s->text + s->rev[i].off, s->rev[i].len) & (ncap - 1);
            while (nr[h].len) h = (h + 1) & (ncap - 1);
            nr[h] = s->rev[i];
        }
        free(s->rev);
        s->rev = nr;
        s->rev_mask = ncap - 1;
    }
    uint32_t h = (uint32_t)wk_tok_hash(s->text + off, len) & s->rev_mask;
    for (;; h = (h + 1) & s->rev_mask) {
        spm_rev *r = &s->rev[h];
        if (!r->len) { s->nrev++; break; }
        if (r->len == len && memcmp(s->text + r->off, s->text + off, len) == 0) break;
    }
    s->rev[h] = (spm_rev){off, len, left, right}; /* rev_merge[text] = ...: the last one wins */
    return true;
}

static const spm_rev *rev_get(const spm_session *s, const char *txt, uint32_t len) {
    uint32_t h = (uint32_t)wk_tok_hash(txt, len) & s->rev_mask;
    for (;; h = (h + 1) & s->rev_mask) {
        const spm_rev *r = &s->rev[h];
        if (!r->len) return NULL;
        if (r->len == len && memcmp(s->text + r->off, txt, len) == 0) return r;
    }
}

static bool spm_try_bigram(spm_session *s, int left, int right) {
    if (left == -1 || right == -1) return true;
    uint32_t off = s->sym[left].off, len = s->sym[left].n + s->sym[right].n;
    int32_t id = wk_tok_lookup(s->t, s->text + off, len);
    if (id < 0) return true;
    if (s->nheap == s->capheap) {
        int cap = s->capheap ? s->capheap * 2 : 64;
        spm_bigram *h = realloc(s->heap, (size_t)cap * sizeof *h);
        if (!h) return false;
        s->heap = h; s->capheap = cap;
    }
    spm_bigram b = {s->t->tok[id].score, left, right, len};
    int i = s->nheap++;
    while (i > 0 && spm_before(&b, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = b;
    return rev_put(s, off, len, left, right);
}

static spm_bigram spm_pop(spm_session *s) {
    spm_bigram top = s->heap[0], last = s->heap[--s->nheap];
    int i = 0, n = s->nheap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && spm_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!spm_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Byte fallback: "<0xXX>", else the single-byte token (byte_to_token). */
static int32_t spm_byte_token(const wk_tokenizer *t, unsigned char c) {
    char buf[7];
    snprintf(buf, sizeof buf, "<0x%02X>", c);
    int32_t id = wk_tok_lookup(t, buf, 6);
    return id >= 0 ? id : wk_tok_lookup(t, (const char *)&c, 1);
}

static void spm_resegment(spm_session *s, int i, int depth) {
    const char *txt = s->text + s->sym[i].off;
    uint32_t n = s->sym[i].n;
    int32_t id = wk_tok_lookup(s->t, txt, n);
    if (id >= 0) { wk_sink_push(s->sink, id); return; }
    const spm_rev *r = depth < 64 ? rev_get(s, txt, n) : NULL;
    if (!r) {
        for (uint32_t j = 0; j < n; j++) {
            int32_t b = spm_byte_token(s->t, (unsigned char)txt[j]);
            if (b < 0) s->sink->failed = true; /* llama.cpp throws here */
            else wk_sink_push(s->sink, b);
        }
        return;
    }
    int l = r->left, rr = r->right;
    spm_resegment(s, l, depth + 1);
    spm_resegment(s, rr, depth + 1);
}

static void spm_encode(const wk_tokenizer *t, const char *text, size_t len, wk_tok_sink *sink) {
    spm_session s = {.t = t, .text = text, .sink = sink};
    int nsym = 0;
    s.sym = malloc((len ? len : 1) * sizeof *s.sym);
    s.rev_mask = 63;
    s.rev = calloc(64, sizeof *s.rev);
    if (!s.sym || !s.rev) goto oom;
    for (size_t off = 0; off < len;) { /* split into UTF-8 characters */
        size_t n = wk_utf8_len((unsigned char)text[off]);
        if (n > len - off) n = len - off;
        s.sym[nsym] = (spm_sym){(uint32_t)off, (uint32_t)n, nsym - 1, off + n == len ? -1 : nsym + 1};
        off += n;
        nsym++;
    }
    for (int i = 1; i < nsym; i++)
        if (!spm_try_bigram(&s, i - 1, i)) goto oom;
    while (s.nheap) {
        spm_bigram b = spm_pop(&s);
        spm_sym *l = &s.sym[b.left], *r = &s.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = b.left;
        if (!spm_try_bigram(&s, l->prev, b.left) || !spm_try_bigram(&s, b.left, l->next)) goto oom;
    }
    for (int i = nsym ? 0 : -1; i != -1; i = s.sym[i].next) spm_resegment(&s, i, 0);
    goto done;
oom:
    sink->failed = true;
done:
    free(s.sym); free(s.heap); free(s.rev);
}

/* One raw SPM fragment: optional leading space, ' ' -> U+2581, merge. */
static void spm_fragment(const wk_tokenizer *t, const char *text, size_t len, bool prefix, wk_tok_sink *sink) {
    char *buf = malloc(3 * len + 3);
    size_t n = 0;
    if (!buf) { sink->failed = true; return; }
    if (prefix) { memcpy(buf, "\xe2\x96\x81", 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(buf + n, "\xe2\x96\x81", 3); n += 3; }
        else buf[n++] = text[i];
    }
    spm_encode(t, buf, n, sink);
    free(buf);
}

int wk_tokenizer_encode(const wk_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t *out, int max) {
    return wk_tokenizer_encode_plain(t, text, len, add_special, parse_special, NULL, 0, out, max);
}

int wk_tokenizer_encode_plain(const wk_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, const wk_text_range *plain, int n_plain, int32_t *out, int max) {
    if (!t || (!text && len) || max < 0 || (!out && max > 0) || n_plain < 0 || (!plain && n_plain)) return -1;
    wk_tok_sink sink = {out, max, 0, false};
    frag_list fl = {0};
    if (len && partition(t, text, len, parse_special, plain, n_plain, &fl) < 0) return -1;

    if (add_special && t->add_bos) wk_sink_push(&sink, t->bos);
    bool prev_special = true; /* SPM: a leading space goes before the first fragment too */
    for (int f = fl.n ? 0 : -1; f != -1 && !sink.failed; f = fl.v[f].next) {
        const frag *fr = &fl.v[f];
        if (fr->token >= 0) {
            wk_sink_push(&sink, fr->token);
            prev_special = true;
        } else if (t->kind == WK_TOK_SPM) {
            spm_fragment(t, text + fr->off, fr->len, t->add_space_prefix && prev_special, &sink);
            prev_special = false;
        } else {
            wk_bpe_encode(t, text + fr->off, fr->len, &sink);
        }
    }
    if (add_special && t->add_eos) wk_sink_push(&sink, t->eos);
    free(fl.v);
    return sink.failed ? -1 : sink.n;
}

/* ---- token_to_piece ---- */

/* Writes at most cap bytes and returns the full length, so a caller can retry with a bigger buffer. */
static int copy_piece(const char *s, size_t n, char *buf, int cap) {
    if (n && cap > 0) memcpy(buf, s, n < (size_t)cap ? n : (size_t)cap);
    return (int)n;
}

int wk_tokenizer_piece(const wk_tokenizer *t, int32_t id, bool render_special, char *buf, int cap) {
    if (!t || id < 0 || id >= t->n_vocab || cap < 0 || (!buf && cap > 0)) return -1;
    const wk_tok_entry *e = &t->tok[id];
    if (!render_special && (e->attr & (WK_ATTR_UNKNOWN | WK_ATTR_CONTROL))) return 0;
    if (e->attr & (WK_ATTR_UNKNOWN | WK_ATTR_CONTROL | WK_ATTR_USER_DEFINED)) return copy_piece(e->text, e->len, buf, cap);
    if (e->attr & WK_ATTR_NORMAL) {
        if (t->kind == WK_TOK_BPE) return wk_bpe_decode_text(e->text, e->len, buf, cap);
        int n = 0; /* U+2581 -> ' ' */
        for (uint32_t i = 0; i < e->len;) {
            char c = e->text[i];
            size_t step = 1;
            if (i + 3 <= e->len && memcmp(e->text + i, "\xe2\x96\x81", 3) == 0) { c = ' '; step = 3; }
            if (n < cap) buf[n] = c;
            n++;
            i += (uint32_t)step;
        }
        return n;
    }
    if (e->attr & WK_ATTR_BYTE) { /* "<0xXX>": strtol(text.substr(3, 2), 16) */
        unsigned v = 0;
        for (uint32_t i = 3; i < 5 && i < e->len; i++) {
            char c = e->text[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) break;
            v = v * 16 + (unsigned)d;
        }
        char b = (char)v;
        return copy_piece(&b, 1, buf, cap);
    }
    return 0; /* UNUSED / undefined types render as nothing, like llama.cpp */
}
