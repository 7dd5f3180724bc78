/* t_geo.c -- GEO commands: GEOADD, GEOPOS, GEODIST, GEOHASH, GEOSEARCH,
 * GEOSEARCHSTORE, GEORADIUS, GEORADIUSBYMEMBER (and their _RO forms).
 *
 * A geo key is an ordinary sorted set (t_zset.c) whose scores are 52-bit
 * geohashes, exactly as in Redis, so ZRANGE, ZSCORE and replication of a geo
 * key agree with Redis. A position is encoded as 26 bits of latitude over
 * [-85.05112878, 85.05112878] (the Web Mercator limits) and 26 bits of
 * longitude over [-180, 180], interleaved: latitude in the even bits,
 * longitude in the odd ones. Decoding gives the centre of the cell.
 *
 * GEOADD is ZADD: it turns each "longitude latitude member" into
 * "score member" and runs zaddCommand on the rewritten arguments, so the
 * write is logged as zset effects through the zset's own path.
 *
 * A search covers its shape (circle or box) with the geohash cell of the
 * centre at a precision chosen from the radius, plus its eight neighbours
 * (those entirely outside the shape's bounding box dropped), reads each
 * cell's score range from the skiplist in order, and keeps the points
 * inside the shape. Unsorted results come in that order (centre, N, S, E,
 * W, NE, NW, SE, SW), which is Redis's, so even unsorted replies match.
 * Distances use the haversine formula on a sphere of radius 6372797.560856 m.
 *
 * GEORADIUS ... STORE names its destination after the options, outside the
 * key positions the dispatcher locks; the command locks that shard itself
 * (ascending shard order, or try-lock: see lock_store_key).
 *
 * Replies, errors and the order in which arguments are checked follow
 * Redis 7.0/7.2. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "server.h"
#include "shard.h"
#include "t_geo.h"
#include "t_zset.h"
#include "util.h"

#define GEO_STEP_MAX   26
#define GEO_LAT_MIN    -85.05112878
#define GEO_LAT_MAX    85.05112878
#define GEO_LONG_MIN   -180.0
#define GEO_LONG_MAX   180.0
#define EARTH_RADIUS_M 6372797.560856
#define MERCATOR_MAX   20037726.37
#define D_R            (M_PI / 180.0)

/* ---------------- geohash ---------------- */

typedef struct ghash {
    uint64_t bits;
    int step;      /* bits per coordinate; 0 with bits 0: no cell */
} ghash;

typedef struct garea {
    double lat_min, lat_max, lon_min, lon_max;
} garea;

static double deg_rad(double a) { return a * D_R; }
static double rad_deg(double a) { return a / D_R; }

/* Spread the 32 bits of v over the even bits of a 64-bit word. */
static uint64_t spread(uint32_t v) {
    uint64_t x = v;
    x = (x | (x << 16)) & 0x0000FFFF0000FFFFULL;
    x = (x | (x << 8)) & 0x00FF00FF00FF00FFULL;
    x = (x | (x << 4)) & 0x0F0F0F0F0F0F0F0FULL;
    x = (x | (x << 2)) & 0x3333333333333333ULL;
    x = (x | (x << 1)) & 0x5555555555555555ULL;
    return x;
}

static uint32_t squash(uint64_t x) {
    x &= 0x5555555555555555ULL;
    x = (x | (x >> 1)) & 0x3333333333333333ULL;
    x = (x | (x >> 2)) & 0x0F0F0F0F0F0F0F0FULL;
    x = (x | (x >> 4)) & 0x00FF00FF00FF00FFULL;
    x = (x | (x >> 8)) & 0x0000FFFF0000FFFFULL;
    x = (x | (x >> 16)) & 0x00000000FFFFFFFFULL;
    return (uint32_t)x;
}

static uint64_t interleave(uint32_t lat, uint32_t lon) { return spread(lat) | (spread(lon) << 1); }

/* Encode over the given latitude range (the Mercator one, or [-90, 90]
 * for GEOHASH's standard strings). 0 if the point is outside. */
