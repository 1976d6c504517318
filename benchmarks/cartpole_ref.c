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
