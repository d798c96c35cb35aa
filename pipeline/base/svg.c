/* SVG text generation: heat maps for the depth analysis and line plots for the loss curves. */
#include "pipeline/base/svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"

/* ---------------------------------------------------------------- string buffer ---------------------------- */

void sb_init(StrBuf *b) {
    b->cap = 4096;
    b->len = 0;
    b->data = xmalloc(b->cap);
    b->data[0] = '\0';
}

void sb_free(StrBuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static void sb_reserve(StrBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    while (b->len + extra + 1 > b->cap) b->cap *= 2;
    b->data = xrealloc(b->data, b->cap);
}

void sb_puts(StrBuf *b, const char *s) {
    size_t n = strlen(s);
    sb_reserve(b, n);
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void sb_printf(StrBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) die("sb_printf: invalid format \"%s\"", fmt);
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_put_escaped(StrBuf *b, const char *s) {
    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '&': sb_puts(b, "&amp;"); break;
        case '<': sb_puts(b, "&lt;"); break;
        case '>': sb_puts(b, "&gt;"); break;
        case '"': sb_puts(b, "&quot;"); break;
        case '\'': sb_puts(b, "&#39;"); break;
        default: {
            /* Control characters are not allowed in XML 1.0 text: show them as U+FFFD. */
            unsigned char c = (unsigned char)*p;
            if (c < 0x20 && c != '\t' && c != '\n') sb_puts(b, "\xEF\xBF\xBD");
            else {
                char one[2] = {*p, 0};
                sb_puts(b, one);
            }
        }
        }
    }
}

int sb_save(const StrBuf *b, const char *path, char *err, size_t errlen) {
    return write_file_atomic(path, b->data, b->len, err, errlen);
}

/* ---------------------------------------------------------------- colour map ------------------------------- */

/* Nine anchors sampled from matplotlib's viridis (the default colour map of the paper's imshow), interpolated
 * linearly in RGB. */
static const double VIRIDIS[9][3] = {
    {68, 1, 84},    {71, 44, 122},  {59, 81, 139},  {44, 113, 142}, {33, 144, 141},
    {39, 173, 129}, {92, 200, 99},  {170, 220, 50}, {253, 231, 37},
};

void svg_colour(double v, char out[8]) {
    if (isnan(v)) {
        snprintf(out, 8, "#%02x%02x%02x", 128, 128, 128);
        return;
    }
    if (v < 0) v = 0;
    if (v > 1) v = 1;
    double pos = v * 8.0;
    int i = (int)floor(pos);
    if (i >= 8) i = 7;
    double f = pos - i;
    int rgb[3];
    for (int c = 0; c < 3; c++) rgb[c] = (int)lround(VIRIDIS[i][c] * (1 - f) + VIRIDIS[i + 1][c] * f);
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* A number with few significant digits for tick labels. */
static void fmt_tick(double v, char *out, size_t n) {
    if (v == 0) snprintf(out, n, "0");
    else if (fabs(v) >= 1e5 || fabs(v) < 1e-3) snprintf(out, n, "%.2g", v);
    else snprintf(out, n, "%.4g", v);
}

/* ---------------------------------------------------------------- heat map --------------------------------- */

void svg_heatmap(StrBuf *b, const double *values, int rows, int cols, const char *const *col_labels,
                 const HeatmapStyle *style) {
    svg_heatmap_scaled(b, values, rows, cols, col_labels, style, 0.0);
}

/* The drawn width of text at font size px: about 0.6 em per character of sans-serif (0.65 em bold), a UTF-8
 * continuation byte not counted. */
static double text_px(const char *s, size_t n, double px, bool bold) {
    size_t chars = 0;
    for (size_t i = 0; i < n && s[i]; i++) chars += ((unsigned char)s[i] & 0xC0) != 0x80;
    return (double)chars * px * (bold ? 0.65 : 0.6);
}

/* Breaks text at spaces into at most max_lines lines of at most max_px (a word longer than that stands alone);
 * each line is (start, length) into text. Returns the number of lines; text past the last line is dropped. */
static int wrap_lines(const char *text, double px, bool bold, double max_px, int max_lines, const char **start,
                      size_t *len) {
    int n = 0;
    const char *p = text;
    while (*p && n < max_lines) {
        while (*p == ' ') p++;
        if (!*p) break;
        size_t take = strcspn(p, " "); /* the first word, whatever its width */
        for (;;) {
            const size_t next = take + strspn(p + take, " ");
            if (!p[next]) break;
            const size_t word = strcspn(p + next, " ");
            if (text_px(p, next + word, px, bold) > max_px) break;
            take = next + word;
        }
        start[n] = p;
        len[n++] = take;
        p += take;
    }
    return n;
}

static void put_lines(StrBuf *b, const char *const *start, const size_t *len, int n, double x, double y0, double dy,
                      const char *attrs) {
    for (int i = 0; i < n; i++) {
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len[i] < sizeof line ? len[i] : sizeof line - 1), start[i]);
        sb_printf(b, "<text x=\"%.0f\" y=\"%.0f\"%s>", x, y0 + i * dy, attrs);
        sb_put_escaped(b, line);
        sb_puts(b, "</text>\n");
    }
}