static int gh_encode(double lat_min, double lat_max, double lon, double lat, int step, ghash *h) {
    h->bits = 0;
    h->step = step;
    if (lon > GEO_LONG_MAX || lon < GEO_LONG_MIN || lat > GEO_LAT_MAX || lat < GEO_LAT_MIN)
        return 0;
    if (lat < lat_min || lat > lat_max) return 0;
    double lat_off = (lat - lat_min) / (lat_max - lat_min);
    double lon_off = (lon - GEO_LONG_MIN) / (GEO_LONG_MAX - GEO_LONG_MIN);
    lat_off *= (double)(1ULL << step);
    lon_off *= (double)(1ULL << step);
    h->bits = interleave((uint32_t)lat_off, (uint32_t)lon_off);
    return 1;
}

static int gh_encode_wgs84(double lon, double lat, int step, ghash *h) {
    return gh_encode(GEO_LAT_MIN, GEO_LAT_MAX, lon, lat, step, h);
}

static void gh_decode(ghash h, garea *a) {
    uint32_t ilat = squash(h.bits), ilon = squash(h.bits >> 1);
    double lat_scale = GEO_LAT_MAX - GEO_LAT_MIN, lon_scale = GEO_LONG_MAX - GEO_LONG_MIN;
    double cells = (double)(1ULL << h.step);
    a->lat_min = GEO_LAT_MIN + (ilat * 1.0 / cells) * lat_scale;
    a->lat_max = GEO_LAT_MIN + ((ilat + 1) * 1.0 / cells) * lat_scale;
    a->lon_min = GEO_LONG_MIN + (ilon * 1.0 / cells) * lon_scale;
    a->lon_max = GEO_LONG_MIN + ((ilon + 1) * 1.0 / cells) * lon_scale;
}

/* Scores of a geo key are integers below 2^52. Any other score (a plain
 * sorted set's) still decodes, to the bits x86-64's conversion gives Redis
 * (out of range: the "integer indefinite" 2^63), without an undefined cast. */
static uint64_t score_bits(double score) {
    if (score >= 18446744073709551616.0) return 0;
    if (score >= 0) return (uint64_t)score;
    if (score >= -9223372036854775808.0) return (uint64_t)(int64_t)score;
    return 1ULL << 63;
}

/* WITHHASH's integer, converted the same way. */
static long long score_ll(double score) {
    if (score >= -9223372036854775808.0 && score < 9223372036854775808.0) return (long long)score;
    return (long long)(1ULL << 63);
}

/* A score back to the centre of its cell, clamped to the valid range. */
static void score_to_xy(double score, double *xy) {
    garea a;
    ghash h = {score_bits(score), GEO_STEP_MAX};
    gh_decode(h, &a);
    xy[0] = (a.lon_min + a.lon_max) / 2;
    if (xy[0] > GEO_LONG_MAX) xy[0] = GEO_LONG_MAX;
    if (xy[0] < GEO_LONG_MIN) xy[0] = GEO_LONG_MIN;
    xy[1] = (a.lat_min + a.lat_max) / 2;
    if (xy[1] > GEO_LAT_MAX) xy[1] = GEO_LAT_MAX;
    if (xy[1] < GEO_LAT_MIN) xy[1] = GEO_LAT_MIN;
}

/* Move a cell by dx columns and dy rows, wrapping around. A coordinate
 * that does not move keeps its bits as they are, as Redis's
 * geohash_move_x/y do: the cell of a point on the top (or right) edge
 * encodes one past the last row, and so reaches the scores above 2^52
 * that non-geo members of a sorted set can have. */
static ghash gh_move(ghash h, int dx, int dy) {
    uint64_t mask = h.step >= 32 ? 0xffffffffULL : (1ULL << h.step) - 1;
    uint32_t lat = squash(h.bits), lon = squash(h.bits >> 1);
    if (dy) lat = (uint32_t)((lat + (uint64_t)(int64_t)dy) & mask);
    if (dx) lon = (uint32_t)((lon + (uint64_t)(int64_t)dx) & mask);
    h.bits = interleave(lat, lon);
    return h;
}

static double lat_distance(double lat1, double lat2) {
    return EARTH_RADIUS_M * fabs(deg_rad(lat2) - deg_rad(lat1));
}

