/* Hand-written CartPole rollout: the performance limit the compiler is measured against.
 *
 * Same math as hlofuse/examples/cartpole.py's `separate` variant (float32, Euler integration,
 * resets from precomputed randomness). What a compiler would have to do to match it:
 *   - the time loop runs *inside* the kernel, per block of BLOCK environments, so the state of a
 *     block stays in L1 for all steps (no per-step dispatch, no state round trip to memory);
 *   - sin/cos are vectorizable f32 polynomials (hlofuse's mathlib, prepended by the benchmark;
 *     the small-argument forms, as the angle stays small), so the inner loop over the block is
 *     SIMD (`omp simd`, compiled with -fopenmp);
 *   - blocks are independent: OpenMP splits them across cores (one block runs on the calling
 *     thread: waking a thread team costs more than a small batch).
 * Outputs match the compiled program's: final x, x_dot, theta, theta_dot, total_reward, episodes.
 */
#include <stdint.h>

#define BLOCK 256

void cartpole_ref(int64_t n, int64_t steps,
                  const float *x0, const float *xd0, const float *th0, const float *thd0,
                  const int32_t *actions,
                  const float *rx, const float *rxd, const float *rth, const float *rthd,
                  float *x_out, float *xd_out, float *th_out, float *thd_out,
                  float *reward_out, int32_t *episodes_out) {
  const float gravity = 9.8f, masspole = 0.1f, total_mass = 1.1f, length = 0.5f;
  const float polemass_length = 0.05f, tau = 0.02f, force_mag = 10.0f;
  const float four_thirds = (float)(4.0 / 3.0);
  const float x_threshold = 2.4f, theta_threshold = (float)(12 * 2 * 3.141592653589793 / 360);
  #pragma omp parallel for schedule(static) if (n > BLOCK)
  for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {
    int64_t m = n - b0 < BLOCK ? n - b0 : BLOCK;
    float x[BLOCK], xd[BLOCK], th[BLOCK], thd[BLOCK], rew[BLOCK];
    int32_t eps[BLOCK];
    for (int64_t i = 0; i < m; i++) {
      x[i] = x0[b0 + i]; xd[i] = xd0[b0 + i]; th[i] = th0[b0 + i]; thd[i] = thd0[b0 + i];
      rew[i] = 0.0f; eps[i] = 0;
    }
    for (int64_t t = 0; t < steps; t++) {
      const int32_t *a = actions + t * n + b0;
      const float *r0 = rx + t * n + b0, *r1 = rxd + t * n + b0;
      const float *r2 = rth + t * n + b0, *r3 = rthd + t * n + b0;
      #pragma omp simd
      for (int64_t i = 0; i < m; i++) {
        float force = a[i] == 1 ? force_mag : -force_mag;
        float c = HF_COS(th[i]), s = HF_SIN(th[i]);
        float temp = (force + polemass_length * (thd[i] * thd[i]) * s) / total_mass;
        float thacc = (gravity * s - c * temp)
                      / ((four_thirds - masspole * (c * c) / total_mass) * length);
        float xacc = temp - polemass_length * thacc * c / total_mass;
        float nx = x[i] + tau * xd[i], nxd = xd[i] + tau * xacc;
        float nth = th[i] + tau * thd[i], nthd = thd[i] + tau * thacc;
        int32_t done = (nx > x_threshold || nx < -x_threshold
                        || nth > theta_threshold || nth < -theta_threshold);
        x[i] = done ? r0[i] : nx;
        xd[i] = done ? r1[i] : nxd;
        th[i] = done ? r2[i] : nth;
        thd[i] = done ? r3[i] : nthd;
        rew[i] += 1.0f;
        eps[i] += done;
      }
    }
    for (int64_t i = 0; i < m; i++) {
      x_out[b0 + i] = x[i]; xd_out[b0 + i] = xd[i]; th_out[b0 + i] = th[i];
      thd_out[b0 + i] = thd[i]; reward_out[b0 + i] = rew[i]; episodes_out[b0 + i] = eps[i];
    }
  }
}

/* The same rollout reading the resets in any layout (element k of environment i at step t at
 * `r_k[t * rs_t + i * rs_i]`, r_k = rx, rxd, rth, rthd: four [S, N] arrays, or pointers into one
 * [S, N, 4] or [S, 4, N] array) and emitting a per-step output as RL code
 * logs one: `done_per_step[t]` = environments reset at step t (a sum over the batch: each block
 * writes its count to `partial[block * steps + t]`, summed in block order after the parallel
 * loop, so the result does not depend on the threads), or `x_per_step[t * n + i]` = x of
 * environment i after step t. A hand-writer writes one loop per layout: `layout_block` (one
 * block of environments, all steps) is inlined into each case's parallel loop with the layout's
 * element stride and the output as constants (inside the region OpenMP outlines, so they stay
 * constants), so each loop reads its resets with contiguous (or constant-stride) vector loads
 * and has no branch on the output. */
