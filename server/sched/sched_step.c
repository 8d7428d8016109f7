/* One iteration of continuous batching: FCFS admission (only while the KV blocks of the head's
 * prefill are free beside what the running sequences hold and will take), one wk_forward
 * carrying a decode token for every running sequence plus prefill chunks under the token budget,
 * preemption by recompute when the pool runs out, and the sampled tokens handed to their requests. */
#include "sched/scheduler_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/grammar_pick.h"
#include "sched/logits.h"
#include "metrics/mono_clock.h"

/* KV bytes of each pool in use now: every block any running sequence holds counted once however
 * many share it, and their window slots (wk_engine_kv_usage; cached blocks and parked sequences,
 * free to any allocation, are not in use). */
static void kv_used_pools(const scheduler *s, uint64_t used[KV_POOLS]) {
    for (int p = 0; p < KV_POOLS; p++) {
        wk_kv_usage u;
        wk_engine_kv_usage(s->e, p, &u);
        used[p] = u.used_bytes;
    }
}

static uint64_t kv_used(const scheduler *s) {
    uint64_t used[KV_POOLS];
    kv_used_pools(s, used);
    return used[0] + used[1];
}

/* One request as the dashboard lists it. */
static void live_entry(const scheduler *s, const req *r, double now, metrics_pool *p) {
    if (p->n_live == METRICS_MAX_LIVE) return;
    int len = r->seq ? wk_seq_len(r->seq) : 0;
    p->live[p->n_live++] = (metrics_live){
        .id = r->id,
        .state = r->state == R_WAITING ? 'w' : r->state == R_PREFILL ? 'p' : 'd',
        .prompt_tokens = r->n_prompt,
        .generated_tokens = r->n_gen,
        .kv_bytes = r->seq ? wk_seq_kv_bytes(r->seq) : 0,
        .fp16_bytes = (uint64_t)len * s->kv.fp16_bytes_per_token,
        .age_s = now - r->t_arrival,
    };
}

/* The pool gauge of /metrics and the dashboard's live requests, after every step. */
void sched_publish_pool(scheduler *s) {
    metrics_pool p = {.running = s->n_running, .waiting = s->n_waiting};
    double now = mono_now_s();
    for (req *r = s->running; r; r = r->next) {
        p.kv_fp16_bytes += (uint64_t)wk_seq_len(r->seq) * s->kv.fp16_bytes_per_token;
        live_entry(s, r, now, &p);
    }
    for (req *r = s->waiting; r; r = r->next) live_entry(s, r, now, &p);
    wk_kv_usage u[KV_POOLS];
    for (int i = 0; i < KV_POOLS; i++) wk_engine_kv_usage(s->e, i, &u[i]);
    kv_budget_gauge(&s->kv, u, &p);
    metrics_set_pool(s->m, &p);
}

/* What a request hears when its grammar passes a matcher limit (wushkv/grammar.h): a grammar so
 * ambiguous that following it would hold up every other request. */
#define GRAMMAR_PAST_LIMITS                                                                                     \
    "the grammar is too ambiguous or too costly to follow here (past the matcher's limits: parse stacks and " \
    "the work a token may take)"

/* Structured output: grammar_pick's token, the row before its mask kept in *lp_row for logprobs
 * (the model's own probabilities, vLLM's default). false: r failed (and is freed). */
static bool constrained_pick(scheduler *s, req *r, float *row, const float **lp_row, int32_t *tok) {
    const int nv = s->info->n_vocab;
    if (r->g.logprobs >= 0) {
        if (!s->unmasked && !(s->unmasked = malloc((size_t)nv * sizeof *s->unmasked))) {
            req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
            return false;
        }
        memcpy(s->unmasked, row, (size_t)nv * sizeof *row);
        *lp_row = s->unmasked;
    }
    grammar_pick_route route;
    bool no_token;
    int32_t t = grammar_pick(r->matcher, r->sampler, &r->g.sampling, row, nv, &route, &no_token);
    if (t < 0) {
        req_fail(s, r, "structured output", t,
                 no_token                      ? "the grammar allows no token of this model's vocabulary here"
                 : t == WK_ERR_UNSUPPORTED     ? GRAMMAR_PAST_LIMITS
                                               : NULL);
        return false;
    }
    *tok = t;
    return true;
}