/* Haversine; the same longitude needs only the latitude difference. */
static double geo_distance(double lon1, double lat1, double lon2, double lat2) {
    double lon1r = deg_rad(lon1), lon2r = deg_rad(lon2);
    double v = sin((lon2r - lon1r) / 2);
    if (v == 0.0) return lat_distance(lat1, lat2);
    double lat1r = deg_rad(lat1), lat2r = deg_rad(lat2);
    double u = sin((lat2r - lat1r) / 2);
    double a = u * u + cos(lat1r) * cos(lat2r) * v * v;
    return 2.0 * EARTH_RADIUS_M * asin(sqrt(a));
}

/* ---------------- shapes ---------------- */

enum { SHAPE_CIRCLE, SHAPE_BOX };

typedef struct shape {
    int type;
    double xy[2];           /* centre: longitude, latitude */
    double conversion;      /* metres per unit */
    double radius;          /* circle, in units */
    double width, height;   /* box, in units */
} shape;

/* Is (lon, lat) inside? *dist: its distance from the centre, in metres. */
static int in_shape(const shape *s, double lon, double lat, double *dist) {
    if (s->type == SHAPE_CIRCLE) {
        *dist = geo_distance(s->xy[0], s->xy[1], lon, lat);
        return *dist <= s->radius * s->conversion;
    }
    if (lat_distance(lat, s->xy[1]) > s->height * s->conversion / 2) return 0;
    if (geo_distance(lon, lat, s->xy[0], lat) > s->width * s->conversion / 2) return 0;
    *dist = geo_distance(s->xy[0], s->xy[1], lon, lat);
    return 1;
}

/* The shape's bounding box: min lon, min lat, max lon, max lat. */
static void bounding_box(const shape *s, double *b) {
    double lon = s->xy[0], lat = s->xy[1];
    double height = s->conversion * (s->type == SHAPE_CIRCLE ? s->radius : s->height / 2);
    double width = s->conversion * (s->type == SHAPE_CIRCLE ? s->radius : s->width / 2);
    double lat_delta = rad_deg(height / EARTH_RADIUS_M);
    double lon_top = rad_deg(width / EARTH_RADIUS_M / cos(deg_rad(lat + lat_delta)));
    double lon_bottom = rad_deg(width / EARTH_RADIUS_M / cos(deg_rad(lat - lat_delta)));
    /* The wider edge is the one nearer the equator. */
    int south = lat < 0;
    b[0] = south ? lon - lon_bottom : lon - lon_top;
    b[2] = south ? lon + lon_bottom : lon + lon_top;
    b[1] = lat - lat_delta;
    b[3] = lat + lat_delta;
}

/* The coarsest precision whose cells still hold a radius of this size. */
static int steps_for_radius(double range, double lat) {
    if (range == 0) return GEO_STEP_MAX;
    int step = 1;
    while (range < MERCATOR_MAX) {
        range *= 2;
        step++;
    }
    step -= 2;
    /* Cells narrow towards the poles. */
    if (lat > 66 || lat < -66) {
        step--;
        if (lat > 80 || lat < -80) step--;
    }
    if (step < 1) step = 1;
    if (step > GEO_STEP_MAX) step = GEO_STEP_MAX;
    return step;
}

enum { NB_CENTER, NB_N, NB_S, NB_E, NB_W, NB_NE, NB_NW, NB_SE, NB_SW, NB_COUNT };

/* The centre cell and its neighbours, in the order they are searched. */
static void cells_around(ghash c, ghash *nb) {
    static const int d[NB_COUNT][2] = {
        {0, 0}, {0, 1}, {0, -1}, {1, 0}, {-1, 0}, {1, 1}, {-1, 1}, {1, -1}, {-1, -1},
    };
    for (int i = 0; i < NB_COUNT; i++) nb[i] = gh_move(c, d[i][0], d[i][1]);
}