void svg_heatmap_scaled(StrBuf *b, const double *values, int rows, int cols, const char *const *col_labels,
                        const HeatmapStyle *style, double scale_max) {
    double vmax = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        if (isfinite(values[i]) && values[i] > vmax) vmax = values[i];
    /* Own colour scale from 0 to the map max, or the caller's (values above it saturate). */
    const double scale = scale_max > 0 ? scale_max : (vmax > 0 ? vmax : 1.0);
    const double bar_top = scale_max > 0 ? scale_max : vmax;
    const int clipped = scale_max > 0 && vmax > scale_max;
    const bool compact = style && style->max_width > 0;

    const int ch = rows <= 8 ? 36 : (rows <= 24 ? 18 : (rows <= 48 ? 10 : 6));    /* few layers: taller rows */
    /* The colour bar's ticks: 0, half and the top ("\u2265top" when brighter cells saturate); compact with 3
     * significant digits. */
    char ticks[3][48];
    double tick_w = 0;
    for (int k = 0; k <= 2; k++) {
        char t[32];
        if (compact && bar_top * k / 2.0 != 0) snprintf(t, sizeof t, "%.3g", bar_top * k / 2.0);
        else fmt_tick(bar_top * k / 2.0, t, sizeof t);
        snprintf(ticks[k], sizeof ticks[k], "%s%s", k == 2 && clipped ? "\u2265" : "", t);
        tick_w = fmax(tick_w, text_px(ticks[k], strlen(ticks[k]), 11, false));
    }
    /* Compact: narrow margins, the colour bar's label right of its ticks, and the cells as wide as the rest allows. */
    const int left = compact ? 36 : 70, bar_gap = compact ? 8 : 24, bar_w = compact ? 10 : 16;
    const int bar_label_dx = compact ? 6 + (int)ceil(tick_w) + 10 : 60; /* from the bar's right edge */
    const int right = compact ? bar_label_dx + 8 : 90;
    int cw = cols > 0 ? (cols <= 32 ? 24 : (cols <= 64 ? 14 : 9)) : 24; /* cell size in px */
    if (compact) {
        const int room = style->max_width - left - bar_gap - bar_w - right;
        cw = cols > 0 && room / cols < cw ? room / cols : cw;
        if (cw < 2) cw = 2;
    }
    /* Column labels are rotated 45 degrees: 11 px text needs about 16 px between columns, so a narrow map labels
     * every k-th column only. */
    const int label_step = compact && cw < 16 ? (16 + cw - 1) / cw : 1;
    double label_depth = 0; /* how far the rotated labels reach below the plot */
    for (int c = 0; col_labels && c < cols; c += label_step) {
        const double w = text_px(col_labels[c], strlen(col_labels[c]), 11, false) * 0.7071;
        if (w > label_depth) label_depth = w;
    }
    const int plot_w = cols * cw, plot_h = rows * ch;
    int width = left + plot_w + bar_gap + bar_w + right;
    if (compact && width < style->max_width) width = style->max_width;
    /* The title (14 px bold; compact: 12 px, up to two lines) and the x label (compact: up to three lines). */
    const char *title_at[2], *xl_at[3];
    size_t title_len[2], xl_len[3];
    int n_title = 0, n_xl = 0;
    if (style && style->title) {
        if (compact) n_title = wrap_lines(style->title, 12, true, width - left - 4, 2, title_at, title_len);
        else {
            title_at[0] = style->title;
            title_len[0] = strlen(style->title);
            n_title = 1;
        }
    }
    if (style && style->x_label) {
        if (compact) n_xl = wrap_lines(style->x_label, 11, false, width - 8, 3, xl_at, xl_len);
        else {
            xl_at[0] = style->x_label;
            xl_len[0] = strlen(style->x_label);
            n_xl = 1;
        }
    }
    const int top = compact ? 14 + 15 * n_title : 40;
    const int bottom = compact ? 14 + (int)ceil(label_depth) + 14 * n_xl + 6 : 110;
    const int height = top + plot_h + bottom;
    /* Wide enough for the title (about 8 px per character at 14 px bold). */
    if (!compact && style && style->title) {
        int title_w = left + 8 * (int)strlen(style->title) + 20;
        if (title_w > width) width = title_w;
    }

    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height);
    sb_puts(b, "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    if (n_title && !compact) {
        sb_printf(b, "<text x=\"%d\" y=\"22\" font-size=\"14\" font-weight=\"bold\">", left);
        sb_put_escaped(b, style->title);
        sb_puts(b, "</text>\n");
    } else if (n_title)
        put_lines(b, title_at, title_len, n_title, 4, 16, 15, " font-size=\"12\" font-weight=\"bold\"");
    /* Cells: row r at y = top + (rows-1-r)*ch so that row 0 is at the bottom. */
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            double v = values[(size_t)r * cols + c];
            char colour[8];
            svg_colour(isfinite(v) ? v / scale : NAN, colour);
            sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>layer %d, position %d",
                      left + c * cw, top + (rows - 1 - r) * ch, cw, ch, colour, r, c);
            if (col_labels) {
                sb_puts(b, " (");
                sb_put_escaped(b, col_labels[c]);
                sb_puts(b, ")");
            }
            sb_printf(b, ": %.4g</title></rect>\n", v);
        }
    }
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", left, top,
              plot_w, plot_h);
    if (style && style->mark_from_col >= 0 && style->mark_from_col < cols)
        sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#e0301e\" "
                     "stroke-width=\"2\" stroke-dasharray=\"4 2\"/>\n",
                  left + style->mark_from_col * cw, top, (cols - style->mark_from_col) * cw, plot_h);
    /* Row labels (every row when they fit, else every k-th). */
    int row_step = ch >= 10 ? 1 : (ch >= 6 ? 2 : 4);
    for (int r = 0; r < rows; r += row_step)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" dominant-baseline=\"middle\">%d</text>\n", left - 6,
                  top + (rows - 1 - r) * ch + ch / 2, r);
    if (style && style->y_label) {
        sb_printf(b, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">", compact ? 12 : 18,
                  top + plot_h / 2);
        sb_put_escaped(b, style->y_label);
        sb_puts(b, "</text>\n");
    }
    /* Column labels, rotated 45 degrees as in the paper's figures. */
    if (col_labels) {
        for (int c = 0; c < cols; c += label_step) {
            sb_printf(b, "<text transform=\"translate(%d,%d) rotate(-45)\" text-anchor=\"end\">",
                      left + c * cw + cw / 2 + 3, top + plot_h + 10);
            sb_put_escaped(b, col_labels[c]);
            sb_puts(b, "</text>\n");
        }
    }
    if (n_xl && !compact) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", left + plot_w / 2, height - 8);
        sb_put_escaped(b, style->x_label);
        sb_puts(b, "</text>\n");
    } else if (n_xl)
        put_lines(b, xl_at, xl_len, n_xl, 4, height - 8 - 14 * (n_xl - 1), 14, "");
    /* Colour bar: a vertical gradient from 0 (bottom) to the map max (top). */
    const int bx = left + plot_w + bar_gap;
    /* The gradient id must be unique when several maps are inlined into one HTML page, and the same for the same
     * map (reports are byte-reproducible): FNV-1a of the values, shape and title. */
    uint64_t gid = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)values;
    for (size_t i = 0; i < (size_t)rows * cols * sizeof *values; i++) gid = (gid ^ bytes[i]) * 1099511628211ull;
    gid = (gid ^ (uint64_t)rows) * 1099511628211ull;
    gid = (gid ^ (uint64_t)cols) * 1099511628211ull;
    for (const char *t = style && style->title ? style->title : ""; *t; t++) gid = (gid ^ (unsigned char)*t) * 1099511628211ull;
    sb_printf(b, "<defs><linearGradient id=\"cbar%016llx\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">",
              (unsigned long long)gid);
    for (int s = 0; s <= 8; s++) {
        char colour[8];
        svg_colour(s / 8.0, colour);
        sb_printf(b, "<stop offset=\"%.3f\" stop-color=\"%s\"/>", s / 8.0, colour);
    }
    sb_puts(b, "</linearGradient></defs>\n");
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"url(#cbar%016llx)\" stroke=\"black\"/>\n",
              bx, top, bar_w, plot_h, (unsigned long long)gid);
    for (int s = 0; s <= 2; s++) { /* brighter cells exist: the top colour means "this or more" */
        int y = top + plot_h - (int)lround(plot_h * s / 2.0);
        sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>", bx + bar_w, y, bx + bar_w + 4, y);
        sb_printf(b, "<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">%s</text>\n", bx + bar_w + 6, y, ticks[s]);
    }
    if (style && style->bar_label) {
        sb_printf(b, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">", bx + bar_w + bar_label_dx,
                  top + plot_h / 2);
        sb_put_escaped(b, style->bar_label);
        sb_puts(b, "</text>\n");
    }
    sb_puts(b, "</svg>\n");
}

