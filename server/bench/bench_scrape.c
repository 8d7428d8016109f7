/* `wushkv bench --url`: reading the server's GET /metrics (Prometheus text 0.0.4) for the KV
 * figures no other load generator reports: the pool's bytes in use and its capacity, what f16
 * would hold for the same tokens, and the preemptions (names: docs/metrics.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_load.h"
#include "http/text_buf.h"

/* /metrics is a few tens of KB; anything far beyond that is not ours. */
#define SCRAPE_MAX_BODY (4u << 20)

double bench_prom_value(const char *text, const char *name) {
    size_t n = strlen(name);
    double sum = NAN;
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        if (line[0] != '#' && strncmp(line, name, n) == 0 && (line[n] == ' ' || line[n] == '{')) {
            /* the value is the first field after the name and its labels; a timestamp may follow */
            const char *v = line + n;
            if (*v == '{') {
                v = strchr(v, '}');
                if (!v || (eol && v > eol)) goto next;
                v++;
            }
            char *end;
            double x = strtod(v, &end);
            if (end != v) sum = isnan(sum) ? x : sum + x;
        }
    next:
        line = eol ? eol + 1 : NULL;
    }
    return sum;
}

static bool on_body(void *ud, int status, const char *data, size_t len) {
    (void)status;
    return text_buf_add_limited(ud, data, len, SCRAPE_MAX_BODY);
}

bool bench_scrape_metrics(const http_target *t, const char *api_key, double timeout_s, bench_scrape *out) {
    out->used_bytes = out->capacity_bytes = out->fp16_bytes = out->preemptions = NAN;
    text_buf body = {0};
    int status = 0;
    char err[256];
    bool ok = http_request(t, "GET", "/metrics", api_key, NULL, 0, timeout_s, on_body, &body, &status, err,
                           sizeof err) &&
              status == 200 && body.p;
    if (ok) {
        out->used_bytes = bench_prom_value(body.p, "wushkv:kv_cache_used_bytes");
        out->capacity_bytes = bench_prom_value(body.p, "wushkv:kv_cache_capacity_bytes");
        out->fp16_bytes = bench_prom_value(body.p, "wushkv:kv_cache_fp16_equivalent_bytes");
        out->preemptions = bench_prom_value(body.p, "wushkv:num_preemptions_total");
        ok = !isnan(out->used_bytes);
    }
    free(body.p);
    return ok;
}
