/* Strict command-line parsing shared by every wushkv subcommand (see cli_args.h). A value is
 * accepted only whole and in range, because a silently truncated "--ctx 4k" or "--temp 0,7"
 * would run the wrong experiment without anyone noticing. */
#include "cli/cli_args.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void cli_init(cli *c, const char *cmd, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    c->argc = argc;
    c->argv = argv;
    c->next = 1; /* argv[0] is the subcommand's name */
}

bool cli_next(cli *c) {
    if (c->next >= c->argc) return false;
    c->arg = c->argv[c->next++];
    c->inline_value = NULL;
    /* "--flag=value" splits at the first '='; short options and positionals never do. */
    const char *eq = strncmp(c->arg, "--", 2) == 0 ? strchr(c->arg, '=') : NULL;
    size_t n = eq ? (size_t)(eq - c->arg) : strlen(c->arg);
    if (n >= sizeof c->name) n = sizeof c->name - 1;
    memcpy(c->name, c->arg, n);
    c->name[n] = '\0';
    if (eq) c->inline_value = eq + 1;
    return true;
}

bool cli_is(const cli *c, const char *short_name, const char *long_name) {
    return (short_name && strcmp(c->name, short_name) == 0) || (long_name && strcmp(c->name, long_name) == 0);
}

void cli_error(const cli *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "wushkv %s: ", c->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_unknown(const cli *c) {
    if (c->arg[0] == '-' && c->arg[1] != '\0')
        cli_error(c, "unknown option '%s' (see wushkv %s --help)", c->name, c->cmd);
    else
        cli_error(c, "unexpected argument '%s' (see wushkv %s --help)", c->arg, c->cmd);
}

bool cli_str(cli *c, const char **out) {
    if (c->inline_value) {
        *out = c->inline_value;
        return true;
    }
    if (c->next >= c->argc) {
        cli_error(c, "%s: missing value", c->name);
        return false;
    }
    *out = c->argv[c->next++];
    return true;
}

bool cli_switch(cli *c) {
    if (c->inline_value) {
        cli_error(c, "%s takes no value, got '%s'", c->name, c->inline_value);
        return false;
    }
    return true;
}

/* ---- whole-string parsers --------------------------------------------------------------------- */

/* strto* skip leading blanks; we refuse them so " 5" is not quietly 5. */
static bool starts_clean(const char *s) { return s && s[0] != '\0' && !isspace((unsigned char)s[0]); }

bool cli_parse_long(const char *s, long *out) {
    if (!starts_clean(s)) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double *out) {
    if (!starts_clean(s)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    /* strtoull would turn "-1" into 2^64-1. */
    if (!starts_clean(s) || s[0] == '-' || s[0] == '+') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = (uint64_t)v;
    return true;
}

bool cli_parse_size(const char *s, uint64_t *out) {
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {
        {"", 1.0},           {"b", 1.0},
        {"k", 1024.0},       {"kib", 1024.0},       {"kb", 1e3},
        {"m", 1048576.0},    {"mib", 1048576.0},    {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    if (!starts_clean(s) || s[0] == '-' || s[0] == '+') return false;
    /* Plain digits: exact, whatever the size. */
    uint64_t exact;
    if (cli_parse_u64(s, &exact)) {
        *out = exact;
        return true;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || !isfinite(v) || v < 0) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) != 0) continue;
        if (units[i].mult == 1.0 && v != floor(v)) return false; /* no half bytes */
        double bytes = v * units[i].mult;
        if (bytes >= 18446744073709551616.0) return false; /* 2^64 */
        *out = (uint64_t)(bytes + 0.5);
        return true;
    }
    return false;
}

/* ---- getters ----------------------------------------------------------------------------------- */

bool cli_int(cli *c, long min, long max, int *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    long v;
    if (!cli_parse_long(s, &v) || v < min || v > max || v < INT_MIN || v > INT_MAX) {
        if (max >= INT_MAX)
            cli_error(c, "%s: expected an integer >= %ld, got '%s'", c->name, min, s);
        else
            cli_error(c, "%s: expected an integer in [%ld, %ld], got '%s'", c->name, min, max, s);
        return false;
    }
    *out = (int)v;
    return true;
}

bool cli_float(cli *c, double min, double max, float *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    double v;
    if (!cli_parse_double(s, &v) || v < min || v > max || fabs(v) > 3.0e38) {
        if (isinf(max))
            cli_error(c, "%s: expected a number >= %g, got '%s'", c->name, min, s);
        else
            cli_error(c, "%s: expected a number in [%g, %g], got '%s'", c->name, min, max, s);
        return false;
    }
    *out = (float)v;
    return true;
}

bool cli_u64(cli *c, uint64_t *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    if (!cli_parse_u64(s, out)) {
        cli_error(c, "%s: expected an integer in [0, %llu], got '%s'", c->name, (unsigned long long)UINT64_MAX, s);
        return false;
    }
    return true;
}

bool cli_size(cli *c, uint64_t *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    if (!cli_parse_size(s, out)) {
        cli_error(c, "%s: expected a size such as 4096, 256MiB or 2GiB, got '%s'", c->name, s);
        return false;
    }
    return true;
}

bool cli_choice(cli *c, const char *const *names, int n, int *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return true;
        }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
        if (w < 0 || (size_t)w >= sizeof list - len) break; /* a cut list still names the flag */
        len += (size_t)w;
    }
    cli_error(c, "%s: expected %s, got '%s'", c->name, list, s);
    return false;
}