/* The cells to search for a shape (a cell with step 0 is skipped). */
static void cells_for_shape(const shape *s, ghash *nb) {
    double b[4];
    bounding_box(s, b);
    double r = s->type == SHAPE_CIRCLE ? s->radius
                                       : sqrt((s->width / 2) * (s->width / 2) +
                                              (s->height / 2) * (s->height / 2));
    r *= s->conversion;
    int steps = steps_for_radius(r, s->xy[1]);
    ghash c;
    garea area, n, so, e, w;

    gh_encode_wgs84(s->xy[0], s->xy[1], steps, &c);
    cells_around(c, nb);
    gh_decode(c, &area);
    /* A neighbour that does not reach the box's edge means the cells are
     * too small: take the next coarser precision. */
    gh_decode(nb[NB_N], &n);
    gh_decode(nb[NB_S], &so);
    gh_decode(nb[NB_E], &e);
    gh_decode(nb[NB_W], &w);
    if (steps > 1 && (n.lat_max < b[3] || so.lat_min > b[1] || e.lon_max < b[2] || w.lon_min > b[0])) {
        steps--;
        gh_encode_wgs84(s->xy[0], s->xy[1], steps, &c);
        cells_around(c, nb);
        gh_decode(c, &area);
    }
    /* Neighbours beyond the bounding box hold nothing of interest. */
    if (steps >= 2) {
        static const ghash none = {0, 0};
        if (area.lat_min < b[1]) nb[NB_S] = nb[NB_SW] = nb[NB_SE] = none;
        if (area.lat_max > b[3]) nb[NB_N] = nb[NB_NE] = nb[NB_NW] = none;
        if (area.lon_min < b[0]) nb[NB_W] = nb[NB_SW] = nb[NB_NW] = none;
        if (area.lon_max > b[2]) nb[NB_E] = nb[NB_SE] = nb[NB_NE] = none;
    }
}

/* ---------------- search results ---------------- */

typedef struct gpoint {
    double lon, lat, dist, score;
    const char *member;     /* points into the zset, valid under the lock */
    size_t mlen;
} gpoint;

typedef struct gvec {
    gpoint *v;
    size_t n, cap;
} gvec;

static void gv_push(gvec *g, const gpoint *p) {
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 16;
        g->v = realloc(g->v, g->cap * sizeof(*g->v));
        if (!g->v) abort();
    }
    g->v[g->n++] = *p;
}

/* The members of one cell (scores [min, max)) inside the shape. */
static void search_cell(const zskiplist *zsl, ghash h, const shape *s, gvec *out, size_t limit) {
    int shift = 52 - h.step * 2;
    zrange_score r = {(double)(h.bits << shift), (double)((h.bits + 1) << shift), 0, 1};
    for (zsl_node *n = zsl_first_in_score(zsl, &r); n && zsl_score_lte_max(n->score, &r);
         n = zsl_next(n)) {
        double xy[2], dist;
        score_to_xy(n->score, xy);
        if (in_shape(s, xy[0], xy[1], &dist)) {
            gpoint p = {xy[0], xy[1], dist, n->score, n->member, n->mlen};
            gv_push(out, &p);
        }
        if (limit && out->n >= limit) break;
    }
}

/* Every cell around the shape; a neighbour equal to the last one searched
 * (huge radii) is searched once. limit (COUNT ANY) stops early. */
static void search_shape(const zskiplist *zsl, const shape *s, gvec *out, size_t limit) {
    ghash nb[NB_COUNT];
    int last = 0;
    cells_for_shape(s, nb);
    for (int i = 0; i < NB_COUNT; i++) {
        if (nb[i].bits == 0 && nb[i].step == 0) continue;
        if (last && nb[i].bits == nb[last].bits && nb[i].step == nb[last].step) continue;
        if (limit && out->n >= limit) break;
        search_cell(zsl, nb[i], s, out, limit);
        last = i;
    }
}

static int by_dist_asc(const void *a, const void *b) {
    double x = ((const gpoint *)a)->dist, y = ((const gpoint *)b)->dist;
    return x > y ? 1 : x < y ? -1 : 0;
}

static int by_dist_desc(const void *a, const void *b) { return by_dist_asc(b, a); }

/* ---------------- argument helpers ---------------- */

/* argv[i], argv[i+1] as longitude, latitude within the Mercator range. */
static int parse_lonlat(client *c, int i, double *xy) {
    if (arg_double(c, i, &xy[0]) != 0 || arg_double(c, i + 1, &xy[1]) != 0) return -1;
    if (xy[0] < GEO_LONG_MIN || xy[0] > GEO_LONG_MAX || xy[1] < GEO_LAT_MIN || xy[1] > GEO_LAT_MAX) {
        resp_add_errorf(&c->out, "ERR invalid longitude,latitude pair %f,%f", xy[0], xy[1]);
        return -1;
    }
    return 0;
}

