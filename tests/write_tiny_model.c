/* Writes one tiny random-weight GGUF model (tests/tiny_model.c) to a path, for tests that drive
 * the wushkv binary: write_tiny_model OUT.gguf [gemma3|llama]. */
#include <stdio.h>
#include <string.h>

#include "tiny_model.h"

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "gemma3") != 0 && strcmp(argv[2], "llama") != 0)) {
        fprintf(stderr, "usage: write_tiny_model OUT.gguf [gemma3|llama]\n");
        return 2;
    }
    tiny_model_opts o = {.arch = argc == 3 ? argv[2] : "gemma3", .seed = 7};
    if (!tiny_model_write(&o, argv[1])) {
        fprintf(stderr, "write_tiny_model: cannot write %s\n", argv[1]);
        return 1;
    }
    return 0;
}
