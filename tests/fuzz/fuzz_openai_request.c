/* Fuzz target: OpenAI request validation (server/api/openai_request.c) on arbitrary bodies:
 * completions, chat completions (which renders the chat template), /tokenize and /detokenize.
 * Input: byte 0 picks the endpoint and the model's chat format, the rest is the body. Invariants
 * (fuzz_openai.h): a refusal is a 4xx/5xx with a message; an accepted request has n x prompts
 * choices within the limit, each with a prompt and fields in range; nothing leaks. */
#include <stdint.h>

#include "fuzz_openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    /* The HTTP layer hands bodies NUL-terminated; keep that (and give ASan an exact bound). */
    char *body = malloc(size);
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    fz_openai((fz_endpoint)(data[0] % FZ_EP_COUNT), (chat_format)(data[0] / FZ_EP_COUNT % CHAT_FORMAT_COUNT), body, size - 1);
    free(body);
    return 0;
}