/* ---------------------------------------------------------------- line plot -------------------------------- */

static const char *PALETTE[8] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* Ticks at multiples of a 1/2/5 x 10^k step covering [lo, hi]. Returns the count (<= max). */
static int nice_ticks(double lo, double hi, double *ticks, int max) {
    double range = hi - lo;
    if (!(range > 0)) {
        ticks[0] = lo;
        return 1;
    }
    double raw = range / 5.0, mag = pow(10, floor(log10(raw))), step = mag;
    if (raw / mag > 5) step = 10 * mag;
    else if (raw / mag > 2) step = 5 * mag;
    else if (raw / mag > 1) step = 2 * mag;
    int n = 0;
    for (double t = ceil(lo / step) * step; t <= hi + step * 1e-9 && n < max; t += step) ticks[n++] = fabs(t) < step * 1e-9 ? 0 : t;
    return n;
}

/* The width of a legend column for these names: a 20 px line sample, a gap, and about 6.5 px per character of 11 px
 * sans-serif text (0 without series). */
static int legend_width(const char *const *names, int n) {
    size_t longest = 0;
    for (int i = 0; i < n; i++)
        if (names[i] && strlen(names[i]) > longest) longest = strlen(names[i]);
    return n > 0 ? 40 + (int)(6.5 * (double)longest) : 0;
}

