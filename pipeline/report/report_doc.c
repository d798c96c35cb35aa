/* The report's two-format document (see report_doc.h). */
#include "pipeline/report/report_doc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/base/log.h"

void md_escape(StrBuf *b, const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '|') sb_puts(b, "\\|");
        else if (*p == '\n') sb_puts(b, " ");
        else {
            char one[2] = {*p, 0};
            sb_puts(b, one);
        }
    }
}

void doc_anchor_slug(const char *text, char *out, size_t cap) {
    size_t o = 0;
    for (const char *p = text; *p && o + 1 < cap; p++) {
        const unsigned char c = (unsigned char)*p;
        if (c >= 'A' && c <= 'Z') out[o++] = (char)(c - 'A' + 'a');
        else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') out[o++] = (char)c;
        else if (c == ' ') out[o++] = '-';
    }
    out[o] = '\0';
    if (o == 0) snprintf(out, cap, "section");
}

/* The heading's id, unique among the anchors recorded so far, and recorded with it. */
static void anchor_add(Doc *d, int level, const char *text, char *id, size_t cap) {
    char base[256];
    doc_anchor_slug(text, base, sizeof base);
    snprintf(id, cap, "%s", base);
    DocAnchors *a = d->anchors;
    if (!a) return;
    for (int k = 1;; k++) {
        bool taken = false;
        for (int i = 0; i < a->n && !taken; i++) taken = strcmp(a->id[i], id) == 0;
        if (!taken) break;
        snprintf(id, cap, "%s-%d", base, k);
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 32;
        a->level = xrealloc(a->level, (size_t)a->cap * sizeof *a->level);
        a->text = xrealloc(a->text, (size_t)a->cap * sizeof *a->text);
        a->id = xrealloc(a->id, (size_t)a->cap * sizeof *a->id);
    }
    a->level[a->n] = level;
    a->text[a->n] = xstrdup(text);
    a->id[a->n++] = xstrdup(id);
}

void doc_anchors_free(DocAnchors *a) {
    for (int i = 0; i < a->n; i++) {
        free(a->text[i]);
        free(a->id[i]);
    }
    free(a->level);
    free(a->text);
    free(a->id);
    memset(a, 0, sizeof *a);
}

void doc_heading(Doc *d, int level, const char *text) {
    char id[300];
    anchor_add(d, level, text, id, sizeof id);
    for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
    sb_puts(&d->md, " ");
    md_escape(&d->md, text);
    sb_puts(&d->md, "\n\n");
    sb_printf(&d->html, "<h%d id=\"%s\">", level, id);
    sb_put_escaped(&d->html, text);
    sb_printf(&d->html, "</h%d>\n", level);
}

void doc_toc(Doc *d, const DocAnchors *a, int from, int to, int max_level) {
    sb_puts(&d->md, "**Contents**\n\n");
    sb_puts(&d->html, "<nav class=\"toc\"><b>Contents:</b> ");
    int shown = 0;
    for (int i = from; i < to && i < a->n; i++) {
        if (a->level[i] > max_level) continue;
        sb_puts(&d->md, "- [");
        md_escape(&d->md, a->text[i]);
        sb_printf(&d->md, "](#%s)\n", a->id[i]);
        if (shown++) sb_puts(&d->html, " \u00b7 ");
        sb_printf(&d->html, "<a href=\"#%s\">", a->id[i]);
        sb_put_escaped(&d->html, a->text[i]);
        sb_puts(&d->html, "</a>");
    }
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</nav>\n");
}

void doc_para(Doc *d, const char *fmt, ...) {
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    sb_puts(&d->md, text);
    sb_puts(&d->md, "\n\n");
    sb_puts(&d->html, "<p>");
    sb_put_escaped(&d->html, text);
    sb_puts(&d->html, "</p>\n");
}

void doc_list_begin(Doc *d) { sb_puts(&d->html, "<ul>\n"); }
void doc_list_item(Doc *d, const char *fmt, ...) {
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    sb_puts(&d->md, "- ");
    sb_puts(&d->md, text);
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "<li>");
    sb_put_escaped(&d->html, text);
    sb_puts(&d->html, "</li>\n");
}
void doc_list_end(Doc *d) {
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</ul>\n");
}

void doc_table_row(Doc *d, int n, const char *const *cells, bool header) {
    sb_puts(&d->md, "|");
    sb_puts(&d->html, "<tr>");
    for (int i = 0; i < n; i++) {
        sb_puts(&d->md, " ");
        md_escape(&d->md, cells[i]);
        sb_puts(&d->md, " |");
        sb_puts(&d->html, header ? "<th>" : "<td>");
        sb_put_escaped(&d->html, cells[i]);
        sb_puts(&d->html, header ? "</th>" : "</td>");
    }
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</tr>\n");
    if (header) {
        sb_puts(&d->md, "|");
        for (int i = 0; i < n; i++) sb_puts(&d->md, i == 0 ? "---|" : "---:|");
        sb_puts(&d->md, "\n");
    }
}
void doc_table_row_titled(Doc *d, int n, const char *const *cells, const char *const *full) {
    sb_puts(&d->md, "|");
    sb_puts(&d->html, "<tr>");
    for (int i = 0; i < n; i++) {
        sb_puts(&d->md, " ");
        md_escape(&d->md, full[i] ? full[i] : cells[i]);
        sb_puts(&d->md, " |");
        if (full[i] && strcmp(full[i], cells[i]) != 0) {
            sb_puts(&d->html, "<td title=\"");
            sb_put_escaped(&d->html, full[i]);
            sb_puts(&d->html, "\">");
        } else {
            sb_puts(&d->html, "<td>");
        }
        sb_put_escaped(&d->html, cells[i]);
        sb_puts(&d->html, "</td>");
    }
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</tr>\n");
}

