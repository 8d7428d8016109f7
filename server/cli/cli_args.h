/* Strict command-line parsing shared by every wushkv subcommand: an option iterator and value
 * parsers that reject anything but a whole, in-range value, with a message naming the flag. */
#ifndef WUSHKV_CLI_ARGS_H
#define WUSHKV_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* Exit status of a command-line mistake (as in getopt-based tools); 1 is a runtime failure. */
#define CLI_EXIT_USAGE 2

/* Walks argv of one subcommand. Options take "--flag value" or "--flag=value"; a repeated flag
 * overrides the earlier one (so scripts can append overrides). */
typedef struct cli {
    const char *cmd;          /* "generate": named in every message */
    int argc;
    char **argv;
    int next;                 /* index of the next argv entry to read */
    const char *arg;          /* the current argument as typed */
    char name[64];            /* the current option's name, without "=value" */
    const char *inline_value; /* what followed '=', or NULL */
} cli;

void cli_init(cli *c, const char *cmd, int argc, char **argv);
/* Moves to the next argument; false when none is left. */
bool cli_next(cli *c);
/* Whether the current option is short_name or long_name (either may be NULL). */
bool cli_is(const cli *c, const char *short_name, const char *long_name);

/* Value getters: read the option's value, print "wushkv CMD: --flag: expected ..., got 'x'" to
 * stderr and return false when it is missing or not acceptable. */
bool cli_str(cli *c, const char **out);
bool cli_int(cli *c, long min, long max, int *out);
bool cli_float(cli *c, double min, double max, float *out); /* max = INFINITY: no upper bound */
bool cli_u64(cli *c, uint64_t *out);
bool cli_size(cli *c, uint64_t *out); /* "256MiB", "2G", "1.5GiB", "4096" (bytes) */
/* One of names[0..n-1] (n >= 1), its index in *out; else "expected a, b or c, got 'x'". */
bool cli_choice(cli *c, const char *const *names, int n, int *out);
/* A switch such as --json: an "=value" is refused. */
bool cli_switch(cli *c);
/* "wushkv CMD: unknown option '--x' (see wushkv CMD --help)". */
void cli_unknown(const cli *c);
/* "wushkv CMD: <message>" on stderr. */
void cli_error(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The parsers under the getters, for other callers (environment variables, config). They accept
 * the whole string or nothing: no leading blanks, no trailing junk, no overflow, finite only. */
bool cli_parse_long(const char *s, long *out);
bool cli_parse_double(const char *s, double *out);
bool cli_parse_u64(const char *s, uint64_t *out);
/* Suffixes B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) and KB, MB, GB, TB (powers of 1000),
 * case-insensitive; a fraction is allowed with a suffix ("1.5GiB"). */
bool cli_parse_size(const char *s, uint64_t *out);

#endif