/* The legend in a column beside the plot area (x0: its left edge), so it never covers a curve: one entry per series,
 * 16 px apart, in a <g class="legend">. */
static void draw_legend(StrBuf *b, const char *const *names, int n, int x0, int top) {
    if (n == 0) return;
    sb_puts(b, "<g class=\"legend\">");
    for (int s = 0; s < n; s++) {
        int y = top + 8 + 16 * s;
        sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>", x0, y,
                  x0 + 20, y, PALETTE[s % 8]);
        sb_printf(b, "<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">", x0 + 25, y);
        sb_put_escaped(b, names[s] ? names[s] : "");
        sb_puts(b, "</text>\n");
    }
    sb_puts(b, "</g>\n");
}

void svg_line_plot(StrBuf *b, const SvgSeries *series, int n_series, const LinePlotStyle *style) {
    const char **names = xcalloc((size_t)n_series + 1, sizeof *names);
    for (int s = 0; s < n_series; s++) names[s] = series[s].name;
    const int legend_w = legend_width(names, n_series);
    /* The plot area keeps its size; the legend column widens the figure (and the figure grows for a long legend). */
    const int top = 36, bottom = 50, left = 70, right = 20;
    const int width = (style && style->width > 0 ? style->width : 640) + legend_w;
    const int height_min = top + 8 + 16 * n_series + bottom;
    int height = style && style->height > 0 ? style->height : 360;
    if (height < height_min) height = height_min;
    const int log_y = style && style->log_y;
    const int pw = width - legend_w - left - right, ph = height - top - bottom;

    /* Data bounds over the plottable points. */
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < n_series; s++)
        for (int i = 0; i < series[s].n; i++) {
            double x = series[s].x[i], y = series[s].y[i];
            if (!isfinite(x) || !isfinite(y) || (log_y && y <= 0)) continue;
            double yy = log_y ? log10(y) : y;
            if (x < xmin) xmin = x;
            if (x > xmax) xmax = x;
            if (yy < ymin) ymin = yy;
            if (yy > ymax) ymax = yy;
        }
    const int empty = !(xmin <= xmax);
    if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + 1;
    double ypad = (ymax - ymin) * 0.05;
    ymin -= ypad;
    ymax += ypad;

    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height);
    sb_puts(b, "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    if (style && style->title) {
        sb_printf(b, "<text x=\"%d\" y=\"22\" font-size=\"14\" font-weight=\"bold\">", left);
        sb_put_escaped(b, style->title);
        sb_puts(b, "</text>\n");
    }
