/*
 * half.h - IEEE binary16 (float16) and bfloat16 <-> float32 conversions on
 * the host, rounding to nearest even, with subnormals, infinities and NaN
 * (a NaN stays a quiet NaN). Shared by Cast, NDArray copies and the
 * executor's half-precision nodes on CPU; the GPU uses cuda_fp16.h /
 * cuda_bf16.h, which round the same way.
 */
#ifndef MX_HALF_H
#define MX_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float mx_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: value = man * 2^-24 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline uint16_t mx_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds past 65504: inf */
    if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
        float a;
        memcpy(&a, &ax, sizeof(a));
        return (uint16_t)(sign | (uint16_t)lrintf(a * 0x1p24f));
    }
    uint32_t man = ax & 0x7fffff, exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (man >> 13), rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* carries into the exponent correctly */
    return (uint16_t)(sign | h);
}

/* bfloat16 is float32's upper half: 8 exponent bits, 7 mantissa bits. */
static inline float mx_bfloat16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline uint16_t mx_float_to_bfloat16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1); /* round to nearest even; overflow rounds to inf */
    return (uint16_t)(x >> 16);
}

#endif /* MX_HALF_H */
