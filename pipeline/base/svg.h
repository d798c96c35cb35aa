/* Minimal SVG writers for the reports: a growable text buffer, a heat map (the depth maps) and a line plot (the
 * training-loss curves) and a plot of points with interval bars (sweeps). The output is a bare <svg xmlns=...> element without an XML prolog, so the same text is a
 * valid standalone .svg file and can be inlined into HTML as is. All text is XML-escaped. */
#ifndef PIPELINE_SVG_H
#define PIPELINE_SVG_H

#include <stddef.h>

typedef struct {
    char *data;   /* NUL-terminated */
    size_t len, cap;
} StrBuf;

void sb_init(StrBuf *b);
void sb_free(StrBuf *b);
void sb_puts(StrBuf *b, const char *s);
void sb_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_put_escaped(StrBuf *b, const char *s); /* XML/HTML escape of & < > " ' (valid for text and attributes) */

/* Colour of value v in [0,1] on a perceptually ordered dark-blue -> green -> yellow map (viridis-like), as "#rrggbb".
 * Values outside [0,1] are clamped; NaN maps to grey. */
void svg_colour(double v, char out[8]);

/* Heat map of values[rows, cols] (row-major). Row 0 is drawn at the BOTTOM (layer 0 at the bottom, as the paper).
 * The colour scale runs from 0 to the maximum of the map (its own scale; an all-zero map uses [0,1]).
 * col_labels[cols] (may be NULL) are drawn rotated under the columns; row labels are the row indices.
 * A colour bar with its 0 and max ticks is drawn on the right. */
typedef struct {
    const char *title;
    const char *x_label;  /* e.g. "input token" */
    const char *y_label;  /* e.g. "layer (input of application l)" */
    const char *bar_label; /* e.g. "L2 distance" */
    int mark_from_col;    /* columns >= this are outlined as answer-predicting positions; -1 = none */
    /* > 0: the map is exactly this wide, so that several fit side by side in one row of a page: the cells as wide as
     * the width leaves them (at least 2 px), every k-th column labelled (k such that the rotated labels do not
     * overlap; each cell's label stays in its hover title), the title and axis label wrapped onto short lines, the
     * text still 11 px or more. 0: the natural size (cells 9-24 px wide, every column labelled). */
    int max_width;
} HeatmapStyle;
void svg_heatmap(StrBuf *b, const double *values, int rows, int cols, const char *const *col_labels,
                 const HeatmapStyle *style);
/* The same with a given colour scale 0..scale_max (scale_max <= 0: the map's own maximum). Values above scale_max
 * get the top colour, and the bar's top tick reads "\u2265max", so several maps can share one scale chosen to show
 * a region of small values (the report's question region) while the brighter cells stay visible as saturated. */
void svg_heatmap_scaled(StrBuf *b, const double *values, int rows, int cols, const char *const *col_labels,
                        const HeatmapStyle *style, double scale_max);

/* Line plot of n_series series sharing the axes. Points with non-finite y are skipped. log_y: logarithmic y axis
 * (non-positive values skipped). */
typedef struct {
    const char *name;
    const double *x, *y;
    int n;
} SvgSeries;
typedef struct {
    const char *title, *x_label, *y_label;
    int log_y;
    int width, height;    /* 0 = defaults 640 x 360 */
} LinePlotStyle;
void svg_line_plot(StrBuf *b, const SvgSeries *series, int n_series, const LinePlotStyle *style);

/* Points with 95% interval bars, joined by a line per series (a sweep: accuracy against a config value). lo/hi may
 * be NULL or NaN (no bar). log_x: logarithmic x axis (non-positive x skipped). The legend stands in a column right of
 * the plot area. */
typedef struct {
    const char *name;
    const double *x, *y, *lo, *hi;
    int n;
} SvgIntervalSeries;
typedef struct {
    const char *title, *x_label, *y_label;
    int log_x;
} IntervalPlotStyle;
void svg_interval_plot(StrBuf *b, const SvgIntervalSeries *series, int n_series, const IntervalPlotStyle *style);

/* Writes the buffer atomically to path. Returns 0 or -1 with "<path>: <problem>" in err. */
int sb_save(const StrBuf *b, const char *path, char *err, size_t errlen);

#endif
