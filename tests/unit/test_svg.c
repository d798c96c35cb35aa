/* SVG writers: well-formed output, the heat map's orientation (layer 0 at the bottom), colour scale from 0 to the
 * map max, escaped labels and colour bar; the line plot's series, legend and handling of non-finite points; the
 * interval plot's bars and log axis; legends beside the plot area, clear of every plotted point. */
#include <check.h>
#include <math.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/svg.h"
#include "tests/unit/xml_check.h"
#include "tests/unit/suite_runner.h"

/* The y attribute of the first <rect> whose <title> starts with `title`. */
static int rect_y(const char *svg, const char *title) {
    const char *t = strstr(svg, title);
    ck_assert_msg(t != NULL, "no cell titled %s", title);
    const char *r = t;
    while (r > svg && strncmp(r, "<rect", 5) != 0) r--;
    const char *y = strstr(r, " y=\"");
    ck_assert(y && y < t);
    return atoi(y + 4);
}

/* The smallest x of the legend's elements and the largest x of any polyline point: a legend column right of the
 * plot leaves the first above the second. */
static double legend_left(const char *svg) {
    const char *g = strstr(svg, "<g class=\"legend\">");
    ck_assert_msg(g != NULL, "no legend group");
    const char *end = strstr(g, "</g>");
    double m = INFINITY;
    for (const char *x = strstr(g, " x"); x && x < end; x = strstr(x + 1, " x")) {
        if (!(x[2] == '=' || ((x[2] == '1' || x[2] == '2') && x[3] == '='))) continue;
        m = fmin(m, atof(strchr(x, '"') + 1));
    }
    ck_assert_msg(isfinite(m), "the legend has no x coordinates");
    return m;
}
static double polylines_right(const char *svg) {
    double m = -INFINITY;
    for (const char *pl = strstr(svg, "points=\""); pl; pl = strstr(pl + 1, "points=\"")) {
        const char *e = strchr(pl + 8, '"');
        for (const char *c = pl + 8; c < e;) {
            m = fmax(m, atof(c));
            c = strchr(c, ' ');
            if (!c || c >= e) break;
            c++;
        }
    }
    ck_assert_msg(isfinite(m), "no polyline points");
    return m;
}

START_TEST(heatmap_structure) {
    enum { R = 5, C = 7 };
    double v[R * C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) v[r * C + c] = c == 0 ? 0.0 : 0.3 * r + 0.01 * c;
    const char *labels[C] = {"\xE2\x96\x81Q", ":", "<b>", "a&b", "\"", "\xE2\x96\x81" "A", ":"};
    HeatmapStyle st = {"map & <title>", "input token", "layer", "L2 distance", 5, 0};
    StrBuf b;
    sb_init(&b);
    svg_heatmap(&b, v, R, C, labels, &st);
    char why[256];
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "not well-formed: %s\n%s", why, b.data);
    ck_assert(strncmp(b.data, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39) == 0);
    /* one <rect> per cell with a <title> */
    ck_assert_int_eq(count_substr(b.data, "<title>layer "), R * C);
    /* labels escaped, never raw */
    ck_assert(strstr(b.data, "&lt;b&gt;") && strstr(b.data, "a&amp;b") && strstr(b.data, "&quot;"));
    ck_assert(strstr(b.data, "map &amp; &lt;title&gt;"));
    /* layer 0 drawn below layer R-1 (larger y in SVG coordinates) */
    ck_assert_int_gt(rect_y(b.data, "<title>layer 0, position 3"), rect_y(b.data, "<title>layer 4, position 3"));
    /* own colour scale: the maximum cell is the top colour, zero cells the bottom colour */
    char top[8], bottom[8];
    svg_colour(1.0, top);
    svg_colour(0.0, bottom);
    ck_assert_str_eq(top, "#fde725");
    ck_assert_str_eq(bottom, "#440154");
    const char *maxcell = strstr(b.data, "<title>layer 4, position 6");
    const char *r = maxcell;
    while (strncmp(r, "<rect", 5) != 0) r--;
    ck_assert(strstr(r, "fill=\"#fde725\"") && strstr(r, "fill=\"#fde725\"") < maxcell);
    const char *zero = strstr(b.data, "<title>layer 2, position 0");
    r = zero;
    while (strncmp(r, "<rect", 5) != 0) r--;
    ck_assert(strstr(r, "fill=\"#440154\"") && strstr(r, "fill=\"#440154\"") < zero);
    /* colour bar: a gradient and the max tick (1.26 = 0.3*4 + 0.06) */
    ck_assert(strstr(b.data, "<linearGradient") != NULL);
    ck_assert_msg(strstr(b.data, ">1.26</text>") != NULL, "no max tick");
    /* answer-position marker */
    ck_assert(strstr(b.data, "stroke-dasharray") != NULL);
    sb_free(&b);
}
END_TEST

/* A map of 36 columns asked to fit 296 px (one of four side by side): exactly that wide, every cell still drawn and
 * titled with its token, every 4th column labelled (5 px cells: rotated 11 px labels need about 16 px), the long title
 * and x label wrapped onto lines that fit, no text smaller than 11 px. */