void doc_details_begin(Doc *d, int level, const char *summary) {
    char id[300];
    anchor_add(d, level, summary, id, sizeof id);
    for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
    sb_puts(&d->md, " ");
    md_escape(&d->md, summary);
    sb_puts(&d->md, "\n\n");
    sb_printf(&d->html, "<details><summary><h%d id=\"%s\">", level, id);
    sb_put_escaped(&d->html, summary);
    sb_printf(&d->html, "</h%d></summary>\n", level);
}
void doc_details_end(Doc *d) { sb_puts(&d->html, "</details>\n"); }

void doc_append(Doc *d, const Doc *part) {
    sb_puts(&d->md, part->md.data);
    sb_puts(&d->html, part->html.data);
    d->n_figures += part->n_figures;
}

void doc_table_begin(Doc *d, int n, const char *const *headers) {
    sb_puts(&d->html, "<div class=\"tw\"><table>\n");
    doc_table_row(d, n, headers, true);
}
void doc_table_end(Doc *d) {
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</table></div>\n");
}

void doc_pre(Doc *d, const char *text) {
    sb_puts(&d->md, "```\n");
    sb_puts(&d->md, text);
    if (text[0] && text[strlen(text) - 1] != '\n') sb_puts(&d->md, "\n");
    sb_puts(&d->md, "```\n\n");
    sb_puts(&d->html, "<pre>");
    sb_put_escaped(&d->html, text);
    sb_puts(&d->html, "</pre>\n");
}

/* Saves the figure as <out>/<file> (linked from the Markdown) and inlines it into the HTML. */
void doc_figure(Doc *d, const char *file, const StrBuf *svg, const char *caption) {
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/%s", d->out_dir, file);
    if (sb_save(svg, path, err, sizeof err)) die("%s", err);
    sb_puts(&d->md, "![");
    md_escape(&d->md, caption);
    sb_printf(&d->md, "](%s)\n\n*", file);
    md_escape(&d->md, caption);
    sb_puts(&d->md, "*\n\n");
    sb_puts(&d->html, "<figure>");
    sb_puts(&d->html, svg->data);
    sb_puts(&d->html, "<figcaption>");
    sb_put_escaped(&d->html, caption);
    sb_puts(&d->html, "</figcaption></figure>\n");
    d->n_figures++;
}

/* ---------------------------------------------------------------- formatting helpers ----------------------- */

void fmt_acc(char *out, size_t n, double acc, const double ci[2], long count) {
    snprintf(out, n, "%.1f%% [%.1f, %.1f] (n=%ld)", 100 * acc, 100 * ci[0], 100 * ci[1], count);
}

void fmt_big(char *out, size_t n, double v) {
    if (v >= 1e9) snprintf(out, n, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(out, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(out, n, "%.1fk", v / 1e3);
    else snprintf(out, n, "%.0f", v);
}

const char *arch_label(const char *arch) {
    return strcmp(arch, "dense") == 0 ? "Transformer" : strcmp(arch, "moe") == 0 ? "MoE Transformer" : "MoEUT";
}
const char *mode_label(const char *mode) { return strcmp(mode, "qa") == 0 ? "Q+A" : "answer-only"; }

void doc_figure_row(Doc *d, int n, const char *const *files, const StrBuf *const *svgs, const char *const *headers,
                    const char *caption) {
    char err[1024];
    sb_puts(&d->md, "|");
    for (int i = 0; i < n; i++) {
        sb_puts(&d->md, " ");
        md_escape(&d->md, headers[i]);
        sb_puts(&d->md, " |");
    }
    sb_puts(&d->md, "\n|");
    for (int i = 0; i < n; i++) sb_puts(&d->md, "---|");
    sb_puts(&d->md, "\n|");
    sb_puts(&d->html, "<figure><div class=\"figrow\">");
    for (int i = 0; i < n; i++) {
        if (!svgs[i]) {
            sb_puts(&d->md, " - |");
            sb_puts(&d->html, "<div>(none)</div>");
            continue;
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", d->out_dir, files[i]);
        if (sb_save(svgs[i], path, err, sizeof err)) die("%s", err);
        sb_printf(&d->md, " ![%s](%s) |", headers[i], files[i]);
        sb_puts(&d->html, "<div>");
        sb_puts(&d->html, svgs[i]->data);
        sb_puts(&d->html, "</div>");
        d->n_figures++;
    }
    sb_puts(&d->md, "\n\n*");
    md_escape(&d->md, caption);
    sb_puts(&d->md, "*\n\n");
    sb_puts(&d->html, "</div><figcaption>");
    sb_put_escaped(&d->html, caption);
    sb_puts(&d->html, "</figcaption></figure>\n");
}
