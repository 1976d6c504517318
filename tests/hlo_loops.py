"""Loop programs in HLO text shared by the whole-loop fusion and explain tests."""

from __future__ import annotations

# x' = sin(x) * 0.5 + key[0] * 1e-3 ; ys[i] = x' ; key' = key * 5 + 1 (the uniform state)
SCAN = """
HloModule scan

body {{
  p = (s32[], f32[{n}], f32[{s},{n}], u32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[{n}] get-tuple-element(p), index=1
  ys = f32[{s},{n}] get-tuple-element(p), index=2
  key = u32[2] get-tuple-element(p), index=3
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  k0 = u32[1] slice(key), slice={{[0:1]}}
  k0s = u32[] reshape(k0)
  kf = f32[] convert(k0s)
  milli = f32[] constant(0.001)
  kscaled = f32[] multiply(kf, milli)
  kb = f32[{n}] broadcast(kscaled), dimensions={{}}
  half = f32[] constant(0.5)
  hb = f32[{n}] broadcast(half), dimensions={{}}
  s = f32[{n}] sine(x)
  sh = f32[{n}] multiply(s, hb)
  x1 = f32[{n}] add(sh, kb)
  row = f32[1,{n}] reshape(x1)
  zero = s32[] constant(0)
  ys1 = f32[{s},{n}] dynamic-update-slice(ys, row, i, zero)
  five = u32[] constant(5)
  fb = u32[2] broadcast(five), dimensions={{}}
  uone = u32[] constant(1)
  ob = u32[2] broadcast(uone), dimensions={{}}
  km = u32[2] multiply(key, fb)
  key1 = u32[2] add(km, ob)
  ROOT t = (s32[], f32[{n}], f32[{s},{n}], u32[2]) tuple(i1, x1, ys1, key1)
}}

cond {{
  p = (s32[], f32[{n}], f32[{s},{n}], u32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  bound = s32[] constant({s})
  ROOT lt = pred[] compare(i, bound), direction=LT
}}

ENTRY main {{
  x0 = f32[{n}] parameter(0)
  k = u32[2] parameter(1)
  z = s32[] constant(0)
  fz = f32[] constant(0)
  ys0 = f32[{s},{n}] broadcast(fz), dimensions={{}}
  init = (s32[], f32[{n}], f32[{s},{n}], u32[2]) tuple(z, x0, ys0, k)
  w = (s32[], f32[{n}], f32[{s},{n}], u32[2]) while(init), condition=cond, body=body
  xs = f32[{n}] get-tuple-element(w), index=1
  yo = f32[{s},{n}] get-tuple-element(w), index=2
  ko = u32[2] get-tuple-element(w), index=3
  ROOT r = (f32[{n}], f32[{s},{n}], u32[2]) tuple(xs, yo, ko)
}}
"""


def scan(n: int = 300, s: int = 12) -> str:
    return SCAN.format(n=n, s=s)


def scan_reducing_over_batch() -> str:
    """`scan()` whose step adds the sum over the batch: not a per-element loop."""
    return scan().replace("  x1 = f32[300] add(sh, kb)", """  zf = f32[] constant(0)
  tot = f32[] reduce(sh, zf), dimensions={0}, to_apply=add
  tb = f32[300] broadcast(tot), dimensions={}
  x1 = f32[300] add(sh, tb)""").replace("body {", """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

body {""", 1)