START_TEST(heatmap_compact_fits_its_width) {
    enum { R = 4, C = 36 };
    double v[R * C];
    char names[C][16]; /* "t" and any int: no truncation warning */
    const char *labels[C];
    for (int c = 0; c < C; c++) {
        snprintf(names[c], sizeof names[c], "t%d", c);
        labels[c] = names[c];
        for (int r = 0; r < R; r++) v[r * C + c] = 0.01 * (r + c);
    }
    HeatmapStyle st = {"moeut_answer.seed2: WRONG, depth 0.812",
                       "question position (share of the question), then the answer-predicting positions", "layer",
                       "L2 distance", 33, 296};
    StrBuf b;
    sb_init(&b);
    svg_heatmap(&b, v, R, C, labels, &st);
    char why[256];
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "not well-formed: %s\n%s", why, b.data);
    ck_assert_msg(strstr(b.data, "width=\"296\"") && strstr(b.data, "viewBox=\"0 0 296 "), "%.200s", b.data);
    ck_assert_int_eq(count_substr(b.data, "<title>layer "), R * C);
    ck_assert(strstr(b.data, "position 1 (t1): "));
    ck_assert(strstr(b.data, ">t0</text>") && strstr(b.data, ">t4</text>") && strstr(b.data, ">t32</text>"));
    ck_assert(!strstr(b.data, ">t1</text>") && !strstr(b.data, ">t3</text>") && !strstr(b.data, ">t33</text>"));
    /* cells of 5 px: 296 less the margins (36 left, 8 + 10 for the bar, about 51 for its ticks and label) over 36 */
    ck_assert_msg(strstr(b.data, "<rect x=\"36\" y=\"") && strstr(b.data, "width=\"5\" height=\"36\""), "%.600s",
                  b.data);
    /* the title on two lines, the x label on three at most; every text at 11 px or more */
    ck_assert(strstr(b.data, ">moeut_answer.seed2: WRONG, depth</text>") && strstr(b.data, ">0.812</text>"));
    ck_assert(strstr(b.data, ">question position (share of the question),</text>") &&
              strstr(b.data, ">then the answer-predicting positions</text>"));
    for (const char *f = strstr(b.data, "font-size=\""); f; f = strstr(f + 1, "font-size=\""))
        ck_assert_msg(atoi(f + 11) >= 11, "a text at %d px", atoi(f + 11));
    /* each text line fits the width: about 0.6 em per character (0.65 em bold) */
    for (const char *t = strstr(b.data, "<text x=\""); t; t = strstr(t + 1, "<text x=\"")) {
        const char *open = strchr(t, '>'), *close = strstr(t, "</text>");
        const int bold = strstr(t, "font-weight") && strstr(t, "font-weight") < open;
        const double per_char = bold ? 0.65 * 12 : 0.6 * 11;
        ck_assert_msg(atoi(t + 9) + per_char * (double)(close - open - 1) <= 296, "a text line too long: %.*s",
                      (int)(close - t), t);
    }
    sb_free(&b);
}
END_TEST

START_TEST(heatmap_all_zero_and_colours) {
    double v[6] = {0};
    StrBuf b;
    sb_init(&b);
    svg_heatmap(&b, v, 2, 3, NULL, NULL);
    char why[256];
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(count_substr(b.data, "fill=\"#440154\""), 6);
    sb_free(&b);
    char c[8];
    svg_colour(NAN, c);
    ck_assert_str_eq(c, "#808080");
    svg_colour(-3, c);
    ck_assert_str_eq(c, "#440154");
    svg_colour(7, c);
    ck_assert_str_eq(c, "#fde725");
}
END_TEST

START_TEST(line_plot) {
    double x1[4] = {0, 10, 20, 30}, y1[4] = {6.0, 3.0, NAN, 1.0};
    double x2[3] = {0, 15, 30}, y2[3] = {5.0, 2.5, 0.5};
    SvgSeries s[2] = {{"run <a>", x1, y1, 4}, {"run b", x2, y2, 3}};
    LinePlotStyle st = {"loss & curves", "step", "loss", 0, 0, 0};
    StrBuf b;
    sb_init(&b);
    svg_line_plot(&b, s, 2, &st);
    char why[256];
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s\n%s", why, b.data);
    ck_assert_int_eq(count_substr(b.data, "<polyline"), 2);
    ck_assert(strstr(b.data, "run &lt;a&gt;") && strstr(b.data, "loss &amp; curves"));
    /* every polyline holds only numbers (no "nan"/"inf" from the skipped point) */
    for (const char *pl = strstr(b.data, "points=\""); pl; pl = strstr(pl + 1, "points=\"")) {
        const char *e = strchr(pl + 8, '"');
        for (const char *c = pl + 8; c < e; c++) ck_assert_msg(strchr("0123456789.,- ", *c) != NULL, "bad point text");
    }
    /* first polyline: 3 finite points */
    const char *pts = strstr(b.data, "points=\"");
    const char *end = strchr(pts + 8, '"');
    int commas = 0;
    for (const char *p = pts; p < end; p++) commas += *p == ',';
    ck_assert_int_eq(commas, 3);
    /* the legend stands beside the plot area: right of every point, and the figure widened for it */
    ck_assert_msg(legend_left(b.data) > polylines_right(b.data), "legend at %g, points up to %g", legend_left(b.data),
                  polylines_right(b.data));
    ck_assert(strstr(b.data, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"") &&
              atoi(strstr(b.data, "width=\"") + 7) > 640);
    sb_free(&b);
    /* log axis and the empty plot are well-formed too */
    st.log_y = 1;
    sb_init(&b);
    svg_line_plot(&b, s, 2, &st);
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s", why);
    ck_assert(strstr(b.data, "(log scale)"));
    sb_free(&b);
    sb_init(&b);
    svg_line_plot(&b, NULL, 0, NULL);
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s", why);
    ck_assert(strstr(b.data, "no data"));
    sb_free(&b);
}
END_TEST

