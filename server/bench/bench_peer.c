/* `wushkv bench --peer`: runs llama-bench on the same model and tests (its -p, -n, -d, -r, and the
 * cache type nearest ours) and reads its JSON into the report's rows. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench/bench_engine.h"

extern char **environ;

/* The peer's stdout (llama-bench's JSON: a few KiB) is read whole; more means something is off. */
#define PEER_MAX_OUTPUT (16u << 20)

const char *bench_peer_kv(const bench_engine_opts *o) {
    if (o->peer_kv) return o->peer_kv;
    return o->kv.bits == 4 ? "q4_0" : "f16";
}

/* The last non-empty line of what the peer wrote to stderr, for a failure message. */
static void last_line(int fd, char *out, size_t cap) {
    out[0] = '\0';
    off_t end = lseek(fd, 0, SEEK_END);
    if (end <= 0) return;
    char buf[1024];
    off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, (size_t)(end - start), start);
    if (n <= 0) return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
    char *nl = strrchr(buf, '\n');
    snprintf(out, cap, "%.*s", (int)cap - 1, nl ? nl + 1 : buf);
}

/* Reads llama-bench's -o json: an array of tests, each with n_prompt, n_gen, n_depth, avg_ts,
 * stddev_ts; each row takes the test of its (n_prompt, n_gen, n_depth). */
static bool parse_peer_json(const char *text, engine_result *res, peer_result *r) {
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        snprintf(r->error, sizeof r->error, "its output is not llama-bench's JSON array (-o json)");
        return false;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, root) {
        const cJSON *np = cJSON_GetObjectItemCaseSensitive(t, "n_prompt");
        const cJSON *ng = cJSON_GetObjectItemCaseSensitive(t, "n_gen");
        const cJSON *nd = cJSON_GetObjectItemCaseSensitive(t, "n_depth");
        const cJSON *avg = cJSON_GetObjectItemCaseSensitive(t, "avg_ts");
        const cJSON *sd = cJSON_GetObjectItemCaseSensitive(t, "stddev_ts");
        if (!cJSON_IsNumber(np) || !cJSON_IsNumber(ng) || !cJSON_IsNumber(avg)) continue;
        int depth = cJSON_IsNumber(nd) ? nd->valueint : 0; /* before llama-bench had -d */
        for (int k = 0; k < res->n_rows; k++) {
            bench_row *w = &res->rows[k];
            if (w->depth == depth && np->valueint == (w->decode ? 0 : w->n) && ng->valueint == (w->decode ? w->n : 0)) {
                w->peer_ts = avg->valuedouble;
                w->peer_sd = cJSON_IsNumber(sd) ? sd->valuedouble : 0.0;
            }
        }
    }
    cJSON_Delete(root);
    for (int k = 0; k < res->n_rows; k++)
        if (isnan(res->rows[k].peer_ts)) {
            char name[48];
            bench_row_name(&res->rows[k], name, sizeof name);
            snprintf(r->error, sizeof r->error, "its JSON has no %s result", name);
            return false;
        }
    return true;
}

/* Runs `peer -m MODEL -p P -n N -d LIST -r R -o json -t CPUS -ctk T -ctv T [-fa 1]`, its stderr
 * kept aside for a failure message. */
void bench_run_peer(const bench_engine_opts *o, const char *model, engine_result *res, peer_result *r) {
    r->kv = bench_peer_kv(o);
    if (access(o->peer, X_OK) != 0) {
        snprintf(r->error, sizeof r->error, "cannot run the peer %.400s: %s", o->peer, strerror(errno));
        return;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char p[24], n[24], reps[24], threads[24], depths[BENCH_MAX_DEPTHS * 9];
    snprintf(p, sizeof p, "%d", o->n_prompt);
    snprintf(n, sizeof n, "%d", o->n_gen);
    snprintf(reps, sizeof reps, "%d", o->reps);
    snprintf(threads, sizeof threads, "%ld", cpus > 0 ? cpus : 1);
    size_t at = 0;
    for (int i = 0; i < o->n_depths; i++)
        at += (size_t)snprintf(depths + at, sizeof depths - at, "%s%d", i ? "," : "", o->depths[i]);
    /* llama.cpp stores a quantized V cache only with flash attention. */
    bool flash = strcmp(r->kv, "f16") != 0;
    char *argv[] = {(char *)o->peer, "-m", (char *)model, "-p", p, "-n", n, "-d", depths, "-r", reps, "-o", "json",
                    "-t", threads, "-ctk", (char *)r->kv, "-ctv", (char *)r->kv, flash ? "-fa" : NULL, "1", NULL};
    fprintf(stderr, "wushkv bench: peer:");
    for (char **a = argv; *a; a++) fprintf(stderr, " %s", *a);
    fputc('\n', stderr);

    int out[2] = {-1, -1};
    char errpath[] = "/tmp/wushkv-bench-peer-XXXXXX";
    int errfd = mkstemp(errpath);
    if (errfd >= 0) unlink(errpath);
    char *text = NULL;
    size_t len = 0, cap = 0;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (errfd < 0 || pipe2(out, O_CLOEXEC) != 0) {
        snprintf(r->error, sizeof r->error, "cannot run the peer: %s", strerror(errno));
        goto out;
    }
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, errfd, STDERR_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    int st = posix_spawn(&pid, o->peer, &fa, NULL, argv, environ);
    close(out[1]);
    out[1] = -1;
    if (st != 0) {
        pid = -1;
        snprintf(r->error, sizeof r->error, "cannot run the peer %.400s: %s", o->peer, strerror(st));
        goto out;
    }
    for (;;) {
        if (cap - len < 4096) {
            if (cap >= PEER_MAX_OUTPUT) break;
            char *t = realloc(text, cap ? cap * 2 : 65536);
            if (!t) break;
            text = t;
            cap = cap ? cap * 2 : 65536;
        }
        ssize_t k = read(out[0], text + len, cap - len - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        len += (size_t)k;
    }
    if (text) text[len] = '\0';
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char tail[256];
        last_line(errfd, tail, sizeof tail);
        if (WIFSIGNALED(ws))
            snprintf(r->error, sizeof r->error, "the peer %.400s was killed by signal %d%s%s", o->peer, WTERMSIG(ws),
                     tail[0] ? ": " : "", tail);
        else
            snprintf(r->error, sizeof r->error, "the peer %.400s exited with status %d%s%s", o->peer, WEXITSTATUS(ws),
                     tail[0] ? ": " : "", tail);
        goto out;
    }
    if (!text || !parse_peer_json(text, res, r)) {
        char why[256];
        snprintf(why, sizeof why, "%.255s", text ? r->error : "no output");
        snprintf(r->error, sizeof r->error, "the peer %.400s: %s", o->peer, why);
        goto out;
    }
    r->ok = true;
out:
    if (pid > 0) waitpid(pid, NULL, 0);
    posix_spawn_file_actions_destroy(&fa);
    if (out[0] >= 0) close(out[0]);
    if (out[1] >= 0) close(out[1]);
    if (errfd >= 0) close(errfd);
    free(text);
}

const char *bench_peer_kv_note(const bench_engine_opts *o) {
    if (o->peer_kv) return "--peer-kv";
    if (o->kv.bits == 16) return "the same type";
    if (o->kv.bits == 4) return "llama.cpp's nearest: 4-bit codes, an f16 scale per 32";
    return "llama.cpp has no 2- or 3-bit cache type";
}