/* Metres per unit; -1 after replying. */
static double parse_unit(client *c, int i) {
    static const struct { const char *name; double m; } units[] = {
        {"m", 1}, {"km", 1000}, {"ft", 0.3048}, {"mi", 1609.34},
    };
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++)
        if (arg_is(c, i, units[k].name)) return units[k].m;
    resp_add_error(&c->out, "ERR unsupported unit provided. please use M, KM, FT, MI");
    return -1;
}

static int parse_number(client *c, int i, double *v, const char *err) {
    if (!string2d(c->argv[i], c->argvlen[i], v)) {
        resp_add_error(&c->out, err);
        return -1;
    }
    return 0;
}

/* radius unit */
static int parse_radius(client *c, int i, shape *s) {
    if (parse_number(c, i, &s->radius, "ERR need numeric radius") != 0) return -1;
    if (s->radius < 0) {
        resp_add_error(&c->out, "ERR radius cannot be negative");
        return -1;
    }
    return (s->conversion = parse_unit(c, i + 1)) < 0 ? -1 : 0;
}

/* width height unit */
static int parse_box(client *c, int i, shape *s) {
    if (parse_number(c, i, &s->width, "ERR need numeric width") != 0 ||
        parse_number(c, i + 1, &s->height, "ERR need numeric height") != 0)
        return -1;
    if (s->height < 0 || s->width < 0) {
        resp_add_error(&c->out, "ERR height or width cannot be negative");
        return -1;
    }
    return (s->conversion = parse_unit(c, i + 2)) < 0 ? -1 : 0;
}

/* A member's position: 0, or -1 after replying. */
static int member_xy(client *c, const db_val *z, int i, double *xy) {
    double score;
    if (!zset_member_score(z, c->argv[i], c->argvlen[i], &score)) {
        resp_add_error(&c->out, "ERR could not decode requested zset member");
        return -1;
    }
    score_to_xy(score, xy);
    return 0;
}

/* A coordinate as Redis prints it (addReplyHumanLongDouble): up to 17
 * decimals, no trailing zeros; a bulk string in RESP2, a double in RESP3. */
static void reply_coord(client *c, double v) {
    char buf[128];
    int len = ld2string(buf + 1, sizeof(buf) - 3, (long double)v);
    if (c->out.proto >= 3) {
        buf[0] = ',';
        memcpy(buf + 1 + len, "\r\n", 2);
        resp_add_raw(&c->out, buf, (size_t)len + 3);
    } else {
        resp_add_bulk(&c->out, buf + 1, (size_t)len);
    }
}

static void reply_distance(client *c, double d) {
    char buf[128];
    int len = snprintf(buf, sizeof(buf), "%.4f", d);
    resp_add_bulk(&c->out, buf, (size_t)len);
}

/* ---------------- GEOADD ---------------- */

/* GEOADD key [NX|XX] [CH] lon lat member ...: ZADD key [options] score
 * member ..., with every pair checked before anything is written. */
void geoaddCommand(client *c) {
    int first = 2, nx = 0, xx = 0;
    while (first < c->argc) {
        if (arg_is(c, first, "nx")) nx = 1;
        else if (arg_is(c, first, "xx")) xx = 1;
        else if (!arg_is(c, first, "ch")) break;
        first++;
    }
    if ((c->argc - first) % 3 || (nx && xx)) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    int n = (c->argc - first) / 3, argc = first + 2 * n;
    const char **argv = malloc(sizeof(*argv) * (size_t)argc);
    size_t *argvlen = malloc(sizeof(*argvlen) * (size_t)argc);
    char (*scores)[32] = malloc(32 * (size_t)(n ? n : 1));
    for (int i = 0; i < first; i++) {
        argv[i] = c->argv[i];
        argvlen[i] = c->argvlen[i];
    }
    for (int i = 0; i < n; i++) {
        double xy[2];
        ghash h;
        int a = first + 3 * i;
        if (parse_lonlat(c, a, xy) != 0) goto out;
        gh_encode_wgs84(xy[0], xy[1], GEO_STEP_MAX, &h);
        argv[first + 2 * i] = scores[i];
        argvlen[first + 2 * i] = (size_t)ull2string(scores[i], sizeof(scores[i]), h.bits);
        argv[first + 2 * i + 1] = c->argv[a + 2];
        argvlen[first + 2 * i + 1] = c->argvlen[a + 2];
    }
    {
        /* Run ZADD on the rewritten arguments, then put them back. */
        const char **oargv = c->argv;
        size_t *oargvlen = c->argvlen;
        int oargc = c->argc;
        c->argv = argv;
        c->argvlen = argvlen;
        c->argc = argc;
        zaddCommand(c);
        c->argv = oargv;
        c->argvlen = oargvlen;
        c->argc = oargc;
    }
out:
    free(argv);
    free(argvlen);
    free(scores);
}

