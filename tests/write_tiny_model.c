/* Writes one tiny random-weight GGUF model (tiny_model.h) to a path, for tests that drive the
 * wushkv binary itself (test_cli.sh, test_bench.sh) and for checks against llama.cpp on another
 * model's vocabulary and chat template (scripts/chat_peer_formats.sh).
 * Usage: write_tiny_model OUT.gguf [gemma3|llama|qwen3] [SEED] [--vocab-from GGUF] [--chat-template FILE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiny_model.h"

static int usage(void) {
    fprintf(stderr, "usage: write_tiny_model OUT.gguf [gemma3|llama|qwen3] [SEED] [--vocab-from GGUF] "
                    "[--chat-template FILE]\n");
    return 2;
}

/* The whole file as a NUL-terminated string (malloc'd), or NULL. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1)) != NULL) {
        if (fread(s, 1, (size_t)n, f) == (size_t)n) {
            s[n] = '\0';
        } else {
            free(s);
            s = NULL;
        }
    }
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    tiny_model_opts o = {.arch = "gemma3", .seed = 1};
    const char *out = NULL, *template_path = NULL;
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab-from") && i + 1 < argc) {
            o.vocab_from = argv[++i];
        } else if (!strcmp(argv[i], "--chat-template") && i + 1 < argc) {
            template_path = argv[++i];
        } else if (argv[i][0] == '-') {
            return usage();
        } else if (positional == 0) {
            out = argv[i], positional++;
        } else if (positional == 1) {
            if (strcmp(argv[i], "gemma3") && strcmp(argv[i], "llama") && strcmp(argv[i], "qwen3")) return usage();
            o.arch = argv[i], positional++;
        } else if (positional == 2) {
            o.seed = strtoull(argv[i], NULL, 10), positional++;
        } else {
            return usage();
        }
    }
    if (!out) return usage();
    char *chat_template = NULL;
    if (template_path && !(chat_template = read_text(template_path))) {
        fprintf(stderr, "write_tiny_model: cannot read %s\n", template_path);
        return 1;
    }
    o.chat_template = chat_template;
    bool ok = tiny_model_write(&o, out);
    free(chat_template);
    if (!ok) {
        fprintf(stderr, "write_tiny_model: cannot write %s\n", out);
        return 1;
    }
    return 0;
}