static inline __attribute__((always_inline)) void layout_block(
    int64_t b0, int64_t n, int64_t steps, const float *x0, const float *xd0, const float *th0,
    const float *thd0, const int32_t *actions, const float *rx, const float *rxd,
    const float *rth, const float *rthd, int64_t rs_t, const int64_t rs_i, float *x_out, float *xd_out, float *th_out,
    float *thd_out, float *reward_out, int32_t *episodes_out, float *partial,
    float *x_per_step, const int per_step) {
  const float gravity = 9.8f, masspole = 0.1f, total_mass = 1.1f, length = 0.5f;
  const float polemass_length = 0.05f, tau = 0.02f, force_mag = 10.0f;
  const float four_thirds = (float)(4.0 / 3.0);
  const float x_threshold = 2.4f, theta_threshold = (float)(12 * 2 * 3.141592653589793 / 360);
  {
    int64_t m = n - b0 < BLOCK ? n - b0 : BLOCK;
    float x[BLOCK], xd[BLOCK], th[BLOCK], thd[BLOCK], rew[BLOCK];
    int32_t eps[BLOCK];
    for (int64_t i = 0; i < m; i++) {
      x[i] = x0[b0 + i]; xd[i] = xd0[b0 + i]; th[i] = th0[b0 + i]; thd[i] = thd0[b0 + i];
      rew[i] = 0.0f; eps[i] = 0;
    }
    for (int64_t t = 0; t < steps; t++) {
      const int32_t *a = actions + t * n + b0;
      const int64_t at = t * rs_t + b0 * rs_i;
      const float *r0 = rx + at, *r1 = rxd + at, *r2 = rth + at, *r3 = rthd + at;
      /* the step's reset rows copied to contiguous locals first (de-interleaving [.., N, 4]):
       * measured faster than reading them in the select for every layout */
      float c0[BLOCK], c1[BLOCK], c2[BLOCK], c3[BLOCK];
      for (int64_t i = 0; i < m; i++) {
        c0[i] = r0[i * rs_i]; c1[i] = r1[i * rs_i]; c2[i] = r2[i * rs_i]; c3[i] = r3[i * rs_i];
      }
      float ended = 0.0f;
      #pragma omp simd reduction(+:ended)
      for (int64_t i = 0; i < m; i++) {
        float force = a[i] == 1 ? force_mag : -force_mag;
        float c = HF_COS(th[i]), s = HF_SIN(th[i]);
        float temp = (force + polemass_length * (thd[i] * thd[i]) * s) / total_mass;
        float thacc = (gravity * s - c * temp)
                      / ((four_thirds - masspole * (c * c) / total_mass) * length);
        float xacc = temp - polemass_length * thacc * c / total_mass;
        float nx = x[i] + tau * xd[i], nxd = xd[i] + tau * xacc;
        float nth = th[i] + tau * thd[i], nthd = thd[i] + tau * thacc;
        int32_t done = (nx > x_threshold || nx < -x_threshold
                        || nth > theta_threshold || nth < -theta_threshold);
        float f0 = c0[i], f1 = c1[i], f2 = c2[i], f3 = c3[i];
        x[i] = done ? f0 : nx;
        xd[i] = done ? f1 : nxd;
        th[i] = done ? f2 : nth;
        thd[i] = done ? f3 : nthd;
        rew[i] += 1.0f;
        eps[i] += done;
        if (per_step == 1) ended += (float)done;
        if (per_step == 2) x_per_step[t * n + b0 + i] = x[i];
      }
      if (per_step == 1) partial[(b0 / BLOCK) * steps + t] = ended;
    }
    for (int64_t i = 0; i < m; i++) {
      x_out[b0 + i] = x[i]; xd_out[b0 + i] = xd[i]; th_out[b0 + i] = th[i];
      thd_out[b0 + i] = thd[i]; reward_out[b0 + i] = rew[i]; episodes_out[b0 + i] = eps[i];
    }
  }
}

#define LAYOUT_CASE(RS_I, OUT) do { \
    _Pragma("omp parallel for schedule(static) if (n > BLOCK)") \
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK) \
      layout_block(b0, n, steps, x0, xd0, th0, thd0, actions, rx, rxd, rth, rthd, rs_t, RS_I, \
                   x_out, xd_out, th_out, thd_out, reward_out, episodes_out, partial, x_per_step, OUT); \
  } while (0)

void cartpole_ref_layout(int64_t n, int64_t steps,
                         const float *x0, const float *xd0, const float *th0, const float *thd0,
                         const int32_t *actions, const float *rx, const float *rxd,
                         const float *rth, const float *rthd, int64_t rs_t, int64_t rs_i,
                         float *x_out, float *xd_out, float *th_out, float *thd_out,
                         float *reward_out, int32_t *episodes_out,
                         float *done_per_step, float *partial, float *x_per_step) {
  int out = done_per_step ? 1 : x_per_step ? 2 : 0;
  if (rs_i == 1) {
    if (out == 0) LAYOUT_CASE(1, 0); else if (out == 1) LAYOUT_CASE(1, 1); else LAYOUT_CASE(1, 2);
  } else {
    if (out == 0) LAYOUT_CASE(4, 0); else if (out == 1) LAYOUT_CASE(4, 1); else LAYOUT_CASE(4, 2);
  }
  if (done_per_step) {
    int64_t blocks = (n + BLOCK - 1) / BLOCK;
    for (int64_t t = 0; t < steps; t++) {
      float sum = 0.0f;
      for (int64_t b = 0; b < blocks; b++) sum += partial[b * steps + t];
      done_per_step[t] = sum;
    }
  }
}
