/* rng.c - the seeded random generator: xoshiro256** seeded by splitmix64,
 * uniform and normal numbers, and the truncated normal used to initialise
 * tables and weights (docs/reference.md, section 1.4). */
#include "base/internal.h"

#include <math.h>

#define RA_PI 3.14159265358979323846
#define RA_SQRT1_2 0.70710678118654752440
#define RA_SQRT_2PI 2.50662827463100050242

/* splitmix64: a 64-bit counter through a mixing function; spreads any seed
 * (0 included) over the 256-bit state, which then cannot be all zero. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void ra_rng_seed(ra_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

/* xoshiro256** (Blackman & Vigna 2018): scrambled output of a linear
 * engine with period 2^256 - 1. */
uint64_t ra_rng_u64(ra_rng *rng) {
    uint64_t *s = rng->s;
    const uint64_t out = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

/* Reject the lowest 2^64 mod range values so that the rest are whole
 * copies of the range. */
uint64_t ra_rng_below(ra_rng *rng, uint64_t range) {
    if (range <= 1) return 0;
    const uint64_t threshold = (0 - range) % range;
    for (;;) {
        const uint64_t r = ra_rng_u64(rng);
        if (r >= threshold) return r % range;
    }
}

uint64_t rai_mix64(uint64_t a, uint64_t b) {
    uint64_t z = a ^ (b * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ra_rng_uniform(ra_rng *rng) {
    return (double)(ra_rng_u64(rng) >> 11) * 0x1.0p-53;
}

/* Box-Muller with the cosine branch only: two draws per number, so the
 * stream position depends only on how many numbers were asked for. */
double ra_rng_normal(ra_rng *rng) {
    const double u1 = 1.0 - ra_rng_uniform(rng);   /* (0, 1]: log is finite */
    const double u2 = ra_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * RA_PI * u2);
}

void ra_rng_fill_uniform(ra_rng *rng, float *out, int64_t n, float lo, float hi) {
    const double w = (double)hi - (double)lo;
    for (int64_t i = 0; i < n; i++) {
        float v = (float)(lo + w * ra_rng_uniform(rng));
        out[i] = v < hi ? v : lo;   /* rounding up to hi would leave [lo, hi) */
    }
}

void ra_rng_fill_normal(ra_rng *rng, float *out, int64_t n, float mean, float std) {
    for (int64_t i = 0; i < n; i++) out[i] = (float)(mean + (double)std * ra_rng_normal(rng));
}

/* Phi, the standard normal CDF, accurate in the lower tail. */
static double norm_cdf(double x) { return 0.5 * erfc(-x * RA_SQRT1_2); }

/* Phi^{-1}(u) for u in (0, 1): P. J. Acklam's rational approximation
 * (relative error 1.2e-9) polished by one Halley step on erfc, which
 * brings it to about double precision. */
static double norm_icdf(double u) {
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                -2.759285104469687e+02, 1.383577518672690e+02,
                                -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                -1.556989798598866e+02, 6.680131188771972e+01,
                                -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                -2.400758277161838e+00, -2.549732539343734e+00,
                                4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01,
                                2.445134137142996e+00, 3.754408661907416e+00};
    if (!(u > 0.0)) return -INFINITY;
    if (!(u < 1.0)) return INFINITY;
    double x;
    if (u < 0.02425 || u > 1.0 - 0.02425) {
        const double q = sqrt(-2.0 * log(u < 0.5 ? u : 1.0 - u));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
        if (u > 0.5) x = -x;
    } else {
        const double q = u - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
    }
    const double e = norm_cdf(x) - u;
    const double h = e * RA_SQRT_2PI * exp(0.5 * x * x);
    return x - h / (1.0 + 0.5 * x * h);
}

ra_status ra_rng_fill_trunc_normal(ra_rng *rng, float *out, int64_t n, float mean,
                                   float std, float a, float b) {
    if (!(std >= 0.0f) || !(a < b) || !isfinite(mean) || !isfinite(std))
        return rai_fail(RA_ERR_ARG, "trunc_normal: mean %g, std %g, bounds [%g, %g]",
                        mean, std, a, b);
    if (n < 0) return rai_fail(RA_ERR_ARG, "trunc_normal: n = %lld", (long long)n);
    if (std == 0.0f) {
        const float v = mean < a ? a : mean > b ? b : mean;
        for (int64_t i = 0; i < n; i++) out[i] = v;
        return RA_OK;
    }
    /* standardised bounds; an interval wholly above the mean is mirrored
     * below it, where Phi is small and exact in double */
    double lo = ((double)a - mean) / std, hi = ((double)b - mean) / std;
    const int flip = lo > 0.0;
    if (flip) {
        const double t = lo;
        lo = -hi;
        hi = -t;
    }
    const double pl = norm_cdf(lo), ph = norm_cdf(hi);
    for (int64_t i = 0; i < n; i++) {
        double z = norm_icdf(pl + (ph - pl) * ra_rng_uniform(rng));
        if (z < lo) z = lo;   /* rounding at the ends, as timm's clamp_ */
        if (z > hi) z = hi;
        if (flip) z = -z;
        float v = (float)(mean + (double)std * z);
        out[i] = v < a ? a : v > b ? b : v;
    }
    return RA_OK;
}