/* A sampled token: record, show its text, decide whether the request ends. */
static void take_token(scheduler *s, req *r, float *row) {
    const float *lp_row = row;
    int32_t tok;
    if (!r->matcher) tok = wk_sampler_sample(r->sampler, row);
    else if (!constrained_pick(s, r, row, &lp_row, &tok)) return;
    if (r->matcher) {
        wk_status st = wk_matcher_accept(r->matcher, tok);
        if (st != WK_OK) {
            req_fail(s, r, "structured output", st,
                     st == WK_ERR_UNSUPPORTED ? GRAMMAR_PAST_LIMITS
                                              : "the sampled token does not continue the grammar");
            return;
        }
    }
    double now = mono_now_s(), prev = r->t_last;
    if (r->t_first == 0) r->t_first = now;
    r->t_last = now;
    if (wk_token_is_eog(s->e, tok)) {
        req_finish(s, r, "stop");
        return;
    }
    bool stop_id = false; /* vLLM's stop_token_ids: left out of the text unless include_stop */
    for (int i = 0; i < r->g.n_stop_ids && !stop_id; i++) stop_id = tok == r->g.stop_ids[i];
    if (stop_id && !r->g.include_stop) {
        req_finish_stop(s, r, -1, tok);
        return;
    }
    /* One gap per output token after the first, so the count is completion_tokens - 1. */
    if (r->n_gen > 0) metrics_inter_token(s->m, now - prev);
    if (r->n_gen == r->cap_gen) {
        int cap = r->cap_gen ? r->cap_gen * 2 : 64;
        int32_t *g = realloc(r->gen, (size_t)cap * sizeof *g);
        if (!g) {
            req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
            return;
        }
        r->gen = g;
        r->cap_gen = cap;
    }
    r->gen[r->n_gen++] = tok;
    metrics_tokens(s->m, 0, 1);

    sched_event *ev = sched_ev_new(EV_TEXT, r->id);
    if (!ev) {
        req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
        return;
    }
    if (r->g.logprobs >= 0 && (ev->logprobs = calloc(1, sizeof *ev->logprobs))) {
        token_logprob *lp = ev->logprobs;
        ev->n_logprobs = 1;
        lp->token = tok;
        lp->n_top = r->g.logprobs;
        lp->logprob = logits_logprobs(lp_row, s->info->n_vocab, tok, &lp->n_top, lp->top_token, lp->top_logprob, NULL);
        lp->piece = sched_dup_piece(s, tok, false, &lp->piece_len);
        for (int i = 0; i < lp->n_top; i++) lp->top_piece[i] = sched_dup_piece(s, lp->top_token[i], false, &lp->top_piece_len[i]);
    }
    int n = r->g.render_special ? token_piece(s->e, tok, true, &s->piece, &s->piece_cap) : sched_piece(s, tok);
    text_buf delta = {0};
    bool oom = false, stopped = false;
    r->ts.armed = r->n_gen >= r->g.min_tokens; /* vLLM: stop strings count from the min_tokens-th token */
    if (n > 0) stopped = text_stream_feed(&r->ts, s->piece, (size_t)n, &delta, &oom);
    ev->text = delta.p;
    ev->text_len = delta.len;
    sched_ev_post(s, ev);
    if (oom) req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
    else if (stopped) req_finish_stop(s, r, r->ts.stop_hit, -1);
    else if (stop_id) req_finish_stop(s, r, -1, tok);
    else if (r->matcher && wk_matcher_finished(r->matcher)) req_finish(s, r, "stop"); /* nothing may follow */
    else if (r->n_gen >= r->max_tokens || wk_seq_len(r->seq) >= s->info->max_ctx) req_finish(s, r, "length");
    else {
        r->last = tok;
        r->state = R_DECODE;
    }
}

/* KV bytes of pool `pool` a running sequence is about to take beyond what it holds: one still
 * prefilling will hold the blocks of its whole prefill (prompt, or prompt + generated tokens after
 * a preemption). What it holds is in the pool's used bytes already (kv_used_pools), a block it
 * shares with others once. */
static uint64_t kv_to_come(const scheduler *s, const req *r, int pool) {
    if (r->state != R_PREFILL) return 0;
    return kv_budget_to_come(&s->kv, pool, r->n_fill, wk_seq_kv_pool_bytes(r->seq, pool));
}

/* A sequence for r with as much as the prefix cache holds of what r must prefill (its prompt, or
 * prompt + generated tokens after a preemption) already in it: cached blocks by reference, or a
 * parked sequence adopted (wk_seq_create_prefix); prefill starts after it. At least the last
 * token is left to compute: its logits are the ones sampled. What a hit takes was cached or
 * parked, i.e. free to admission, and is held now, so kv_fits_with counts it like any other. Only the
 * first lookup is counted (vLLM's prefix_cache_queries/hits) and reported as the request's
 * cached_tokens. A negative return: no sequence (no slot). */
