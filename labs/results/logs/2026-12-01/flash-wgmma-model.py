"""CPU model of 07_wgmma.cu (chapter 08, rung 7): its index arithmetic and its ring protocol in NumPy, no GPU.

Run: python3 labs/results/logs/2026-12-01/flash-wgmma-model.py   (numpy only; ~1 minute)

What it checks, against what:
 1. Shared-memory layouts. TMA's 128-byte swizzle is modelled as CUTLASS's Swizzle<3,4,3> on byte
    addresses (bits 4-6 ^= bits 7-9, tiles 1024-byte aligned) and wgmma's reads through a descriptor as
    the canonical layouts (K-major SW128: row m at (m / 8) SBO + (m % 8) 128 + 2k; MN-major SW128:
    (k / 8) SBO + (k % 8) 128 + (n / 64) LBO + 2 (n % 64)), then the same swizzle. Under that model every
    element the kernel's descriptors (start offsets per k-step, SBO, LBO) make wgmma read is the element
    of Q, K, V it must be. The model itself is what chapter 07's rungs (K-major) ran correctly on an H200;
    the MN-major (transposed V) half of it is CUTLASS's documentation, not yet run on this code base.
 2. The whole kernel, per thread: wgmma accumulator and register-A maps (CUTLASS's CLayout_64xN and
    ALayout_64x16), the mask compares (dk, ks), quad reductions, the warp-uniform conditional rescale,
    the OVERLAP=1 order (P_{j-1} V_{j-1} added before O is rescaled for tile j) and OVERLAP=0, bf16
    rounding of P, causal tile counts (ntiles, my_tiles), tails, cross-head TMA reads (the 2-D view) and
    the epilogue's store indices; O and LSE compared with a float64 reference at the chapter's tolerance.
 3. The mbarrier protocol (full_q, full_k/v[STAGES], empty[STAGES] with 4 CONSUMERS arrivals, parity
    waits), run under random interleavings with TMA completions delayed at random: no deadlock, no slot
    overwritten while a consumer may still read it, every consumer reads the tile it expects.
"""
import itertools
import math
import random

import numpy as np

SW = lambda a: a ^ (((a >> 7) & 7) << 4)          # 128-byte swizzle on byte addresses


