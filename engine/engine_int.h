/* Engine internals for engine-side modules that work on an open engine (calibration): the parsed
 * model and its GGUF file. server/ never sees this header; it has include/wushkv/ only. */
#ifndef WK_ENGINE_INT_H
#define WK_ENGINE_INT_H

#include "model/gguf.h"
#include "model/model.h"
#include "wushkv/wushkv.h"

/* Both live as long as the engine. */
const wk_model_desc *wk_engine_desc(const wk_engine *e);
const wk_gguf *wk_engine_gguf(const wk_engine *e); /* NULL once released (release_model_file) */
/* Warnings and errors the validation layer reported so far (tests require 0). */
int wk_engine_validation_messages(const wk_engine *e);

#endif
