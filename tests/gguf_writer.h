/* Test-side GGUF helpers: the engine's GGUF writer (engine/model/gguf_write.h, which tests use to
 * build small model files) plus random well-formed quant blocks for tests of every format. */
#ifndef WK_TEST_GGUF_WRITER_H
#define WK_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"
#include "model/gguf_write.h"

/* n_elems elements of random but well-formed blocks of `type` (finite, modest f16 scales),
 * for tests that exercise every block format. rng: xorshift state, advanced. */
void wk_gw_random_blocks(wk_ggml_type type, size_t n_elems, uint64_t *rng, void *out);

#endif
