/* Reading a whole text file (or stdin) for the commands that score or calibrate on text. */
#ifndef WUSHKV_TEXT_FILE_H
#define WUSHKV_TEXT_FILE_H

#include <stddef.h>

/* The whole file ("-": stdin), NUL-terminated, its length in *len_out. NULL on error, printed as
 * "wushkv CMD: cannot open/read PATH: reason". The caller frees. */
char *read_text_file(const char *cmd, const char *path, size_t *len_out);

#endif
