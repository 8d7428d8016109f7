/* Writes one tiny random-weight GGUF model (tiny_model.h) to a path, for tests that drive the
 * wushkv binary itself (test_cli.sh, test_bench.sh).
 * Usage: write_tiny_model OUT.gguf [gemma3|llama] [SEED] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiny_model.h"

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4 || (argc > 2 && strcmp(argv[2], "gemma3") != 0 && strcmp(argv[2], "llama") != 0)) {
        fprintf(stderr, "usage: write_tiny_model OUT.gguf [gemma3|llama] [SEED]\n");
        return 2;
    }
    tiny_model_opts o = {.arch = argc > 2 ? argv[2] : "gemma3", .seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1};
    if (!tiny_model_write(&o, argv[1])) {
        fprintf(stderr, "write_tiny_model: cannot write %s\n", argv[1]);
        return 1;
    }
    return 0;
}