/* ---------------- GEOPOS, GEOHASH, GEODIST ---------------- */

void geoposCommand(client *c) {
    db_val z;
    int r = lookup_zset(c, 1, &z, 0);
    if (r < 0) return;
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++) {
        double score, xy[2];
        if (!r || !zset_member_score(&z, c->argv[j], c->argvlen[j], &score)) {
            resp_add_null_array(&c->out);
            continue;
        }
        score_to_xy(score, xy);
        resp_add_array(&c->out, 2);
        reply_coord(c, xy[0]);
        reply_coord(c, xy[1]);
    }
}

/* The standard 11-character geohash: re-encoded over latitudes [-90, 90];
 * the 11th character would need bits past the 52 stored, so it is '0'. */
void geohashCommand(client *c) {
    static const char alphabet[] = "0123456789bcdefghjkmnpqrstuvwxyz";
    db_val z;
    int r = lookup_zset(c, 1, &z, 0);
    if (r < 0) return;
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++) {
        double score, xy[2];
        char buf[11];
        ghash h;
        if (!r || !zset_member_score(&z, c->argv[j], c->argvlen[j], &score)) {
            resp_add_null(&c->out);
            continue;
        }
        score_to_xy(score, xy);
        gh_encode(-90, 90, xy[0], xy[1], GEO_STEP_MAX, &h);
        for (int i = 0; i < 11; i++)
            buf[i] = alphabet[i == 10 ? 0 : (h.bits >> (52 - (i + 1) * 5)) & 0x1f];
        resp_add_bulk(&c->out, buf, 11);
    }
}

void geodistCommand(client *c) {
    double to_meter = 1, s1, s2, a[2], b[2];
    db_val z;
    int r;

    if (c->argc == 5) {
        if ((to_meter = parse_unit(c, 4)) < 0) return;
    } else if (c->argc > 5) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    r = lookup_zset(c, 1, &z, 0);
    if (r < 0) return;
    if (r == 0 || !zset_member_score(&z, c->argv[2], c->argvlen[2], &s1) ||
        !zset_member_score(&z, c->argv[3], c->argvlen[3], &s2)) {
        resp_add_null(&c->out);
        return;
    }
    score_to_xy(s1, a);
    score_to_xy(s2, b);
    reply_distance(c, geo_distance(a[0], a[1], b[0], b[1]) / to_meter);
}

/* ---------------- searches ---------------- */

#define G_RADIUS_COORDS (1 << 0)   /* GEORADIUS: lon lat radius unit */
#define G_RADIUS_MEMBER (1 << 1)   /* GEORADIUSBYMEMBER: member radius unit */
#define G_NOSTORE       (1 << 2)   /* the _RO forms */
#define G_SEARCH        (1 << 3)   /* GEOSEARCH: FROM... BY... */
#define G_SEARCHSTORE   (1 << 4)   /* GEOSEARCHSTORE: dst first */

enum { SORT_NONE, SORT_ASC, SORT_DESC };

typedef struct search_opts {
    int withdist, withhash, withcoord, any, sort, storedist;
    int frommember, fromloc, byradius, bybox;
    int store_i;          /* argv index of the destination, -1 none */
    long long count;
} search_opts;

/* Parse the options after base; the key (z, found) is needed to resolve
 * FROMMEMBER. Replies and returns -1 on error. */
