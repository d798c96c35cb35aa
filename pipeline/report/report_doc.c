/* The report's two-format document (see report_doc.h). */
#include "pipeline/report/report_doc.h"

#include <stdarg.h>
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

void doc_heading(Doc *d, int level, const char *text) {
    for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
    sb_puts(&d->md, " ");
    md_escape(&d->md, text);
    sb_puts(&d->md, "\n\n");
    sb_printf(&d->html, "<h%d>", level);
    sb_put_escaped(&d->html, text);
    sb_printf(&d->html, "</h%d>\n", level);
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
    for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
    sb_puts(&d->md, " ");
    md_escape(&d->md, summary);
    sb_puts(&d->md, "\n\n");
    sb_printf(&d->html, "<details><summary><h%d>", level);
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