# a [n, 3] state stacked along dimension 1 every step and read back column by column:
# (a, b, c) <- (a + 0.1 * b, b - 0.1 * sin(a), where(c > 0, c * 0.99, 1))
STACKED = """
HloModule stacked

body {{
  p = (s32[], f32[{n},3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  s = f32[{n},3] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  a0 = f32[{n},1] slice(s), slice={{[0:{n}], [0:1]}}
  a = f32[{n}] reshape(a0)
  b0 = f32[{n},1] slice(s), slice={{[0:{n}], [1:2]}}
  b = f32[{n}] reshape(b0)
  c0 = f32[{n},1] slice(s), slice={{[0:{n}], [2:3]}}
  c = f32[{n}] reshape(c0)
  k = f32[] constant(0.1)
  kb = f32[{n}] broadcast(k), dimensions={{}}
  kbb = f32[{n}] multiply(kb, b)
  a1 = f32[{n}] add(a, kbb)
  sa = f32[{n}] sine(a)
  ksa = f32[{n}] multiply(kb, sa)
  b1 = f32[{n}] subtract(b, ksa)
  z = f32[] constant(0)
  zb = f32[{n}] broadcast(z), dimensions={{}}
  pos = pred[{n}] compare(c, zb), direction=GT
  d = f32[] constant(0.99)
  db = f32[{n}] broadcast(d), dimensions={{}}
  cd = f32[{n}] multiply(c, db)
  o = f32[] constant(1)
  ob = f32[{n}] broadcast(o), dimensions={{}}
  c1 = f32[{n}] select(pos, cd, ob)
  ra = f32[{n},1] reshape(a1)
  rb = f32[{n},1] reshape(b1)
  rc = f32[{n},1] reshape(c1)
  st = f32[{n},3] concatenate(ra, rb, rc), dimensions={{1}}
  {extra}
  ROOT t = (s32[], f32[{n},3]) tuple(i1, {new})
}}

cond {{
  p = (s32[], f32[{n},3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  bound = s32[] constant({s})
  ROOT lt = pred[] compare(i, bound), direction=LT
}}

ENTRY main {{
  s0 = f32[{n},3] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[{n},3]) tuple(z, s0)
  w = (s32[], f32[{n},3]) while(init), condition=cond, body=body
  ROOT out = f32[{n},3] get-tuple-element(w), index=1
}}
"""


def stacked(n: int = 64, s: int = 20, extra: str = "", new: str = "st") -> str:
    return STACKED.format(n=n, s=s, extra=extra, new=new)


# A policy network inside an environment loop: x' = x + 0.01 * tanh(tanh(tanh(x w1) w2) w3),
# per element a chain of three dense layers (the weights are loop invariants); 5 steps counted
# by `i`, and 4 steps of a loop whose body is one training-like dot (`small_dot_loop`).
MLP_SCAN = """
HloModule mlp_scan

body {{
  p = (s32[], f32[{n},{d}], f32[{d},{h}], f32[{h},{h}], f32[{h},{d}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[{n},{d}] get-tuple-element(p), index=1
  w1 = f32[{d},{h}] get-tuple-element(p), index=2
  w2 = f32[{h},{h}] get-tuple-element(p), index=3
  w3 = f32[{h},{d}] get-tuple-element(p), index=4
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  a1 = f32[{n},{h}] dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  h1 = f32[{n},{h}] tanh(a1)
  a2 = f32[{n},{h}] dot(h1, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  h2 = f32[{n},{h}] tanh(a2)
  a3 = f32[{n},{d}] dot(h2, w3), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  h3 = f32[{n},{d}] tanh(a3)
  c = f32[] constant(0.01)
  cb = f32[{n},{d}] broadcast(c), dimensions={{}}
  dx = f32[{n},{d}] multiply(h3, cb)
  x1 = f32[{n},{d}] add(x, dx)
  ROOT t = (s32[], f32[{n},{d}], f32[{d},{h}], f32[{h},{h}], f32[{h},{d}]) tuple(i1, x1, w1, w2, w3)
}}

cond {{
  p = (s32[], f32[{n},{d}], f32[{d},{h}], f32[{h},{h}], f32[{h},{d}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  bound = s32[] constant({s})
  ROOT lt = pred[] compare(i, bound), direction=LT
}}

ENTRY main {{
  x0 = f32[{n},{d}] parameter(0)
  w1 = f32[{d},{h}] parameter(1)
  w2 = f32[{h},{h}] parameter(2)
  w3 = f32[{h},{d}] parameter(3)
  z = s32[] constant(0)
  init = (s32[], f32[{n},{d}], f32[{d},{h}], f32[{h},{h}], f32[{h},{d}]) tuple(z, x0, w1, w2, w3)
  w = (s32[], f32[{n},{d}], f32[{d},{h}], f32[{h},{h}], f32[{h},{d}]) while(init),
    condition=cond, body=body
  ROOT xs = f32[{n},{d}] get-tuple-element(w), index=1
}}
"""


def mlp_scan(n: int = 64, d: int = 4, h: int = 16, s: int = 5) -> str:
    return MLP_SCAN.format(n=n, d=d, h=h, s=s)
