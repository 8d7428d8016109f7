/* Text helpers the tokenizer tests and the tokenizer fuzz target share, written independently of
 * the engine's own (engine/tokenizer/), so that what they build checks the tokenizer rather than
 * repeating it: a UTF-8 encoder and GPT-2's byte-to-unicode map. */
#ifndef WUSHKV_TEST_TEXT_H
#define WUSHKV_TEST_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Code point cp as UTF-8 into o (room for 4 bytes); returns the byte count. */
static inline size_t test_put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256, 257, ... in
 * byte order. */
static inline uint32_t test_gpt2_byte_cp(int b) {
    static uint32_t map[256];
    static bool init;
    if (!init) {
        int n = 0;
        for (int c = 0; c < 256; c++) {
            bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
            map[c] = printable ? (uint32_t)c : 256 + (uint32_t)n++;
        }
        init = true;
    }
    return map[b];
}

#endif
