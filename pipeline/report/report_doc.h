/* The report's two-format document: every element is written to both a Markdown and an HTML buffer, so report.md
 * and report.html always say the same. Figures are saved as .svg files beside report.md (linked from it) and inlined
 * into the HTML. Also the small number formatters the report sections share. */
#ifndef PIPELINE_REPORT_DOC_H
#define PIPELINE_REPORT_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/base/svg.h"

/* The headings of one document, in the order they were written: each with the anchor id it got, for the table of
 * contents. Shared by the parts of a document written apart (doc_append), so that every id stays unique. */
typedef struct {
    int n, cap;
    int *level;
    char **text, **id;
} DocAnchors;

typedef struct {
    StrBuf md, html;
    const char *out_dir;
    int n_figures;
    DocAnchors *anchors; /* NULL: headings still get ids, unique only by their text */
} Doc;

/* A heading's anchor as GitHub makes it from Markdown, so that a "#id" link works in report.md on GitHub and in
 * report.html alike: lower case, ASCII letters, digits, '-' and '_' kept, each space a '-', everything else dropped
 * ("What's new? (1)" -> "whats-new-1"; "section" when nothing is left). */
void doc_anchor_slug(const char *text, char *out, size_t cap);
void doc_anchors_free(DocAnchors *a);
/* The table of contents: a link to every heading of level <= max_level among the recorded ones [from, to) (the
 * sections it lists): in the Markdown a list under "Contents", in the HTML one <nav> paragraph of links (a few lines
 * at 1280 px, so that it fits the first screen). */
void doc_toc(Doc *d, const DocAnchors *a, int from, int to, int max_level);

void md_escape(StrBuf *b, const char *s);
/* A heading; in the HTML with its anchor id (doc_anchor_slug, "-1", "-2", ... appended to a repeated one, as GitHub
 * does), recorded in d->anchors. */
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

/* The HTML page's text column and the gap between the figures of a row (report_document.c's CSS: body, .figrow):
 * a figure at most doc_row_figure_width(n) px wide stands in one row with n - 1 others at 1280 px. */
#define DOC_PAGE_WIDTH 1220
#define DOC_FIGURE_GAP 8
static inline int doc_row_figure_width(int n) { return (DOC_PAGE_WIDTH - DOC_FIGURE_GAP * (n - 1)) / n; }

/* "12.3% [10.1, 14.8] (n=400)" */
void fmt_acc(char *out, size_t n, double acc, const double ci[2], long count);
/* 1234567 -> "1.23M" */
void fmt_big(char *out, size_t n, double v);
const char *arch_label(const char *arch); /* "dense" -> "Transformer", "moe" -> "MoE Transformer", else "MoEUT" */
const char *mode_label(const char *mode); /* "qa" -> "Q+A", else "answer-only" */

#endif