START_TEST(strbuf_growth_and_save) {
    StrBuf b;
    sb_init(&b);
    for (int i = 0; i < 10000; i++) sb_printf(&b, "%d,", i);
    ck_assert(b.len == strlen(b.data));
    ck_assert(strncmp(b.data + b.len - 5, "9999,", 5) == 0);
    char path[128], err[256];
    snprintf(path, sizeof path, "/tmp/test_svg.%d.svg", (int)getpid());
    ck_assert_int_eq(sb_save(&b, path, err, sizeof err), 0);
    FILE *f = fopen(path, "rb");
    ck_assert(f);
    fseek(f, 0, SEEK_END);
    ck_assert_int_eq(ftell(f), (long)b.len);
    fclose(f);
    unlink(path);
    sb_free(&b);
}
END_TEST

START_TEST(interval_plot) {
    /* two lines over a 100x span of x: a log axis; a point without an interval has no bar; NaN y is skipped */
    double x1[3] = {1e-4, 1e-3, 1e-2}, y1[3] = {0.2, 0.5, 0.4}, lo1[3] = {0.1, 0.4, NAN}, hi1[3] = {0.3, 0.6, NAN};
    double x2[3] = {1e-4, 1e-3, 1e-2}, y2[3] = {0.1, NAN, 0.3};
    SvgIntervalSeries s[2] = {{"d_model=32", x1, y1, lo1, hi1, 3}, {"d_model=<64>", x2, y2, NULL, NULL, 3}};
    IntervalPlotStyle st = {"acc vs lr", "train.lr", "accuracy", 1};
    StrBuf b;
    sb_init(&b);
    svg_interval_plot(&b, s, 2, &st);
    char why[256];
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s\n%s", why, b.data);
    ck_assert_int_eq(count_substr(b.data, "<polyline"), 2);
    ck_assert_int_eq(count_substr(b.data, "<circle"), 3 + 2);
    ck_assert_int_eq(count_substr(b.data, "<path d=\"M"), 2); /* bars for the two points with an interval */
    ck_assert(strstr(b.data, "train.lr (log scale)") && strstr(b.data, "d_model=&lt;64&gt;"));
    /* log ticks at the powers of ten: 0.0001, 0.001, 0.01 */
    ck_assert(strstr(b.data, ">0.0001</text>") && strstr(b.data, ">0.001</text>") && strstr(b.data, ">0.01</text>"));
    /* equal spacing on the log axis: the x of the three circles of the first line */
    double cx[3];
    const char *c = b.data;
    for (int i = 0; i < 3; i++) {
        c = strstr(c, "<circle cx=\"");
        ck_assert(c);
        cx[i] = atof(c + 12);
        c++;
    }
    ck_assert_msg(fabs((cx[1] - cx[0]) - (cx[2] - cx[1])) < 0.2, "log spacing %g %g %g", cx[0], cx[1], cx[2]);
    ck_assert(legend_left(b.data) > polylines_right(b.data));
    sb_free(&b);
    /* a linear axis, and no data at all */
    st.log_x = 0;
    sb_init(&b);
    svg_interval_plot(&b, s, 2, &st);
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s", why);
    ck_assert(!strstr(b.data, "(log scale)"));
    sb_free(&b);
    sb_init(&b);
    svg_interval_plot(&b, NULL, 0, NULL);
    ck_assert_msg(xml_check(b.data, 0, why, sizeof why) == 0, "%s", why);
    ck_assert(strstr(b.data, "no data"));
    sb_free(&b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("svg");
    TCase *tc = tcase_create("svg");
    tcase_add_test(tc, heatmap_structure);
    tcase_add_test(tc, heatmap_compact_fits_its_width);
    tcase_add_test(tc, heatmap_all_zero_and_colours);
    tcase_add_test(tc, line_plot);
    tcase_add_test(tc, interval_plot);
    tcase_add_test(tc, strbuf_growth_and_save);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