def bf16(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return b.view(np.float32)


class Cfg:
    def __init__(self, HEAD_DIM=128, BLOCK_N=128, STAGES=2, CONSUMERS=2, OVERLAP=1, RESCALE_TAU=8.0):
        self.D, self.BN, self.ST, self.C, self.OV, self.TAU = HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, OVERLAP, RESCALE_TAU
        self.BM = 64 * CONSUMERS
        self.HALVES = HEAD_DIM // 64
        self.Q_SLAB = 64 * 128
        self.Q_WG = self.HALVES * self.Q_SLAB
        self.KV_SLAB = BLOCK_N * 128
        self.KV = self.HALVES * self.KV_SLAB
        self.STAGE = 2 * self.KV
        self.KV_OFF = CONSUMERS * self.Q_WG
        self.SL = (1 / math.sqrt(HEAD_DIM)) * 1.4426950408889634

    def __repr__(self):
        return f"d{self.D} BN{self.BN} st{self.ST} c{self.C} ov{self.OV}"


# ---------------------------------------------------------------------------------------------- 1.
def tma_store(img, base, g2d, row, col0, rows):
    """TMA box (rows x 64 columns at (row, col0) of the 2-D array g2d, zero past its end) into img."""
    R = g2d.shape[0]
    r = np.arange(rows)[:, None]
    c = np.arange(64)[None, :]
    src = np.zeros((rows, 64), dtype=g2d.dtype)
    ok = (row + np.arange(rows)) < R
    src[ok] = g2d[row + np.arange(rows)[ok], col0:col0 + 64]
    addr = SW(base + r * 128 + c * 2)
    img[addr // 2] = src


def kmajor_read(img, start, rows):
    """The rows x 16 operand wgmma reads through a K-major SW128 descriptor at `start` (SBO 1024)."""
    m = np.arange(rows)[:, None]
    k = np.arange(16)[None, :]
    return img[SW(start + (m >> 3) * 1024 + (m & 7) * 128 + 2 * k) // 2]


def mnmajor_read(img, start, lbo, n):
    """The 16 x n operand (K x N) wgmma reads through an MN-major SW128 descriptor (SBO 1024, LBO)."""
    k = np.arange(16)[:, None]
    nn = np.arange(n)[None, :]
    return img[SW(start + (k >> 3) * 1024 + (k & 7) * 128 + (nn >> 6) * lbo + 2 * (nn & 63)) // 2]


def check_layouts(cfg):
    rng = np.random.default_rng(1)
    rows_total = 3 * cfg.BM + 2 * cfg.BN
    Q = rng.integers(1, 60000, size=(rows_total, cfg.D)).astype(np.uint16)
    K = rng.integers(1, 60000, size=(rows_total, cfg.D)).astype(np.uint16)
    V = rng.integers(1, 60000, size=(rows_total, cfg.D)).astype(np.uint16)
    img = np.zeros((cfg.KV_OFF + cfg.ST * cfg.STAGE) // 2 + 64, dtype=np.uint16)
    m0, n0 = 5, 7                                   # arbitrary first rows (heads start anywhere)
    for c in range(cfg.C):
        for h in range(cfg.HALVES):
            tma_store(img, c * cfg.Q_WG + h * cfg.Q_SLAB, Q, m0 + 64 * c, 64 * h, 64)
    for s in range(cfg.ST):
        for h in range(cfg.HALVES):
            tma_store(img, cfg.KV_OFF + s * cfg.STAGE + h * cfg.KV_SLAB, K, n0 + s * cfg.BN, 64 * h, cfg.BN)
            tma_store(img, cfg.KV_OFF + s * cfg.STAGE + cfg.KV + h * cfg.KV_SLAB, V, n0 + s * cfg.BN, 64 * h, cfg.BN)
    for c in range(cfg.C):
        for kk in range(cfg.D // 16):               # qk_issue's offsets
            a = kmajor_read(img, c * cfg.Q_WG + (kk >> 2) * cfg.Q_SLAB + (kk & 3) * 32, 64)
            assert (a == Q[m0 + 64 * c:m0 + 64 * c + 64, 16 * kk:16 * kk + 16]).all(), ("Q", cfg, c, kk)
    for s in range(cfg.ST):
        sk = cfg.KV_OFF + s * cfg.STAGE
        for kk in range(cfg.D // 16):
            b = kmajor_read(img, sk + (kk >> 2) * cfg.KV_SLAB + (kk & 3) * 32, cfg.BN)
            assert (b == K[n0 + s * cfg.BN:n0 + (s + 1) * cfg.BN, 16 * kk:16 * kk + 16]).all(), ("K", cfg, s, kk)
        for kk in range(cfg.BN // 16):              # pv_issue's offsets
            b = mnmajor_read(img, sk + cfg.KV + kk * 2048, cfg.KV_SLAB, cfg.D)
            r0 = n0 + s * cfg.BN + 16 * kk
            assert (b == V[r0:r0 + 16, :]).all(), ("V", cfg, s, kk)
    # every start address the descriptors hold: 16-byte aligned, swizzle atoms 1024-aligned where they start
    assert cfg.KV_SLAB % 1024 == 0 and cfg.Q_SLAB % 1024 == 0 and cfg.KV_OFF % 1024 == 0 and cfg.STAGE % 1024 == 0
    assert (cfg.KV_SLAB >> 4) < (1 << 14)           # LBO fits the descriptor's 14 bits


# ---------------------------------------------------------------------------------------------- 2.
W_IDX = np.arange(128) >> 5                         # per thread of a consumer warpgroup
LANE = np.arange(128) & 31
G, T = LANE >> 2, LANE & 3


def acc_rc(N):
    """Row and column of accumulator register i of each of the 128 threads (m64nN, fp32)."""
    i = np.arange(N // 2)[None, :]
    j, q = i >> 2, i & 3
    rows = 16 * W_IDX[:, None] + G[:, None] + 8 * (q >> 1)
    cols = 8 * j + 2 * T[:, None] + (q & 1)
    return rows, cols


def regs_from(mat, N):
    r, c = acc_rc(N)
    return mat[r, c]


def mat_from(regs, N):
    r, c = acc_rc(N)
    m = np.zeros((64, N))
    m[r, c] = regs
    return m


def a_frag_matrix(p_lo, p_hi, BN):
    """P (64 x BN) from the bf16 A fragments: p[kk][i] holds (lo, hi) halves; ALayout_64x16 per k-step:
    reg 0: row g, keys 2t, 2t+1; reg 1: row g+8; reg 2: row g, keys 8+2t, 9+2t; reg 3: row g+8."""
    P = np.zeros((64, BN))
    row = 16 * W_IDX + G
    for kk in range(BN // 16):
        for i in range(4):
            r = row + 8 * (i & 1)
            c = 16 * kk + 8 * (i >> 1) + 2 * T
            P[r, c] = p_lo[:, kk, i]
            P[r, c + 1] = p_hi[:, kk, i]
    return P


def quad(x, op):
    y = x.reshape(4, 8, 4, *x.shape[1:])            # (warp, group, t, ...)
    r = op(y, axis=2, keepdims=True)
    return np.broadcast_to(r, y.shape).reshape(x.shape)


def softmax_tile(cfg, s, m_run, l, n0, wrow, S, causal, mask):
    """softmax_tile<MASK> of the kernel on the registers s (128, BN/2) of one consumer."""
    BN = cfg.BN
    i = np.arange(BN // 2)[None, :]
    j, q = i >> 2, i & 3
    dk = (n0 + 2 * T - wrow - G)[:, None]
    ks = (S - n0 - 2 * T)[:, None]
    s = s.copy()
    if mask:
        m = (8 * j + (q & 1) >= ks) | (bool(causal) & (dk + 8 * j + (q & 1) - 8 * (q >> 1) > 0))
        s[m] = -np.inf
    mx = np.stack([np.max(np.where((q >> 1) == h, s, -np.inf), axis=1) for h in (0, 1)], axis=1)
    tm = quad(mx, np.max) * cfg.SL
    grow = tm > m_run + cfg.TAU
    anyw = np.repeat(grow.any(axis=1).reshape(4, 32).any(axis=1), 32)   # __any_sync per warp
    alpha = np.ones((128, 2))
    m_new = np.maximum(m_run, tm)
    with np.errstate(invalid="ignore"):
        a = np.exp2(m_run - np.where(m_new == -np.inf, 0.0, m_new))
    alpha[anyw] = a[anyw]
    m_run = np.where(anyw[:, None], m_new, m_run)
    l = l * alpha
    nm = np.where(m_run == -np.inf, 0.0, -m_run)
    p = np.exp2(s * cfg.SL + nm[:, (q[0] >> 1)])
    for h in (0, 1):
        l[:, h] += np.sum(np.where((q >> 1) == h, p, 0.0), axis=1)
    return p, m_run, l, alpha, anyw


def pack(p, BN):
    pb = bf16(p.astype(np.float32)).astype(np.float64)
    lo = np.zeros((128, BN // 16, 4))
    hi = np.zeros((128, BN // 16, 4))
    for kk in range(BN // 16):
        for i in range(4):
            lo[:, kk, i] = pb[:, 8 * kk + 2 * i]
            hi[:, kk, i] = pb[:, 8 * kk + 2 * i + 1]
    return lo, hi


def kernel_model(cfg, Qh, Kh, Vh, S, causal):
    """O (bf16 values) and LSE of one (B H) batch, heads stacked as in the 2-D view (rows = BH * S)."""
    BH = Qh.shape[0] // S
    Ob = np.full(Qh.shape, np.nan)
    Lb = np.full(BH * S, np.nan)
    D, BN = cfg.D, cfg.BN
    gx = -(-S // cfg.BM)
    for y in range(BH):
        for bx in range(gx):
            m0 = (gx - 1 - bx if causal else bx) * cfg.BM
            n_end = min(S, m0 + cfg.BM) if causal else S
            ntiles = -(-n_end // BN)
            row0 = y * S
            for c in range(cfg.C):
                w0 = m0 + 64 * c
                wrow = w0 + 16 * W_IDX
                my = min(ntiles, -(-min(S, w0 + 64) // BN)) if causal else ntiles
                assert my >= 1
                # the 2-D view with zero fill past its end: what TMA delivers, next head's rows included
                qrows = row0 + w0 + np.arange(64)
                Qt = np.where((qrows < Qh.shape[0])[:, None], Qh[np.minimum(qrows, Qh.shape[0] - 1)], 0.0)
                o = np.zeros((128, D // 2))
                m_run = np.full((128, 2), -np.inf)
                l = np.zeros((128, 2))

                def tile(j):
                    rows = row0 + j * BN + np.arange(BN)
                    ok = (rows < Kh.shape[0])[:, None]
                    Kt = np.where(ok, Kh[np.minimum(rows, Kh.shape[0] - 1)], 0.0)
                    Vt = np.where(ok, Vh[np.minimum(rows, Vh.shape[0] - 1)], 0.0)
                    return Kt, Vt

                def sm(j, Kt):
                    s = regs_from(Qt @ Kt.T, BN)
                    n0 = j * BN
                    mask = n0 + BN > S or (causal and n0 + BN - 1 > w0)
                    if not mask:                    # the unmasked path must need no mask
                        keys = n0 + np.arange(BN)
                        assert keys.max() < S and (not causal or keys.max() <= w0)
                    return softmax_tile(cfg, s, m_run, l, n0, wrow, S, causal, mask)

                def pv(o, lo, hi, Vt):
                    return o + regs_from(a_frag_matrix(lo, hi, BN) @ Vt, D)

                if cfg.OV:
                    Kt, Vt = tile(0)
                    p, m_run, l, alpha, _ = sm(0, Kt)
                    lo, hi = pack(p, BN)
                    Vprev = Vt
                    for j in range(1, my):
                        Kt, Vt = tile(j)
                        p, m_run, l, alpha, anyw = sm(j, Kt)
                        o = pv(o, lo, hi, Vprev)            # P_{j-1} V_{j-1}, in flight meanwhile
                        sc = alpha[:, (np.arange(D // 2) & 3) >> 1]
                        o = np.where(anyw[:, None], o * sc, o)
                        lo, hi = pack(p, BN)
                        Vprev = Vt
                    o = pv(o, lo, hi, Vprev)
                else:
                    for j in range(my):
                        Kt, Vt = tile(j)
                        p, m_run, l, alpha, anyw = sm(j, Kt)
                        sc = alpha[:, (np.arange(D // 2) & 3) >> 1]
                        o = np.where(anyw[:, None], o * sc, o)
                        lo, hi = pack(p, BN)
                        o = pv(o, lo, hi, Vt)
                # epilogue (the kernel's store indices)
                l_row = quad(l, np.sum)
                for h in (0, 1):
                    r = wrow + G + 8 * h
                    inv = np.where(l_row[:, h] > 0, 1 / np.where(l_row[:, h] > 0, l_row[:, h], 1), 0.0)
                    for jj in range(D // 8):
                        for e in (0, 1):
                            val = bf16((o[:, 4 * jj + 2 * h + e] * inv).astype(np.float32))
                            col = 2 * T + 8 * jj + e
                            ok = r < S
                            Ob[row0 + r[ok], col[ok]] = val[ok]
                    ok = (r < S) & (T == 0)
                    lse = np.where(l_row[:, h] > 0, (m_run[:, h] + np.log2(np.where(l_row[:, h] > 0, l_row[:, h], 1))) * math.log(2), -np.inf)
                    Lb[row0 + r[ok]] = lse[ok]
    return Ob, Lb


def reference(Qh, Kh, Vh, S, causal):
    BH = Qh.shape[0] // S
    D = Qh.shape[1]
    q, k, v = (x.reshape(BH, S, D) for x in (Qh, Kh, Vh))
    s = np.einsum("bqd,bkd->bqk", q, k) / math.sqrt(D)
    if causal:
        s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    den = p.sum(-1, keepdims=True)
    w = p / den
    return (w @ v).reshape(-1, D), (m + np.log(den))[..., 0].reshape(-1), np.sqrt((w * w) @ (v * v)).reshape(-1, D)


def check_kernel(cfg, S, BH, causal, seed):
    rng = np.random.default_rng(seed)
    Qh, Kh, Vh = (bf16(rng.standard_normal((BH * S, cfg.D)).astype(np.float32)).astype(np.float64) for _ in range(3))
    if seed % 2:                                    # large scores: rescales by more than 2^8 happen
        Qh = bf16((Qh * 4).astype(np.float32)).astype(np.float64)
    O, L = kernel_model(cfg, Qh, Kh, Vh, S, causal)
    ro, rl, sd = reference(Qh, Kh, Vh, S, causal)
    rms = np.sqrt((ro ** 2).mean())
    assert np.isfinite(O).all() and np.isfinite(L).all(), ("not written / not finite", cfg, S, causal)
    bad = np.abs(O - ro) > 2 ** -8 * np.abs(ro) + 2 ** -6 * (rms + sd)
    assert not bad.any(), ("O", cfg, S, BH, causal, int(bad.sum()), np.abs(O - ro).max())
    assert (np.abs(L - rl) <= 1e-3 + 2 ** -12 * np.abs(rl)).all(), ("LSE", cfg, S, causal, np.abs(L - rl).max())
    return float(np.abs(O - ro).max() / rms)


# ---------------------------------------------------------------------------------------------- 3.
def ring_model(ntiles_list, STAGES, C, seed):
    """Random interleavings of the producer and C consumer warpgroups x 4 warps for one block per entry
    of ntiles_list (ntiles, my_tiles per consumer). mbarriers: phase counter + pending arrivals + tx."""
    rnd = random.Random(seed)
    ntiles, my = ntiles_list

    class Bar:
        def __init__(self, count):
            self.count, self.pend, self.tx, self.phase = count, count, 0, 0

        def arrive(self, tx=0):
            self.pend -= 1
            self.tx += tx
            self._maybe()

        def complete_tx(self, b):
            self.tx -= b
            self._maybe()

        def _maybe(self):
            if self.pend == 0 and self.tx == 0:
                self.phase += 1
                self.pend = self.count

        def done(self, parity):                      # try_wait.parity: phase with that parity complete
            return (self.phase & 1) != parity        # (the barrier is at most one phase short: checked below)

    full_k = [Bar(1) for _ in range(STAGES)]
    full_v = [Bar(1) for _ in range(STAGES)]
    empty = [Bar(4 * C) for _ in range(STAGES)]
    slot_tile = [None] * STAGES                     # what a slot holds once its copies land
    inflight = []                                   # (slot, kind, tile) copies not landed yet
    readers = [set() for _ in range(STAGES)]        # (consumer, warp) that may still read the slot

    def producer():
        for j in range(ntiles):
            s, ph = j % STAGES, (j // STAGES) & 1
            while not empty[s].done(ph ^ 1):
                yield
            assert empty[s].phase >= j // STAGES, "producer passed an empty wait too early"
            assert not readers[s], f"slot {s} refilled while {readers[s]} may read it"
            full_k[s].arrive(tx=1)
            inflight.append((s, "k", j))
            full_v[s].arrive(tx=1)
            inflight.append((s, "v", j))
            yield

    def consumer(c, w):
        # per warp: wait full k/v of each tile it computes (OVERLAP order: K_j then V_{j-1}), release after
        order = []
        for j in range(ntiles):
            if j < my[c]:
                order.append(("k", j))
                if j >= 1:
                    order.append(("v", j - 1))
                    order.append(("rel", j - 1))
            if j == my[c] - 1:
                order.append(("v", j))
                order.append(("rel", j))
            if j >= my[c]:
                order += [("k", j), ("v", j), ("rel", j)]
        for kind, j in order:
            s, ph = j % STAGES, (j // STAGES) & 1
            if kind in "kv":
                b = (full_k if kind == "k" else full_v)[s]
                while not b.done(ph):
                    yield
                assert b.phase == j // STAGES + 1, f"{kind} wait passed on the wrong phase"
                assert slot_tile[s] == (j, j) or kind == "k" and slot_tile[s][0] == j, (slot_tile[s], j)
                readers[s].add((c, w))
            else:
                readers[s].discard((c, w))
                empty[s].arrive()
            yield

    def landing():
        while True:
            if inflight and rnd.random() < 0.3:
                s, kind, j = inflight.pop(rnd.randrange(len(inflight)) if rnd.random() < 0.5 else 0)
                cur = slot_tile[s] or (None, None)
                slot_tile[s] = (j, cur[1]) if kind == "k" else (cur[0], j)
                (full_k if kind == "k" else full_v)[s].complete_tx(1)
            yield

    procs = [producer()] + [consumer(c, w) for c in range(C) for w in range(4)]
    land = landing()
    alive = list(procs)
    steps = 0
    while alive:
        steps += 1
        assert steps < 200000, "deadlock"
        next(land)
        p = rnd.choice(alive)
        try:
            next(p)
        except StopIteration:
            alive.remove(p)
    return steps


def main():
    cfgs = [Cfg(), Cfg(HEAD_DIM=64), Cfg(BLOCK_N=176), Cfg(BLOCK_N=64), Cfg(STAGES=3), Cfg(OVERLAP=0),
            Cfg(HEAD_DIM=64, CONSUMERS=3), Cfg(HEAD_DIM=64, BLOCK_N=192), Cfg(HEAD_DIM=64, OVERLAP=0)]
    for cfg in cfgs:
        check_layouts(cfg)
    print("1. layouts: Q/K K-major and V MN-major reads match the TMA boxes for", cfgs)
    worst = 0.0
    cases = [(1, 2, 0), (1, 1, 1), (17, 3, 1), (130, 2, 0), (130, 2, 1), (300, 1, 1), (257, 2, 0), (64, 2, 1)]
    for cfg in cfgs:
        for i, (S, BH, causal) in enumerate(cases):
            worst = max(worst, check_kernel(cfg, S, BH, causal, seed=i))
    print(f"2. kernel model: O and LSE within the chapter's bounds for {len(cfgs)} builds x {len(cases)} shapes "
          f"(S = 1..300, causal and not); worst |O - ref| / rms {worst:.2e}")
    n = 0
    for ST, C in itertools.product((2, 3, 4), (2, 3)):
        for ntiles in (1, 2, 3, 5, 9):
            for lag in range(C):                    # causal: consumer c may stop `lag` tiles early
                my = [max(1, ntiles - (lag if c == 0 else 0)) for c in range(C)]
                for seed in range(12):
                    ring_model((ntiles, my), ST, C, seed)
                    n += 1
    print(f"3. ring protocol: {n} random interleavings, no deadlock, no early refill, every wait on its tile")


if __name__ == "__main__":
    main()
