/* The recorder's statistics of float64 / float32 values, one call at a time (see accumulate_native.py).

Each call's values add into its key's rows: sums[FINITE, NANS, ZEROS, SUM, M2, SQ] and the bucket
counts from sums[HIST], maxes[MAX] and maxes[NEG_MIN]. M2 is centred on the call's own mean and SQ
adds total^2 / n of the call (the merge combines centred sums of any grouping exactly). A bucket
is the one of buckets.py: the sign, exponent and top mantissa bits of (value - centre) as a
float32. Column numbers and the bucket rule's constants come from Python (layout.py, buckets.py)
in one int64 array, so they are defined once.

Built with the package (setup.py: an extension, loaded with ctypes, never imported as a module);
the sizes this file assumes are exported (sw_sizes) and checked against Python's on load. */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { FINITE, NANS, ZEROS, SUM, M2, SQ, HIST, SUM_WIDTH, MAX, NEG_MIN, MAX_WIDTH, SHIFT, LOW, SIDE,
       LAYOUT /* entries of the layout array */ };

#define BLOCK 256    /* values per pass-2 block, and the most display bins */
#define ROW_BUCKETS 1537 /* buckets.BUCKETS: a row's buckets (a call's counts are this wide) */

/* ctypes finds only exported functions: MSVC exports none unless told */
#ifdef _WIN32
#define EXPORT __declspec(dllexport)
#else
#define EXPORT
#endif

/* The bucket of each of n <= BLOCK values (finite ones; x - centre may overflow float32: an
   IEEE narrowing gives an infinity, in the outermost bucket), in a loop the compiler
   vectorizes. */
#define DEFINE_BUCKETS(NAME, T)                                                                \
    static void NAME(const T *restrict x, int64_t n, double centre, int32_t *restrict out,     \
                     const int64_t *L) {                                                       \
        const int32_t shift = (int32_t)L[SHIFT], low = (int32_t)(L[LOW] - 1);                 \
        const int32_t side = (int32_t)L[SIDE];                                                 \
        for (int64_t i = 0; i < n; i++) {                                                      \
            union { float f; int32_t i; } u;                                                   \
            u.f = (float)((double)x[i] - centre);                                              \
            int32_t sign = u.i >> 31; /* -1 for negative values (and -0.0) */                  \
            int32_t q = ((u.i & 0x7FFFFFFF) >> shift) - low;                                   \
            q = q < 0 ? 0 : q;                                                                 \
            q = q > side ? side : q;                                                           \
            out[i] = ((q ^ sign) - sign) + side;                                               \
        }                                                                                      \
    }

DEFINE_BUCKETS(buckets_f64, double)
DEFINE_BUCKETS(buckets_f32, float)

/* One call: pass 1 counts, sums and extremes; pass 2, in blocks, the squares about the call's
   mean and the buckets. The common case (every value finite) runs without a test per value: a
   NaN or an infinity makes the plain total non-finite, and a careful loop runs instead. A
   call's buckets are counted in int32 in two interleaved copies (consecutive values often share
   a bucket: one copy would chain each increment on the last), then added into the key's row. */