static int open_seq(scheduler *s, req *r) {
    const int32_t *src = r->replay ? r->replay : r->prompt;
    const int hit = wk_seq_create_prefix(s->e, src, prompt_reuse_limit(r, s->info->prefix_cache ? r->n_fill - 1 : 0), &r->seq);
    if (hit < 0) return hit;
    r->n_prefilled = hit;
    /* A chat's system prompt is where another conversation's prompt is most likely to meet this
     * one's: a snapshot point there (windowed formats; a no-op elsewhere). */
    if (s->info->prefix_cache && r->g.system_tokens > 0)
        wk_seq_snapshot_at(r->seq, r->g.system_tokens < r->n_fill - 1 ? r->g.system_tokens : r->n_fill - 1);
    return 0;
}

/* The lookup's figures, once r is admitted for good. */
static void count_hit(scheduler *s, req *r) {
    if (!s->info->prefix_cache || r->looked_up) return;
    r->looked_up = true;
    r->n_cached = r->n_prefilled;
    metrics_prefix_cache(s->m, r->n_prompt, r->n_cached);
}

/* Whether everything the running sequences hold and will take, with r (its sequence open, its hit
 * taken) beside them, fits every pool. Blocks r shares with a running sequence are in the pools'
 * used bytes once, so two requests with a common prefix are counted as the pool holds them. */
static bool kv_fits_with(const scheduler *s, const req *r) {
    uint64_t claimed[KV_POOLS];
    kv_used_pools(s, claimed);
    for (int p = 0; p < KV_POOLS; p++) {
        for (const req *q = s->running; q; q = q->next) claimed[p] += kv_to_come(s, q, p);
        claimed[p] += kv_budget_to_come(&s->kv, p, r->n_fill, wk_seq_kv_pool_bytes(r->seq, p));
    }
    return kv_budget_claims_fit(&s->kv, claimed);
}

/* FCFS admission into a sequence slot. The head of the queue also waits until the blocks its
 * prefill still needs, after its prefix hit, are free beside what the running sequences hold or
 * are about to (nobody overtakes it): it opens its sequence (taking the hit), and gives it back
 * when that does not fit (parked again, or its cached blocks cached again). With nothing running
 * it is admitted regardless: its prompt fits the pool (job_generate checked), and a replay that
 * cannot fit alone ends in sched_step(). */
static void admit(scheduler *s) {
    while (s->waiting && s->n_running < s->cfg.max_seqs) {
        req *r = s->waiting;
        if (open_seq(s, r) < 0) break;
        if (s->running && !kv_fits_with(s, r)) {
            wk_seq_park(r->seq);
            r->seq = NULL;
            break;
        }
        count_hit(s, r);
        s->waiting = r->next;
        if (!s->waiting) s->waiting_tail = NULL;
        s->n_waiting--;
        r->state = R_PREFILL;
        if (r->t_admit == 0) r->t_admit = mono_now_s(); /* queue time: the first wait only */
        r->next = NULL;
        req **tail = &s->running;
        while (*tail) tail = &(*tail)->next;
        *tail = r; /* admission order: older requests get prefill budget first */
        s->n_running++;
    }
}

/* Preemption by recompute: gives r's sequence up and puts r at the front of the queue. When it is
 * readmitted it prefills its prompt and the tokens it generated (the last of which it had not fed
 * yet), so its next logits are those its next decode step would have given. Its sequence is
 * parked, not destroyed (wk_seq_park; destroyed where the format does not park): the step's retry
 * takes its blocks back as it needs them, and whatever is left on readmission is adopted instead
 * of recomputed. Returns false when out of memory (r is then failed). */
static bool preempt(scheduler *s, req *r, uint64_t used_before) {
    int32_t *replay = NULL;
    if (r->n_gen > 0) {
        replay = malloc((size_t)(r->n_prompt + r->n_gen) * sizeof *replay);
        if (!replay) {
            req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
            return false;
        }
        memcpy(replay, r->prompt, (size_t)r->n_prompt * sizeof *replay);
        memcpy(replay + r->n_prompt, r->gen, (size_t)r->n_gen * sizeof *replay);
    }
    fprintf(stderr,
            "wushkv: KV pool full (%llu of %llu bytes held): preempting sequence %llu (%d tokens; %d prompt + %d "
            "generated are recomputed when blocks are free)\n",
            (unsigned long long)used_before, (unsigned long long)s->info->kv_pool_bytes, (unsigned long long)r->id,
            wk_seq_len(r->seq), r->n_prompt, r->n_gen);
    wk_seq_park(r->seq);
    r->seq = NULL;
    free(r->replay);
    r->replay = replay;
    r->n_fill = r->n_prompt + r->n_gen;
    r->n_prefilled = r->chunk = 0;
    req_unlink(&s->running, r);
    s->n_running--;
    r->state = R_WAITING;
    r->next = s->waiting;
    s->waiting = r;
    if (!s->waiting_tail) s->waiting_tail = r;
    s->n_waiting++;
    metrics_preemption(s->m);
    return true;
}

