/* The push-constant blocks of the shaders against engine/vulkan/shader_params.h: every shader
 * source given on the command line (all of shaders/meson.build's table) is read, its
 * `layout(push_constant)` block parsed, and its fields (names, order, types) compared with the
 * C block's field list (WK_PC_BLOCKS). A field renamed, reordered, retyped, added or removed on
 * one side only, a shader block without a C block or a C block without its shader fails. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "vulkan/shader_params.h"

enum { MAX_FIELDS = 32, MAX_SHADERS = 4 };

typedef struct {
    const char *type, *name;
} field;

typedef struct {
    const char *name;        /* the C struct */
    const field *fields;
    int n;
    const char *shaders[MAX_SHADERS + 1]; /* under shaders/, NULL-terminated */
    bool seen[MAX_SHADERS];
} block;

#define AS_FIELD(s, type, name) {#type, #name},
#define FIELDS(s, LIST, ...) static const field s##_fields[] = {LIST(AS_FIELD, s)};
WK_PC_BLOCKS(FIELDS)
#define AS_BLOCK(s, LIST, ...) {#s, s##_fields, (int)(sizeof s##_fields / sizeof s##_fields[0]), {__VA_ARGS__, NULL}, {false}},
static block blocks[] = {WK_PC_BLOCKS(AS_BLOCK)};
enum { N_BLOCKS = sizeof blocks / sizeof blocks[0] };

/* The GLSL spelling of a C field type. */
static const char *glsl_type(const char *c_type) {
    if (!strcmp(c_type, "uint32_t")) return "uint";
    if (!strcmp(c_type, "int32_t")) return "int";
    if (!strcmp(c_type, "float")) return "float";
    return c_type;
}

/* Comments become spaces, so that they can hide no field. */
static void blank_comments(char *s) {
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '/')
            while (*p && *p != '\n') *p++ = ' ';
        else if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            while (p < end) *p++ = ' ';
        }
        if (!*p) break;
    }
}

static bool is_ident_char(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* The next identifier from *p (skipping spaces and, when commas, commas) into out; false at the
 * end of the declaration or on anything but an identifier. */
static bool next_ident(const char **p, const char *end, char *out, size_t cap) {
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')) (*p)++;
    size_t n = 0;
    while (*p < end && is_ident_char(**p) && n + 1 < cap) out[n++] = *(*p)++;
    out[n] = 0;
    return n > 0;
}

/* Parses "type a; type b, c; ..." between body and end into fields; returns the count, or -1 on a
 * declaration this reader does not understand (arrays, qualifiers, layouts). */
static int parse_fields(const char *body, const char *end, char types[][32], char names[][64]) {
    int n = 0;
    const char *p = body;
    while (p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *decl_end = semi ? semi : end;
        char type[32];
        if (!next_ident(&p, decl_end, type, sizeof type)) {
            while (p < decl_end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
            if (p != decl_end) return -1; /* something that is not a declaration */
        } else {
            for (;;) {
                if (n == MAX_FIELDS) return -1;
                if (!next_ident(&p, decl_end, names[n], 64)) return -1;
                strcpy(types[n], type);
                n++;
                while (p < decl_end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
                if (p == decl_end) break;
                if (*p != ',') return -1;
                p++;
            }
        }
        p = semi ? semi + 1 : end;
    }
    return n;
}

static bool ends_with_path(const char *path, const char *rel) {
    size_t lp = strlen(path), lr = strlen(rel);
    return lp >= lr && !strcmp(path + lp - lr, rel) && (lp == lr || path[lp - lr - 1] == '/');
}

static void check_shader(const char *path) {
    size_t len;
    char *src = slurp(path, &len);
    CHECK(src != NULL);
    if (!src) {
        fprintf(stderr, "%s: cannot read\n", path);
        return;
    }
    blank_comments(src);
    const char *at = strstr(src, "push_constant");
    if (!at) { /* no block: then no C block may claim this shader */
        for (int b = 0; b < N_BLOCKS; b++)
            for (int k = 0; blocks[b].shaders[k]; k++)
                if (ends_with_path(path, blocks[b].shaders[k])) {
                    fprintf(stderr, "%s: no push_constant block, but %s names it\n", path, blocks[b].name);
                    CHECK(false);
                }
        free(src);
        return;
    }
    CHECK(strstr(at + 1, "push_constant") == NULL); /* one block a shader */
    const char *open = strchr(at, '{'), *close = open ? strchr(open, '}') : NULL;
    CHECK(open && close);
    if (!open || !close) {
        fprintf(stderr, "%s: push_constant block without braces\n", path);
        free(src);
        return;
    }
    static char types[MAX_FIELDS][32], names[MAX_FIELDS][64];
    int n = parse_fields(open + 1, close, types, names);
    CHECK(n > 0);
    if (n <= 0) fprintf(stderr, "%s: cannot read the push_constant block's fields\n", path);

    block *blk = NULL;
    for (int b = 0; b < N_BLOCKS && !blk; b++)
        for (int k = 0; blocks[b].shaders[k]; k++)
            if (ends_with_path(path, blocks[b].shaders[k])) {
                blk = &blocks[b];
                blk->seen[k] = true;
                break;
            }
    CHECK(blk != NULL);
    if (!blk) fprintf(stderr, "%s: a push_constant block that no WK_PC_BLOCKS entry names\n", path);
    if (blk && n > 0) {
        bool same = n == blk->n;
        for (int i = 0; i < n && i < blk->n; i++)
            same = same && !strcmp(names[i], blk->fields[i].name) && !strcmp(types[i], glsl_type(blk->fields[i].type));
        CHECK(same);
        if (!same) {
            fprintf(stderr, "%s: the push_constant block differs from %s:\n", path, blk->name);
            for (int i = 0; i < n || i < blk->n; i++)
                fprintf(stderr, "  %2d  shader %-5s %-20s  C %-5s %-20s%s\n", i, i < n ? types[i] : "", i < n ? names[i] : "-",
                        i < blk->n ? glsl_type(blk->fields[i].type) : "", i < blk->n ? blk->fields[i].name : "-",
                        i < n && i < blk->n && !strcmp(names[i], blk->fields[i].name) &&
                                !strcmp(types[i], glsl_type(blk->fields[i].type))
                            ? ""
                            : "  <--");
        }
    }
    free(src);
}

int main(int argc, char **argv) {
    CHECK(argc > 1);
    for (int i = 1; i < argc; i++) check_shader(argv[i]);
    for (int b = 0; b < N_BLOCKS; b++)
        for (int k = 0; blocks[b].shaders[k]; k++) {
            CHECK(blocks[b].seen[k]);
            if (!blocks[b].seen[k])
                fprintf(stderr, "%s: its shader %s was not given (or has no push_constant block)\n", blocks[b].name,
                        blocks[b].shaders[k]);
        }
    printf("%d push-constant blocks against %d shader sources\n", (int)N_BLOCKS, argc - 1);
    TEST_MAIN_END();
}
