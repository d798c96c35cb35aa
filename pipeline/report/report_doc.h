/* The report's two-format document: every element is written to both a Markdown and an HTML buffer, so report.md
 * and report.html always say the same. Figures are saved as .svg files beside report.md (linked from it) and inlined
 * into the HTML. Also the small number formatters the report sections share. */
#ifndef PIPELINE_REPORT_DOC_H
#define PIPELINE_REPORT_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/base/svg.h"

typedef struct {
    StrBuf md, html;
    const char *out_dir;
    int n_figures;
} Doc;

void md_escape(StrBuf *b, const char *s);
void doc_heading(Doc *d, int level, const char *text);
void doc_para(Doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void doc_list_begin(Doc *d);
void doc_list_item(Doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void doc_list_end(Doc *d);
void doc_table_begin(Doc *d, int n, const char *const *headers);
void doc_table_row(Doc *d, int n, const char *const *cells, bool header);
void doc_table_end(Doc *d);
/* A table row whose HTML cells show cells[i] with full[i] (when not NULL) as the hover title, and whose Markdown cells
 * show full[i] (the Markdown is text: nothing to hover, and no page width to keep). For hashes and other long values
 * shortened in the HTML so that the table fits the page. */
void doc_table_row_titled(Doc *d, int n, const char *const *cells, const char *const *full);
/* A collapsed block in the HTML (<details> with the summary line); in the Markdown, the summary as a heading of the
 * given level followed by the content. */
void doc_details_begin(Doc *d, int level, const char *summary);
void doc_details_end(Doc *d);
/* Appends another document's text (a section written ahead of where it is placed). */
void doc_append(Doc *d, const Doc *part);
void doc_pre(Doc *d, const char *text);
/* Saves the figure as <out>/<file> (linked from the Markdown) and inlines it into the HTML. Dies on a write error. */
void doc_figure(Doc *d, const char *file, const StrBuf *svg, const char *caption);
/* Several figures side by side: saved like doc_figure; the HTML gets one flex row, the Markdown one table row of
 * image links under the given column headers (so the text stays readable). */
void doc_figure_row(Doc *d, int n, const char *const *files, const StrBuf *const *svgs, const char *const *headers,
                    const char *caption);

/* "12.3% [10.1, 14.8] (n=400)" */
void fmt_acc(char *out, size_t n, double acc, const double ci[2], long count);
/* 1234567 -> "1.23M" */
void fmt_big(char *out, size_t n, double v);
const char *arch_label(const char *arch); /* "dense" -> "Transformer", "moe" -> "MoE Transformer", else "MoEUT" */
const char *mode_label(const char *mode); /* "qa" -> "Q+A", else "answer-only" */

#endif