#define PX(x) (left + ((x) - xmin) / (xmax - xmin) * pw)
#define PY(y) (top + ph - ((y) - ymin) / (ymax - ymin) * ph)
    /* Grid and ticks. */
    double ticks[32];
    int nt = nice_ticks(xmin, xmax, ticks, 32);
    for (int i = 0; i < nt; i++) {
        char t[32];
        fmt_tick(ticks[i], t, sizeof t);
        double x = PX(ticks[i]);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>", x, top, x, top + ph);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, top + ph + 16, t);
    }
    nt = nice_ticks(ymin, ymax, ticks, 32);
    if (log_y) { /* integer powers of ten inside the range, or the nice ticks of log10 when the range is narrow */
        int k = 0;
        for (double e = ceil(ymin); e <= ymax && k < 32; e += 1) ticks[k++] = e;
        if (k >= 2) nt = k;
    }
    for (int i = 0; i < nt; i++) {
        char t[32];
        fmt_tick(log_y ? pow(10, ticks[i]) : ticks[i], t, sizeof t);
        double y = PY(ticks[i]);
        sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", left, y, left + pw, y);
        sb_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n", left - 6,
                  y, t);
    }
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", left, top, pw,
              ph);
    /* Series: at most ~1500 points each (evenly strided), so long runs keep the report small. */
    for (int s = 0; s < n_series; s++) {
        const SvgSeries *sr = &series[s];
        int stride = sr->n > 1500 ? (sr->n + 1499) / 1500 : 1;
        sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", PALETTE[s % 8]);
        for (int i = 0; i < sr->n; i += stride) {
            double x = sr->x[i], y = sr->y[i];
            if (!isfinite(x) || !isfinite(y) || (log_y && y <= 0)) continue;
            sb_printf(b, "%.1f,%.1f ", PX(x), PY(log_y ? log10(y) : y));
        }
        /* Always include the last point, so the curve ends where the run ended. */
        if (sr->n > 0 && (sr->n - 1) % stride != 0) {
            double x = sr->x[sr->n - 1], y = sr->y[sr->n - 1];
            if (isfinite(x) && isfinite(y) && !(log_y && y <= 0)) sb_printf(b, "%.1f,%.1f ", PX(x), PY(log_y ? log10(y) : y));
        }
        sb_puts(b, "\"/>\n");
    }
#undef PX
#undef PY
    draw_legend(b, names, n_series, left + pw + right, top);
    free(names);
    if (empty)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no data</text>\n", left + pw / 2, top + ph / 2);
    if (style && style->x_label) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", left + pw / 2, height - 10);
        sb_put_escaped(b, style->x_label);
        sb_puts(b, "</text>\n");
    }
    if (style && style->y_label) {
        sb_printf(b, "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">", top + ph / 2);
        sb_put_escaped(b, style->y_label);
        if (log_y) sb_puts(b, " (log scale)");
        sb_puts(b, "</text>\n");
    }
    sb_puts(b, "</svg>\n");
}

/* ---------------------------------------------------------------- interval plot ---------------------------- */

void svg_interval_plot(StrBuf *b, const SvgIntervalSeries *series, int n_series, const IntervalPlotStyle *style) {
    const int log_x = style && style->log_x;
    const char **names = xcalloc((size_t)n_series + 1, sizeof *names);
    for (int s = 0; s < n_series; s++) names[s] = series[s].name;
    const int legend_w = legend_width(names, n_series);
    const int left = 70, right = 20, top = 36, bottom = 50, pw = 480;
    int ph = 300;
    if (ph < 8 + 16 * n_series) ph = 8 + 16 * n_series;
    const int width = left + pw + right + legend_w, height = top + ph + bottom;
#define XV(x) (log_x ? log10(x) : (x))
#define USABLE(x, y) (isfinite(x) && isfinite(y) && !(log_x && (x) <= 0))
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < n_series; s++)
        for (int i = 0; i < series[s].n; i++) {
            const double x = series[s].x[i], y = series[s].y[i];
            if (!USABLE(x, y)) continue;
            xmin = fmin(xmin, XV(x));
            xmax = fmax(xmax, XV(x));
            double lo = series[s].lo ? series[s].lo[i] : NAN, hi = series[s].hi ? series[s].hi[i] : NAN;
            ymin = fmin(ymin, isfinite(lo) ? fmin(lo, y) : y);
            ymax = fmax(ymax, isfinite(hi) ? fmax(hi, y) : y);
        }
    const int empty = !(xmin <= xmax);
    if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (ymin > 0 && ymin < 0.5 * ymax) ymin = 0; /* accuracies: show the distance from 0 unless it hides the spread */
    if (xmax == xmin) xmin -= 0.5, xmax += 0.5;
    if (ymax == ymin) ymax = ymin + 1;
    const double xpad = (xmax - xmin) * 0.06, ypad = (ymax - ymin) * 0.06;
    xmin -= xpad;
    xmax += xpad;
    ymax += ypad;
    if (ymin != 0) ymin -= ypad;
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height);
    sb_puts(b, "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    if (style && style->title) {
        sb_printf(b, "<text x=\"%d\" y=\"22\" font-size=\"14\" font-weight=\"bold\">", left);
        sb_put_escaped(b, style->title);
        sb_puts(b, "</text>\n");
    }