static int parse_search(client *c, int base, int flags, const db_val *z, int found, shape *s,
                        search_opts *o) {
    int left = c->argc - base;
    for (int k = 0; k < left; k++) {
        int i = base + k;
        if (arg_is(c, i, "withdist")) o->withdist = 1;
        else if (arg_is(c, i, "withhash")) o->withhash = 1;
        else if (arg_is(c, i, "withcoord")) o->withcoord = 1;
        else if (arg_is(c, i, "any")) o->any = 1;
        else if (arg_is(c, i, "asc")) o->sort = SORT_ASC;
        else if (arg_is(c, i, "desc")) o->sort = SORT_DESC;
        else if (arg_is(c, i, "count") && k + 1 < left) {
            if (arg_ll(c, i + 1, &o->count) != 0) return -1;
            if (o->count <= 0) {
                resp_add_error(&c->out, "ERR COUNT must be > 0");
                return -1;
            }
            k++;
        } else if ((arg_is(c, i, "store") || arg_is(c, i, "storedist")) && k + 1 < left &&
                   !(flags & (G_NOSTORE | G_SEARCH))) {
            o->store_i = i + 1;
            o->storedist = arg_is(c, i, "storedist");
            k++;
        } else if (arg_is(c, i, "storedist") && (flags & G_SEARCHSTORE)) {
            o->storedist = 1;
        } else if (arg_is(c, i, "frommember") && k + 1 < left && (flags & G_SEARCH) &&
                   !o->fromloc) {
            if (found && member_xy(c, z, i + 1, s->xy) != 0) return -1;
            o->frommember = 1;
            k++;
        } else if (arg_is(c, i, "fromlonlat") && k + 2 < left && (flags & G_SEARCH) &&
                   !o->frommember) {
            if (parse_lonlat(c, i + 1, s->xy) != 0) return -1;
            o->fromloc = 1;
            k += 2;
        } else if (arg_is(c, i, "byradius") && k + 2 < left && (flags & G_SEARCH) && !o->bybox) {
            if (parse_radius(c, i + 1, s) != 0) return -1;
            s->type = SHAPE_CIRCLE;
            o->byradius = 1;
            k += 2;
        } else if (arg_is(c, i, "bybox") && k + 3 < left && (flags & G_SEARCH) && !o->byradius) {
            if (parse_box(c, i + 1, s) != 0) return -1;
            s->type = SHAPE_BOX;
            o->bybox = 1;
            k += 3;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    if (o->store_i >= 0 && (o->withdist || o->withhash || o->withcoord)) {
        resp_add_errorf(&c->out, "ERR %s is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
                        (flags & G_SEARCHSTORE) ? "GEOSEARCHSTORE" : "STORE option in GEORADIUS");
        return -1;
    }
    if ((flags & G_SEARCH) && !(o->frommember || o->fromloc)) {
        resp_add_errorf(&c->out, "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for %s",
                        c->cmd->name);
        return -1;
    }
    if ((flags & G_SEARCH) && !(o->byradius || o->bybox)) {
        resp_add_errorf(&c->out, "ERR exactly one of BYRADIUS and BYBOX can be specified for %s",
                        c->cmd->name);
        return -1;
    }
    if (o->any && !o->count) {
        resp_add_error(&c->out, "ERR the ANY argument requires COUNT argument");
        return -1;
    }
    return 0;
}

/* GEORADIUS ... STORE dst names a key the dispatcher did not lock. Its
 * shard is taken here: blocking when its id is above the source's (shard
 * locks go in ascending order) and no transaction holds others, otherwise
 * by try-lock, and TRYAGAIN if it stays busy. *taken: a lock to release. */
static int lock_store_key(client *c, int src_i, int dst_i, shard **taken) {
    shard *src = shard_of_key(c->argv[src_i], c->argvlen[src_i]);
    shard *dst = shard_of_key(c->argv[dst_i], c->argvlen[dst_i]);
    *taken = NULL;
    if (dst == src || shard_held_by_me(dst)) return 0;
    if (!c->x.batching && dst->id > src->id) {
        shard_lock(dst);
        *taken = dst;
        return 0;
    }
    for (int round = 0; round < 1000; round++) {
        if (shard_trylock(dst) == 0) {
            *taken = dst;
            return 0;
        }
        sched_yield();
    }
    resp_add_error(&c->out, "TRYAGAIN GEORADIUS could not lock its STORE key; try again");
    return -1;
}

static void reply_points(client *c, const gvec *g, size_t n, const search_opts *o, double conv) {
    int extra = o->withdist + o->withhash + o->withcoord;
    resp_add_array(&c->out, (long long)n);
    for (size_t i = 0; i < n; i++) {
        const gpoint *p = &g->v[i];
        if (extra) resp_add_array(&c->out, extra + 1);
        resp_add_bulk(&c->out, p->member, p->mlen);
        if (o->withdist) reply_distance(c, p->dist / conv);
        if (o->withhash) resp_add_int(&c->out, score_ll(p->score));
        if (o->withcoord) {
            resp_add_array(&c->out, 2);
            reply_coord(c, p->lon);
            reply_coord(c, p->lat);
        }
    }
}

static void store_points(client *c, int dst_i, const gvec *g, size_t n, const search_opts *o,
                         double conv) {
    void *z = zset_result_new();
    for (size_t i = 0; i < n; i++) {
        const gpoint *p = &g->v[i];
        zset_result_add(z, p->member, p->mlen, o->storedist ? p->dist / conv : p->score);
    }
    zset_store_result(c, dst_i, z);
}

static void search_generic(client *c, int src_i, int flags) {
    search_opts o = {0};
    shape s = {0};
    db_val z;
    gvec g = {0};
    int base, found;
    shard *taken = NULL;

    o.store_i = -1;
    found = lookup_zset(c, src_i, &z, 0);
    if (found < 0) return;
    if (flags & G_RADIUS_COORDS) {
        base = 6;
        s.type = SHAPE_CIRCLE;
        if (parse_lonlat(c, 2, s.xy) != 0 || parse_radius(c, 4, &s) != 0) return;
    } else if (flags & G_RADIUS_MEMBER) {
        base = 5;
        s.type = SHAPE_CIRCLE;
        if (found && (member_xy(c, &z, 2, s.xy) != 0 || parse_radius(c, 3, &s) != 0)) return;
    } else {
        base = (flags & G_SEARCHSTORE) ? 3 : 2;
        if (flags & G_SEARCHSTORE) o.store_i = 1;
    }
    if (parse_search(c, base, flags, &z, found, &s, &o) != 0) return;
    if (o.store_i >= 0 && !(flags & G_SEARCHSTORE) && lock_store_key(c, src_i, o.store_i, &taken) != 0)
        return;

    if (!found) {
        if (o.store_i >= 0) zset_store_result(c, o.store_i, zset_result_new());
        else resp_add_array(&c->out, 0);
        goto out;
    }
    if (o.count && o.sort == SORT_NONE && !o.any) o.sort = SORT_ASC;
    search_shape(zset_skiplist(&z), &s, &g, o.any ? (size_t)o.count : 0);
    size_t n = g.n;
    if (o.count && (size_t)o.count < n) n = (size_t)o.count;
    if (o.sort != SORT_NONE && g.n > 1)
        qsort(g.v, g.n, sizeof(*g.v), o.sort == SORT_ASC ? by_dist_asc : by_dist_desc);
    if (o.store_i >= 0) store_points(c, o.store_i, &g, n, &o, s.conversion);
    else reply_points(c, &g, n, &o, s.conversion);
out:
    free(g.v);
    if (taken) shard_unlock(taken);
}

void georadiusCommand(client *c) { search_generic(c, 1, G_RADIUS_COORDS); }
void georadiusroCommand(client *c) { search_generic(c, 1, G_RADIUS_COORDS | G_NOSTORE); }
void georadiusbymemberCommand(client *c) { search_generic(c, 1, G_RADIUS_MEMBER); }
void georadiusbymemberroCommand(client *c) { search_generic(c, 1, G_RADIUS_MEMBER | G_NOSTORE); }
void geosearchCommand(client *c) { search_generic(c, 1, G_SEARCH); }
void geosearchstoreCommand(client *c) { search_generic(c, 2, G_SEARCH | G_SEARCHSTORE); }

int geo_store_pos(const struct rcommand *cmd, int argc, const char *const *argv,
                  const size_t *argvlen) {
    int base, pos = -1;
    if (cmd->proc == georadiusCommand) base = 6;
    else if (cmd->proc == georadiusbymemberCommand) base = 5;
    else return -1;
    for (int j = base; j < argc; j++) {
        if (strcaseeqlen(argv[j], argvlen[j], "count") && j + 1 < argc) j++;
        else if ((strcaseeqlen(argv[j], argvlen[j], "store") ||
                  strcaseeqlen(argv[j], argvlen[j], "storedist")) && j + 1 < argc)
            pos = ++j;
    }
    return pos;
}
