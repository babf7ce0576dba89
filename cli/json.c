/* json.c - the commands' --json output: one writer, every string through
 * jansson (docs/reference.md, section 4).
 *
 * Names, labels, paths and metadata come from files and arguments: none is
 * ever pasted into the output. Each is a jansson string, dumped with
 * JSON_ENSURE_ASCII, so that the output is ASCII (a control character, a
 * quote or a C1 control inside a label is an escape, and cannot end the
 * string nor drive a terminal) and valid JSON whatever the input. Text
 * that is not UTF-8 (a file name, a --set value) cannot be a JSON string:
 * each byte that is not part of a valid UTF-8 sequence becomes U+FFFD.
 * Numbers keep the formats the commands always printed ("%.4f", "%.6g"),
 * which jansson's reals (%.17g) would change: they are printed by the
 * writer, never from text. The writer puts the separators (", " and ": ",
 * as jansson's default) and the brackets, so the structure is its own. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at p (Unicode's well-formed table:
 * no overlong form, no surrogate, at most U+10FFFF), 0 if there is none. */
static size_t utf8_seq(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    if (p[0] < 0xc2 || p[0] > 0xf4) return 0;
    const size_t n = p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : 4;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;   /* also stops at the NUL */
    if (n == 3 && p[0] == 0xe0 && p[1] < 0xa0) return 0;
    if (n == 3 && p[0] == 0xed && p[1] >= 0xa0) return 0;
    if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
    return n;
}

json_t *json_text(const char *s) {
    if (!s) return json_null();
    const unsigned char *p = (const unsigned char *)s;
    size_t bad = 0, len = 0;
    for (size_t k; p[len]; len += k)
        if (!(k = utf8_seq(p + len))) k = 1, bad++;
    if (!bad) return json_stringn(s, len);
    char *t = malloc(len + 2 * bad + 1), *q = t;   /* U+FFFD is 3 bytes for 1 */
    if (!t) return NULL;
    for (size_t i = 0, k; i < len; i += k) {
        if ((k = utf8_seq(p + i))) {
            memcpy(q, p + i, k), q += k;
        } else {
            memcpy(q, "\xef\xbf\xbd", 3), q += 3, k = 1;
        }
    }
    json_t *v = json_stringn(t, (size_t)(q - t));
    free(t);
    return v;
}

/* ---- the writer ------------------------------------------------------------ */

static void jw_sep(jw *w) {
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    /* (the commands nest 4 deep at most; deeper levels would share the last count) */
    const int d = w->depth < JW_MAX_DEPTH ? w->depth : JW_MAX_DEPTH;
    if (d > 0 && w->count[d - 1]++) fputs(", ", stdout);
}

static void jw_open(jw *w, char c) {
    jw_sep(w);
    putchar(c);
    if (w->depth < JW_MAX_DEPTH) w->count[w->depth] = 0;
    w->depth++;
}

void jw_object(jw *w) { jw_open(w, '{'); }
void jw_array(jw *w) { jw_open(w, '['); }

void jw_end(jw *w, char c) {
    putchar(c);
    if (w->depth > 0) w->depth--;
}

void jw_value(jw *w, const json_t *v) {
    jw_sep(w);
    /* NULL (out of memory): null keeps the document valid; the command's
     * exit still reports a failed write only if stdout fails */
    if (!v || json_dumpf(v, stdout, JSON_ENCODE_ANY | JSON_ENSURE_ASCII)) fputs("null", stdout);
}

void jw_string(jw *w, const char *s) {
    json_t *v = json_text(s);
    jw_value(w, v);
    json_decref(v);
}

void jw_key(jw *w, const char *k) {
    jw_string(w, k);
    fputs(": ", stdout);
    w->after_key = 1;
}

void jw_int(jw *w, long long v) {
    jw_sep(w);
    printf("%lld", v);
}

void jw_real(jw *w, const char *fmt, double v) {
    jw_sep(w);
    if (isfinite(v)) printf(fmt, v);
    else fputs("null", stdout);   /* JSON has no NaN nor infinity */
}

void jw_null(jw *w) {
    jw_sep(w);
    fputs("null", stdout);
}

void jw_line(jw *w) {
    (void)w;
    putchar('\n');
}