#define PX(v) (left + ((v) - xmin) / (xmax - xmin) * pw)
#define PY(v) (top + ph - ((v) - ymin) / (ymax - ymin) * ph)
    double ticks[32];
    int nt = nice_ticks(xmin, xmax, ticks, 32);
    if (log_x) { /* powers of ten inside the range; at least the ends when the range holds fewer than two */
        int k = 0;
        for (double e = ceil(xmin); e <= xmax && k < 32; e += 1) ticks[k++] = e;
        nt = k;
        if (k < 2) ticks[0] = xmin + xpad, ticks[1] = xmax - xpad, nt = 2;
    }
    for (int i = 0; i < nt; i++) {
        char t[32];
        fmt_tick(log_x ? pow(10, ticks[i]) : ticks[i], t, sizeof t);
        const double x = PX(ticks[i]);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>", x, top, x, top + ph);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, top + ph + 16, t);
    }
    nt = nice_ticks(ymin, ymax, ticks, 32);
    for (int i = 0; i < nt; i++) {
        char t[32];
        fmt_tick(ticks[i], t, sizeof t);
        const double y = PY(ticks[i]);
        sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", left, y, left + pw, y);
        sb_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n",
                  left - 6, y, t);
    }
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", left, top,
              pw, ph);
    for (int s = 0; s < n_series; s++) {
        const SvgIntervalSeries *sr = &series[s];
        const char *colour = PALETTE[s % 8];
        sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", colour);
        for (int i = 0; i < sr->n; i++)
            if (USABLE(sr->x[i], sr->y[i])) sb_printf(b, "%.1f,%.1f ", PX(XV(sr->x[i])), PY(sr->y[i]));
        sb_puts(b, "\"/>\n");
        for (int i = 0; i < sr->n; i++) {
            if (!USABLE(sr->x[i], sr->y[i])) continue;
            const double x = PX(XV(sr->x[i])), lo = sr->lo ? sr->lo[i] : NAN, hi = sr->hi ? sr->hi[i] : NAN;
            if (isfinite(lo) && isfinite(hi))
                sb_printf(b, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"%s\" "
                             "stroke-width=\"1.5\"/>", x, PY(lo), PY(hi), x - 4, PY(lo), x + 4, x - 4, PY(hi), x + 4,
                          colour);
            sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", x, PY(sr->y[i]), colour);
            sb_put_escaped(b, sr->name ? sr->name : "");
            sb_printf(b, " x=%.4g: %.4g", sr->x[i], sr->y[i]);
            if (isfinite(lo) && isfinite(hi)) sb_printf(b, " [%.4g, %.4g]", lo, hi);
            sb_puts(b, "</title></circle>\n");
        }
    }
#undef PX
#undef PY
#undef XV
#undef USABLE
    draw_legend(b, names, n_series, left + pw + right, top);
    free(names);
    if (empty)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no data</text>\n", left + pw / 2, top + ph / 2);
    if (style && style->x_label) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", left + pw / 2, height - 10);
        sb_put_escaped(b, style->x_label);
        if (log_x) sb_puts(b, " (log scale)");
        sb_puts(b, "</text>\n");
    }
    if (style && style->y_label) {
        sb_printf(b, "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">", top + ph / 2);
        sb_put_escaped(b, style->y_label);
        sb_puts(b, "</text>\n");
    }
    sb_puts(b, "</svg>\n");
}