/* A prefill chunk of at most `most` tokens for r, ending at its next snapshot point (the engine
 * takes a snapshot at a step's end). */
static int chunk_for(const req *r, int most) {
    int k = r->n_fill - r->n_prefilled;
    if (k > most) k = most;
    const int stop = wk_seq_snapshot_next(r->seq);
    if (stop > r->n_prefilled && r->n_prefilled + k > stop) k = stop - r->n_prefilled;
    return k;
}

/* Steps a prefilling request lets shorter prompts go first; then a step goes in arrival order. */
enum { PREFILL_PATIENCE = 4 };

/* The prefilling request without a chunk yet that goes next: the oldest (fcfs), else the one with
 * the fewest prompt tokens left (the older of equals: the list is in admission order); NULL when
 * none. */
static req *next_prefill(scheduler *s, bool fcfs) {
    req *best = NULL;
    for (req *r = s->running; r; r = r->next) {
        if (r->state != R_PREFILL || r->chunk != 0) continue;
        if (fcfs) return r;
        if (!best || r->n_fill - r->n_prefilled < best->n_fill - best->n_prefilled) best = r;
    }
    return best;
}

/* Decode tokens first (one each: they keep streaming), then prefill chunks shortest prefill first,
 * so a short prompt behind a long one is prefilled in its next step rather than after all of the
 * long one (19 s on a CPU behind a 1900-token prompt in steps of 128 tokens). A long prompt still
 * advances: it has what shorter ones leave, and once some prefill has had nothing for
 * PREFILL_PATIENCE steps, a step goes in arrival order (as every step did before). Returns the
 * item count; *tokens gets the tokens carried. */
static int build_batch(scheduler *s, int *tokens) {
    int n = 0, left = s->cfg.max_batch_tokens;
    bool fcfs = false;
    for (req *r = s->running; r; r = r->next) {
        r->chunk = 0;
        r->chunk_rows = false;
        if (r->state == R_DECODE) left--;
        else if (r->state == R_PREFILL && r->prefill_waits >= PREFILL_PATIENCE) fcfs = true;
    }
    int spare = prompt_spare_rows(s); /* logits rows beyond one per item, for scored prompts */
    for (req *r; left > 0 && (r = next_prefill(s, fcfs));) {
        r->chunk = chunk_for(r, left);
        if (r->chunk == 0) break; /* (cannot happen: a prefilling request has tokens left) */
        if ((r->chunk_rows = prompt_needs_rows(r))) r->chunk = prompt_chunk_bound(r->chunk, &left, &spare);
        left -= r->chunk;
    }
    /* The items in admission order. */
    *tokens = 0;
    for (req *r = s->running; r; r = r->next) {
        if (r->state == R_DECODE) {
            s->items[n] = (wk_batch_item){.seq = r->seq, .tokens = &r->last, .n_tokens = 1};
            s->item_req[n++] = r;
            ++*tokens;
        } else if (r->state == R_PREFILL && r->chunk > 0) {
            const int32_t *src = r->replay ? r->replay : r->prompt;
            s->items[n] = (wk_batch_item){.seq = r->seq, .tokens = src + r->n_prefilled, .n_tokens = r->chunk,
                                          .all_logits = r->chunk_rows};
            s->item_req[n++] = r;
            *tokens += r->chunk;
        }
    }
    return n;
}