#define DEFINE_CALL(NAME, T, BUCKETS)                                                          \
    static void NAME(const T *x, int64_t n, double centre, double *s, double *m,              \
                     const int64_t *L) {                                                       \
        int64_t finite = n, nans = 0, zeros = 0, i = 0;                                        \
        double t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0;                                         \
        double h0 = -(double)INFINITY, h1 = h0, l0 = (double)INFINITY, l1 = l0;                \
        for (; i + 4 <= n; i += 4) {                                                           \
            double a = (double)x[i], b = (double)x[i + 1];                                     \
            double c = (double)x[i + 2], d = (double)x[i + 3];                                 \
            t0 += a; t1 += b; t2 += c; t3 += d;                                                \
            h0 = a > h0 ? a : h0; h1 = b > h1 ? b : h1;                                        \
            h0 = c > h0 ? c : h0; h1 = d > h1 ? d : h1;                                        \
            l0 = a < l0 ? a : l0; l1 = b < l1 ? b : l1;                                        \
            l0 = c < l0 ? c : l0; l1 = d < l1 ? d : l1;                                        \
            zeros += (a == 0.0) + (b == 0.0) + (c == 0.0) + (d == 0.0);                        \
        }                                                                                      \
        for (; i < n; i++) {                                                                   \
            double a = (double)x[i];                                                           \
            t0 += a; h0 = a > h0 ? a : h0; l0 = a < l0 ? a : l0; zeros += a == 0.0;            \
        }                                                                                      \
        double total = (t0 + t1) + (t2 + t3);                                                  \
        double high = h0 > h1 ? h0 : h1, low = -(l0 < l1 ? l0 : l1);                           \
        int all_finite = total - total == 0.0;                                                 \
        if (!all_finite) {                                                                     \
            finite = zeros = 0;                                                                \
            total = 0.0, high = low = -(double)INFINITY;                                       \
            for (i = 0; i < n; i++) {                                                          \
                double v = (double)x[i];                                                       \
                if (v != v) {                                                                  \
                    nans++;                                                                    \
                } else if (v < INFINITY && v > -INFINITY) {                                    \
                    finite++;                                                                  \
                    zeros += v == 0.0;                                                         \
                    total += v;                                                                \
                    high = v > high ? v : high;                                                \
                    low = -v > low ? -v : low;                                                 \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        double held = finite > 0 ? (double)finite : 1.0, mean = total / held;                  \
        double m0 = 0.0, m1 = 0.0, m2 = 0.0, m3 = 0.0;                                         \
        if (finite > 0) {                                                                      \
            /* buckets are monotone in the value: the call's lie between its extremes' */      \
            int32_t edge[2];                                                                   \
            double ends[2] = {-low, high};                                                     \
            buckets_f64(ends, 2, centre, edge, L);                                             \
            int64_t first = edge[0], width = edge[1] - edge[0] + 1;                            \
            /* fewer values than buckets between the extremes: each added to its bucket's row */ \
            int sparse = n < width;                                                            \
            int32_t counts[2][ROW_BUCKETS], index[BLOCK];                                      \
            double *row = s + L[HIST]; /* only the buckets counted: the rest stay untouched */ \
            if (!sparse) {                                                                     \
                memset(counts[0], 0, width * sizeof(int32_t));                                 \
                memset(counts[1], 0, width * sizeof(int32_t));                                 \
            }                                                                                  \
            int32_t *c0 = counts[0] - first, *c1 = counts[1] - first;                          \
            for (int64_t b = 0; b < n; b += BLOCK) {                                           \
                int64_t size = n - b < BLOCK ? n - b : BLOCK;                                  \
                const T *y = x + b;                                                            \
                BUCKETS(y, size, centre, index, L);                                            \
                if (all_finite) {                                                              \
                    int64_t j = 0;                                                             \
                    for (; j + 4 <= size; j += 4) {                                            \
                        double a = (double)y[j] - mean, bb = (double)y[j + 1] - mean;          \
                        double c = (double)y[j + 2] - mean, d = (double)y[j + 3] - mean;       \
                        m0 += a * a; m1 += bb * bb; m2 += c * c; m3 += d * d;                  \
                    }                                                                          \
                    for (; j < size; j++) {                                                    \
                        double a = (double)y[j] - mean;                                        \
                        m0 += a * a;                                                           \
                    }                                                                          \
                    if (sparse) {                                                              \
                        for (j = 0; j < size; j++) row[index[j]] += 1.0;                       \
                    } else {                                                                   \
                        for (j = 0; j + 2 <= size; j += 2) {                                   \
                            c0[index[j]]++; c1[index[j + 1]]++;                                \
                        }                                                                      \
                        if (j < size) c0[index[j]]++;                                          \
                    }                                                                          \
                } else {                                                                       \
                    for (int64_t j = 0; j < size; j++) {                                       \
                        double v = (double)y[j];                                               \
                        if (v < INFINITY && v > -INFINITY) {                                   \
                            m0 += (v - mean) * (v - mean);                                     \
                            if (sparse) row[index[j]] += 1.0; else c0[index[j]]++;             \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            if (!sparse)                                                                       \
                for (int64_t j = first; j < first + width; j++)                                \
                    if (c0[j] | c1[j]) row[j] += (double)(c0[j] + c1[j]);                      \
        }                                                                                      \
        s[L[FINITE]] += (double)finite;                                                        \
        s[L[NANS]] += (double)nans;                                                            \
        s[L[ZEROS]] += (double)zeros;                                                          \
        s[L[SUM]] += total;                                                                    \
        s[L[M2]] += (m0 + m1) + (m2 + m3);                                                     \
        s[L[SQ]] += total * total / held;                                                      \
        if (high > m[L[MAX]]) m[L[MAX]] = high;                                                \
        if (low > m[L[NEG_MIN]]) m[L[NEG_MIN]] = low;                                          \
    }

DEFINE_CALL(call_f64, double, buckets_f64)
DEFINE_CALL(call_f32, float, buckets_f32)

/* One call of n values into one key's rows (s: its sums row, m: its maxes row). */
EXPORT void sw_one_f64(const double *x, int64_t n, double centre, double *s, double *m,
                       const int64_t *L) {
    call_f64(x, n, centre, s, m, L);
}

EXPORT void sw_one_f32(const float *x, int64_t n, double centre, double *s, double *m,
                       const int64_t *L) {
    call_f32(x, n, centre, s, m, L);
}

/* A key's rows in a table of keys: where its centre, sums row and maxes row are. */
typedef struct {
    const double *centres;
    double *sums, *maxes;
    const int64_t *L;
} Table;

/* One call of n values of key k (float32 values when f32, else float64) into table t. */
static void call_at(const void *x, int64_t n, int f32, int64_t k, const Table *t) {
    double *s = t->sums + k * t->L[SUM_WIDTH], *m = t->maxes + k * t->L[MAX_WIDTH];
    if (f32)
        call_f32((const float *)x, n, t->centres[k], s, m, t->L);
    else
        call_f64((const double *)x, n, t->centres[k], s, m, t->L);
}

EXPORT void sw_key_f32(const float *x, int64_t n, int64_t k, const Table *t) {
    call_at(x, n, 1, k, t);
}

EXPORT void sw_key_f64(const double *x, int64_t n, int64_t k, const Table *t) {
    call_at(x, n, 0, k, t);
}

/* Many calls read in place: call c is sizes[c] values at addresses[c], float32 where f32[c]
   (else float64), of key keys[c]. */
EXPORT void sw_many(const int64_t *addresses, const int64_t *sizes, const int64_t *f32,
                    const int64_t *keys, int64_t calls, const Table *t) {
    for (int64_t c = 0; c < calls; c++)
        call_at((const void *)(intptr_t)addresses[c], sizes[c], (int)f32[c], keys[c], t);
}

/* A batch: call c is sizes[c] values of key keys[c], one call after another in x. */
EXPORT void sw_calls_f64(const double *x, const int64_t *keys, const int64_t *sizes,
                         int64_t calls, const double *centres, double *sums, double *maxes,
                         const int64_t *L) {
    for (int64_t c = 0; c < calls; c++) {
        int64_t k = keys[c];
        call_f64(x, sizes[c], centres[k], sums + k * L[SUM_WIDTH], maxes + k * L[MAX_WIDTH], L);
        x += sizes[c];
    }
}

/* Display bins: for each of k keys, bins equal bins over its [min, max] from its merged buckets
   (buckets.py's rebin, the same numbers: bucket counts are whole, so any order of adding them
   is exact). Each bucket's count is spread uniformly over its span; edges[j], edges[j + 1] are
   bucket j's bounds (of value - centre). Only the buckets from the min's to the max's are
   read: no value was counted outside them. Exact zeros (s[ZEROS]) are left out: taken from the
   bucket they were counted in, that of (float)(0 - centre). A key with no finite value gets
   zeros, one whose min is its max has every (non-zero) value in bin 0. */
EXPORT void sw_rebin(const double *sums, const double *maxes, const double *centres,
                     int64_t k, int64_t bins, const double *edges, double *out, const int64_t *L) {
    const int32_t last = 2 * (int32_t)L[SIDE];
    for (int64_t r = 0; r < k; r++) {
        const double *s = sums + r * L[SUM_WIDTH], *m = maxes + r * L[MAX_WIDTH];
        const double *c = s + L[HIST];
        double *h = out + r * bins, total = s[L[FINITE]], zeros = s[L[ZEROS]];
        double lo = -m[L[NEG_MIN]], hi = m[L[MAX]];
        memset(h, 0, bins * sizeof(double));
        if (!(total > 0.0) || !(lo > -INFINITY && lo < INFINITY && hi > -INFINITY && hi < INFINITY))
            continue;
        if (hi == lo) {
            h[0] = total - zeros;
            continue;
        }
        const double zero = 0.0;
        int32_t z; /* the zeros' bucket, as the calls counted them */
        buckets_f64(&zero, 1, centres[r], &z, L);
        double e[BLOCK + 1], cdf[BLOCK + 1];
        int32_t j[BLOCK + 1];
        for (int64_t i = 0; i <= bins; i++)
            e[i] = (lo - centres[r]) + (hi - lo) * ((double)i / (double)bins);
        buckets_f64(e, bins + 1, 0.0, j, L);
        double below = 0.0;
        int64_t at = j[0]; /* the min's bucket as it was counted: none below it */
        /* whole counts: four running sums give the one sum exactly, without one chain of adds */
        double b1 = 0.0, b2 = 0.0, b3 = 0.0;
        for (int64_t i = 0; i <= bins; i++) {
            /* float32 rounding may cross an edge: the exact bucket of the float64 edge (a min
               on an edge moves up a bucket, its count below the first edge's) */
            if (j[i] > 0 && e[i] < edges[j[i]]) j[i]--;
            if (j[i] < last && e[i] >= edges[j[i] + 1]) j[i]++;
            if (i == 0 && j[0] < at) at = j[0];
            for (; at + 4 <= j[i]; at += 4) {
                below += c[at];
                b1 += c[at + 1];
                b2 += c[at + 2];
                b3 += c[at + 3];
            }
            for (; at < j[i]; at++) below += c[at];
            below += (b1 + b2) + b3, b1 = b2 = b3 = 0.0;
            double frac = (e[i] - edges[j[i]]) / (edges[j[i] + 1] - edges[j[i]]);
            frac = frac > 0.0 ? frac : 0.0;
            frac = frac < 1.0 ? frac : 1.0;
            cdf[i] = below + c[j[i]] * frac;
            cdf[i] -= zeros * (j[i] > z ? 1.0 : j[i] == z ? frac : 0.0);
        }
        cdf[0] = 0.0, cdf[bins] = total - zeros;
        /* rounded half to even, as numpy's round: exact for 0 <= x < 2^52 (counts are) */
        for (int64_t i = 0; i <= bins; i++) cdf[i] = (cdf[i] + 0x1p52) - 0x1p52;
        for (int64_t i = 0; i < bins; i++) h[i] = cdf[i + 1] - cdf[i];
    }
}

/* After a step's merge: each key's next bucket centre (its mean, or its centre where it had no
   finite value) into next, then its rows zeroed (maxes: -inf) for the next step, the buckets only
   between its min's and its max's: no value was counted outside them. */
EXPORT void sw_clear(const Table *t, int64_t k, double *next) {
    const int64_t *L = t->L;
    for (int64_t r = 0; r < k; r++) {
        double *s = t->sums + r * L[SUM_WIDTH], *m = t->maxes + r * L[MAX_WIDTH];
        double n = s[L[FINITE]], centre = t->centres[r];
        next[r] = n > 0.0 ? s[L[SUM]] / n : centre;
        if (n > 0.0) {
            int32_t edge[2];
            double ends[2] = {-m[L[NEG_MIN]], m[L[MAX]]};
            buckets_f64(ends, 2, centre, edge, L);
            memset(s + L[HIST] + edge[0], 0, (edge[1] - edge[0] + 1) * sizeof(double));
        }
        memset(s, 0, L[HIST] * sizeof(double));
        for (int64_t j = 0; j < L[MAX_WIDTH]; j++) m[j] = -(double)INFINITY;
    }
}

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "" /* setup.py defines it: the sha256 of this file as built */
#endif

/* What accumulate_native.py checks before it uses the library: the sizes above (the layout
   entries read, a row's buckets, the most display bins, a Table's bytes) into out (n of them at
   most; their number returned), and the sha256 of the source it was built from. */
EXPORT int64_t sw_sizes(int64_t *out, int64_t n) {
    const int64_t sizes[] = {LAYOUT, ROW_BUCKETS, BLOCK, (int64_t)sizeof(Table)};
    const int64_t count = (int64_t)(sizeof sizes / sizeof sizes[0]);
    for (int64_t i = 0; i < n && i < count; i++) out[i] = sizes[i];
    return count;
}

EXPORT const char *sw_source(void) { return SOURCE_SHA256; }

/* setuptools builds this file as a Python extension, and on Windows links it exporting
   PyInit__accumulate: defined so that link works everywhere. The library is only ever loaded
   with ctypes; importing it as a module would fail (no module is made: NULL). */
EXPORT void *PyInit__accumulate(void) { return NULL; }