void sched_step(scheduler *s) {
    admit(s);

    int n, tokens, rc;
    char err[WK_ERRMSG_LEN];
    for (;;) {
        n = build_batch(s, &tokens);
        if (n == 0) return;
        err[0] = 0;
        double t0 = mono_now_s();
        rc = wk_forward(s->e, s->items, n, s->logits, err, sizeof err);
        if (rc != WK_ERR_KV_FULL) {
            metrics_step(s->m, n, tokens, mono_now_s() - t0);
            for (req *r = s->running; r; r = r->next) /* counted once a step, after the retries */
                r->prefill_waits = r->state == R_PREFILL && r->chunk == 0 ? r->prefill_waits + 1 : 0;
            break;
        }
        /* No free block (nothing was computed; sequences earlier in the batch may keep blocks they
         * reserved, which they use on the retry). Free the newest sequence's blocks and retry. */
        req *victim = s->running;
        while (victim && victim->next) victim = victim->next;
        if (s->n_running > 1) {
            preempt(s, victim, kv_used(s));
            continue;
        }
        /* Alone and still no room: the pool cannot hold this sequence any longer. */
        if (victim->n_gen > 0) {
            fprintf(stderr, "wushkv: KV pool full with sequence %llu alone (%d tokens): it ends with 'length'\n",
                    (unsigned long long)victim->id, wk_seq_len(victim->seq));
            req_finish(s, victim, "length");
        } else {
            sched_post_error(s, victim->id, 400, "prompt", "kv_cache_exceeded",
                       "The prompt of %d tokens does not fit the server's KV pool (%llu bytes, --kv-mem)",
                       victim->n_prompt, (unsigned long long)s->info->kv_pool_bytes);
            metrics_request m = {.finish_reason = "error", .prompt_tokens = victim->n_prompt, .queue_s = -1,
                                 .ttft_s = -1, .prefill_s = -1, .decode_s = -1, .tpot_s = -1,
                                 .e2e_s = mono_now_s() - victim->t_arrival};
            metrics_request_done(s->m, &m);
            req_remove(s, victim);
            req_free(victim);
        }
        return;
    }
    if (rc < 0) {
        /* No sequence changed; the requests of this batch cannot go on. */
        for (int i = 0; i < n; i++) req_fail(s, s->item_req[i], "forward step failed", rc, err);
        return;
    }
    int prefilled = 0;
    const size_t nv = (size_t)s->info->n_vocab;
    size_t next_row = 0; /* an item's logits: its last row, or every row of a scored chunk */
    for (int i = 0; i < n; i++) {
        req *r = s->item_req[i];
        const int rows = s->items[i].all_logits ? s->items[i].n_tokens : 1;
        float *first_row = s->logits + next_row * nv, *row = first_row + (size_t)(rows - 1) * nv;
        next_row += (size_t)rows;
        int len = wk_seq_len(r->seq);
        uint64_t bytes = wk_seq_kv_peak_bytes(r->seq); /* since its last (re)admission */
        if (len > r->peak_len) r->peak_len = len;
        if (bytes > r->peak_bytes) r->peak_bytes = bytes;
        if (r->state == R_PREFILL) {
            if (s->items[i].all_logits && !prompt_score_rows(s, r, first_row, r->n_prefilled, rows)) continue; /* r failed */
            r->n_prefilled += r->chunk;
            int counted = r->n_prefilled < r->n_prompt ? r->n_prefilled : r->n_prompt;
            if (counted > r->n_prompt_counted) {
                prefilled += counted - r->n_prompt_counted;
                r->n_prompt_counted = counted;
            }
            if (r->n_prefilled < r->n_fill) continue; /* this row's logits are not needed */
            free(r->replay); /* prefilled: decode goes on from r->gen */
            r->replay = NULL;
            if (r->g.echo_prompt && !r->prompt_sent && !prompt_post(s, r)) continue; /* r failed */
            if (r->max_tokens == 0) { /* the prompt alone (echo with max_tokens 0: scoring a text) */
                req_finish(s, r, "length");
                continue;
            }
        }
        if (r->g.n_bias) logits_bias(row, s->info->n_vocab, r->g.bias_tokens, r->g.bias_values, r->g.n_bias);
        if (r->g.ignore_eos || r->n_gen < r->g.min_tokens) logits_mask(row, s->info->n_vocab, s->eog, s->n_eog);
        if (r->n_gen < r->g.min_tokens) logits_mask(row, s->info->n_vocab, r->g.stop_ids, r->g.n_stop_ids);
        if (r->g.n_bad_seqs)
            logits_ban_endings(row, s->info->n_vocab, r->g.bad_ids, r->g.bad_end, r->g.n_bad_seqs, r->gen, r->n_gen);
        if (r->g.n_allowed_ids) logits_keep_only(row, s->info->n_vocab, r->g.allowed_ids, r->g.n_allowed_ids);
        logits_penalize(row, r->prompt, r->n_prompt, r->gen, r->n_gen, r->g.presence_penalty, r->g.frequency_penalty,
                        r->g.repetition_penalty, r->g.repeat_last_n, s->scratch);
        take_token(s, r, row); /* may finish (and free) r */
    }
    if (prefilled) metrics_tokens(s->m, prefilled, 0);
}
