"""Chapter 06 kernel ladder (bf16 GEMM on tensor cores: WMMA, mma.sync + ldmatrix, cp.async rings, swizzles,
warp tiles, grouped tile order) on one GPU: check, time against cuBLAS and the mma.sync roof, sweep.

Run from anywhere on a GPU machine (cupy, numpy, torch; labkit is not used):

    python3 labs/results/logs/2026-12-01/gemm-mma-ladder-sweep.py [OUTDIR]

OUTDIR defaults to $OUTDIR, else $OUT, else the current directory; the results go to
OUTDIR/gemm-mma-ladder.json (rewritten after every phase, so a run cut short still leaves what it measured)
and a compact table is printed last.

C[M, N] = A[M, K] @ B[K, N], all row-major, bf16 in and out, fp32 accumulation (torch.matmul(a, b)).
Steps:
 1. every rung of kernels/06-gemm-tensor-cores/ is compiled with cupy.RawModule ("-std=c++17",
    "-arch=sm_XY" of this GPU, -D macros) and first launched in a spawned child process, never in this
    one: shapes (16,8,16), (128,128,64), (129,255,64), (100,1001,200), (1000,1000,1008) (tails in M, N
    and K; N % 8 != 0 goes to the *_anyn entry point), NaN-poisoned output between two canary regions,
    error max|c - ref| / (sqrt(K) rms(a) rms(b)) against an fp32 torch reference (TF32 off); every element
    must be within 2^-8 |ref| (bf16 output rounding) + 2^-10 sqrt(K) rms(a) rms(b) (accumulation order).
    A fault ends the child (its CUDA context is lost) and a fresh child takes the rest; a child silent
    for 45 s is killed. Meanwhile this process compiles the sweep variants (CPU only);
 2. an mma.sync roof probe (kernels/06-gemm-tensor-cores/00_mma_probe.cu) is timed;
 3. every rung that ran in the child is checked at 4096^3 (the best rung at 8192^3 too) and timed at
    4096^3 and 8192^3 against cuBLAS (torch.matmul on the same data, timed before and after the ladder):
    CUDA events, warm-up, L2 flushed by reading a 120 MiB buffer before every run, median of 20 runs;
 4. a sweep of the best rung's macros (BM, BN, BK, WM, WN, STAGES, SWIZZLE, GROUP_M; 34 configurations)
    at 8192^3, 10 runs each, each variant checked at (1000,1000,1008) and its timed output compared with
    cuBLAS's, within a 150 s guard; the fastest correct variant is checked against fp32 at 8192^3.
The whole script aims at well under 4 minutes (a global guard of 225 s trims what is left).
GEMM06_KDIR overrides the kernel folder; GEMM06_SMOKE=1 shrinks every shape (for a CPU smoke test of the
script's own logic against stand-in cupy/torch modules; its figures mean nothing).
"""
import argparse
import datetime
import json
import math
import multiprocessing as mp
import os
import pathlib
import sys
import time
import traceback

T0 = time.time()
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3]
KDIR = pathlib.Path(os.environ.get("GEMM06_KDIR", ROOT / "kernels" / "06-gemm-tensor-cores"))

GLOBAL_GUARD_S = 225.0
SWEEP_GUARD_S = 150.0
CHILD_STALL_S = 45.0
RUNS, SWEEP_RUNS, WARMUP = 20, 10, 3
FRONT, TAIL = 64, 4096                 # canary elements before and after C (64 x 2 B keeps 16-byte alignment)
POISON, CANARY = -1, 0x7FBF            # int16 views of bf16 NaN patterns (0xFFFF, 0x7FBF)
SMALL_SHAPES = [(16, 8, 16), (128, 128, 64), (129, 255, 64), (100, 1001, 200), (1000, 1000, 1008)]
SWEEP_CHECK = (1000, 1000, 1008)
TIME_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
if os.environ.get("GEMM06_SMOKE"):     # CPU smoke test of this script against stand-in modules: tiny shapes
    TIME_SHAPES = [(256, 256, 256), (512, 512, 512)]
    SWEEP_CHECK = (100, 104, 72)

# (label, file, entry point, -D macros): the ladder in order; labels are entry[variant].
LADDER = [
    ("gemm_wmma", "01_wmma.cu", "gemm_wmma", {}),
    ("gemm_mma_ldmatrix", "02_mma_ldmatrix.cu", "gemm_mma_ldmatrix", {}),
    ("gemm_cp_async[STAGES=1]", "03_cp_async.cu", "gemm_cp_async", {"STAGES": 1}),
    ("gemm_cp_async", "03_cp_async.cu", "gemm_cp_async", {}),
    ("gemm_swizzle[SWIZZLE=0]", "04_swizzle.cu", "gemm_swizzle", {"SWIZZLE": 0}),
    ("gemm_swizzle", "04_swizzle.cu", "gemm_swizzle", {}),
    ("gemm_multistage[STAGES=2]", "05_multistage.cu", "gemm_multistage", {"STAGES": 2}),
    ("gemm_multistage", "05_multistage.cu", "gemm_multistage", {}),
    ("gemm_multistage[STAGES=4]", "05_multistage.cu", "gemm_multistage", {"STAGES": 4}),
    ("gemm_warp_tiles", "06_warp_tiles.cu", "gemm_warp_tiles", {}),
    ("gemm_rasterized", "07_rasterized.cu", "gemm_rasterized", {}),
]
BEST = "gemm_rasterized"

SWEEP_BASE = dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=1, GROUP_M=8)


def _v(**kw):
    d = dict(SWEEP_BASE)
    d.update(kw)
    return d


# Every configuration compiles for sm_80 and sm_90 with no spills and fits 227 KB (checked with NVRTC).
SWEEP = [
    _v(),
    _v(STAGES=3), _v(STAGES=5), _v(STAGES=6),
    _v(BK=64, STAGES=3), _v(BK=64, STAGES=4),
    _v(SWIZZLE=0), _v(BK=64, STAGES=3, SWIZZLE=0),
    _v(GROUP_M=1), _v(GROUP_M=4), _v(GROUP_M=16), _v(GROUP_M=32),
    _v(BK=64, STAGES=3, GROUP_M=16), _v(BK=64, STAGES=4, GROUP_M=16), _v(STAGES=5, GROUP_M=16),
    _v(BM=256, BN=128), _v(BM=256, BN=128, GROUP_M=16), _v(BM=256, BN=128, GROUP_M=4),
    _v(BM=256, BN=128, STAGES=3), _v(BM=256, BN=128, STAGES=5), _v(BM=256, BN=128, BK=64, STAGES=3),
    _v(BM=256, BN=128, SWIZZLE=0),
    _v(BM=128, BN=128), _v(BM=128, BN=128, STAGES=6), _v(BM=128, BN=128, BK=64, STAGES=3),
    _v(BM=128, BN=128, BK=64, STAGES=4), _v(BM=128, BN=128, GROUP_M=16),
    _v(BM=128, BN=128, WN=32), _v(BM=128, BN=128, WN=32, BK=64, STAGES=3),
    _v(WM=32, WN=128), _v(WM=128, WN=32),
    _v(BM=128, BN=128, WM=32, WN=64), _v(BM=256, BN=128, WM=128, WN=32),
    _v(BM=256, BN=128, BK=64, STAGES=4),
]


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def sweep_label(d):
    return "gemm_rasterized[" + ",".join(f"{k}={v}" for k, v in d.items()) + "]"


def clean(x):
    """JSON-safe: NaN/inf -> None, recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


# ----------------------------------------------------------------------------------------------------
# GPU helpers (used in the child and in this process; cupy and torch are imported lazily)
# ----------------------------------------------------------------------------------------------------
_ctx = {}


def gpu():
    """cupy, numpy, torch, with TF32 off and CuPy on torch's current stream."""
    if not _ctx:
        import cupy as cp
        import numpy as np
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.cuda.init()
        ptr = torch.cuda.current_stream().cuda_stream
        if ptr:                                  # torch on a non-default stream: make CuPy use it too
            cp.cuda.ExternalStream(ptr).use()
        _ctx.update(cp=cp, np=np, torch=torch, cc=cp.cuda.Device().compute_capability)
    return _ctx["cp"], _ctx["np"], _ctx["torch"]


def options(defs):
    cp, _, _ = gpu()
    return ("-std=c++17", f"-arch=sm_{_ctx['cc']}", f"-I{KDIR.parent}") + tuple(f"-D{k}={v}" for k, v in defs.items())


class Gemm:
    """One build of one kernel file: its entry points and its launch configuration (from launch_config)."""

    def __init__(self, label, fname, entry, defs):
        cp, np, _ = gpu()
        self.label, self.fname, self.entry, self.defs = label, fname, entry, dict(defs)
        t = time.time()
        self.mod = cp.RawModule(code=(KDIR / fname).read_text(), options=options(defs))
        self.kern = self.mod.get_function(entry)           # compiles (or loads CuPy's cached cubin)
        self.compile_s = time.time() - t
        try:
            self.kern_anyn = self.mod.get_function(entry + "_anyn")
        except Exception:
            self.kern_anyn = None
        out = cp.zeros(16, dtype=cp.int32)
        self.mod.get_function("launch_config")((1,), (1,), (out,))
        c = [int(x) for x in out.get()]
        self.BM, self.BN, self.threads, self.smem, self.grid1d = c[0:5]
        self.BK, self.WM, self.WN, self.stages, self.swizzle, self.group_m = c[5:11]
        for k in (self.kern, self.kern_anyn):
            if k is not None and self.smem > 0:
                k.max_dynamic_shared_size_bytes = self.smem
        self.regs = int(self.kern.num_regs)
        self.local_bytes = int(self.kern.local_size_bytes)
        self.static_smem = int(self.kern.shared_size_bytes)
        self.regs_anyn = int(self.kern_anyn.num_regs) if self.kern_anyn is not None else None
        self.local_bytes_anyn = int(self.kern_anyn.local_size_bytes) if self.kern_anyn is not None else None

    def config(self):
        tiles = "swizzled" if self.swizzle else "padded"
        s = (f"{self.BM}x{self.BN}x{self.BK} w{self.WM}x{self.WN} {self.threads}t s{self.stages} {tiles}")
        return s + (f" g{self.group_m}" if self.grid1d else "")

    def info(self):
        return dict(label=self.label, file=self.fname, entry=self.entry, defs=self.defs, config=self.config(),
                    BM=self.BM, BN=self.BN, BK=self.BK, WM=self.WM, WN=self.WN, stages=self.stages,
                    swizzle=self.swizzle, group_m=self.group_m, threads=self.threads,
                    dynamic_smem=self.smem, static_smem=self.static_smem, grid_1d=bool(self.grid1d),
                    regs=self.regs, local_bytes=self.local_bytes, regs_anyn=self.regs_anyn,
                    local_bytes_anyn=self.local_bytes_anyn, compile_s=round(self.compile_s, 2))

    def launcher(self, a, b, c, M, N, K):
        """A zero-argument function that launches C = A @ B (arguments checked and packed once, so that
        timing loops pay only CuPy's launch call between their events)."""
        cp, np, _ = gpu()
        if K % 8:
            raise ValueError(f"{self.label}: K = {K} is not a multiple of 8 (contract: K % 8 == 0)")
        for name, arr in (("A", a), ("B", b), ("C", c)):
            if arr.data.ptr % 16:
                raise ValueError(f"{self.label}: {name} is not 16-byte aligned (contract)")
        k = self.kern if N % 8 == 0 else self.kern_anyn
        if k is None:
            raise ValueError(f"{self.label}: N % 8 != 0 needs the _anyn entry point, not built")
        tm, tn = -(-M // self.BM), -(-N // self.BN)
        grid = (tm * tn, 1, 1) if self.grid1d else (tn, tm, 1)
        block, args, smem = (self.threads, 1, 1), (a, b, c, np.int32(M), np.int32(N), np.int32(K)), self.smem
        return lambda: k(grid, block, args, shared_mem=smem)

    def launch(self, a, b, c, M, N, K):
        self.launcher(a, b, c, M, N, K)()


def as_cupy(t):
    """A torch bf16 CUDA tensor as a CuPy int16 array sharing its memory."""
    cp, _, torch = gpu()
    v = t.contiguous().view(torch.int16)
    try:
        return cp.from_dlpack(v)
    except Exception:
        return cp.asarray(v)


class Problem:
    """Fresh random bf16 inputs of one shape, their fp32 reference and the error scale."""

    def __init__(self, M, N, K, seed, want_ref=True):
        cp, _, torch = gpu()
        self.M, self.N, self.K = M, N, K
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        self.a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        self.b = torch.randn(K, N, device="cuda", generator=g).to(torch.bfloat16)
        self.a_c, self.b_c = as_cupy(self.a), as_cupy(self.b)
        ra = float(self.a.float().pow(2).mean().sqrt())
        rb = float(self.b.float().pow(2).mean().sqrt())
        self.sigma = math.sqrt(K) * ra * rb
        self.ref = torch.matmul(self.a.float(), self.b.float()) if want_ref else None

    def out_buffer(self):
        cp, _, _ = gpu()
        n = self.M * self.N
        buf = cp.full(FRONT + n + TAIL, POISON, dtype=cp.int16)
        buf[:FRONT] = CANARY
        buf[FRONT + n:] = CANARY
        return buf, buf[FRONT:FRONT + n]

    def evaluate(self, buf, ref=None, rel=2.0 ** -8, absf=2.0 ** -10):
        """Canaries, NaN poison, elementwise bound |c - ref| <= rel |ref| + absf sigma."""
        cp, _, torch = gpu()
        n = self.M * self.N
        ref = self.ref if ref is None else ref
        canary_ok = bool((buf[:FRONT] == CANARY).all()) and bool((buf[FRONT + n:] == CANARY).all())
        c = torch.from_dlpack(buf[FRONT:FRONT + n]).view(torch.bfloat16).float().view(self.M, self.N)
        finite = bool(torch.isfinite(c).all())
        diff = (c - ref).abs()
        err = float(torch.nan_to_num(diff, nan=float("inf")).max()) / self.sigma
        within = bool((diff <= ref.abs() * rel + absf * self.sigma).all())
        tol = float(ref.abs().max()) * rel / self.sigma + absf
        del c, diff
        return dict(ok=canary_ok and finite and within, err=err, tol=tol, canary_ok=canary_ok,
                    finite=finite, within=within)


def check(gm, prob):
    cp, _, _ = gpu()
    buf, view = prob.out_buffer()
    gm.launch(prob.a_c, prob.b_c, view, prob.M, prob.N, prob.K)
    cp.cuda.Device().synchronize()
    r = prob.evaluate(buf)
    r["shape"] = [prob.M, prob.N, prob.K]
    return r


_flush = {}


def flush_l2():
    """Read a 120 MiB buffer (twice the H200's L2): evicts the inputs without leaving dirty lines."""
    cp, np, _ = gpu()
    if not _flush:
        src = r'''extern "C" __global__ void l2_flush(const int4* __restrict__ p, long long n, int* sink) {
            int acc = 0;
            for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
                 i += (long long)gridDim.x * blockDim.x) { int4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
            if (acc == 0x7123abcd) sink[0] = acc; }'''
        k = cp.RawModule(code=src, options=("-std=c++17",)).get_function("l2_flush")
        n = (120 << 20) // 16
        buf = cp.zeros(n * 4, dtype=cp.int32)
        sink = cp.zeros(1, dtype=cp.int32)
        sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
        _flush.update(k=k, buf=buf, n=n, sink=sink, grid=sms * 8)
    _flush["k"]((_flush["grid"],), (256,), (_flush["buf"], np.int64(_flush["n"]), _flush["sink"]))


def bench(fn, runs=RUNS, warmup=WARMUP, flush=True):
    cp, _, _ = gpu()
    for _ in range(warmup):
        fn()
    evs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(runs)]
    for e0, e1 in evs:
        if flush:
            flush_l2()
        e0.record()
        fn()
        e1.record()
    evs[-1][1].synchronize()
    ts = sorted(cp.cuda.get_elapsed_time(e0, e1) for e0, e1 in evs)
    q = lambda f: ts[min(len(ts) - 1, int(f * (len(ts) - 1) + 0.5))]
    med = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
    return dict(median_ms=med, min_ms=ts[0], max_ms=ts[-1], q1_ms=q(0.25), q3_ms=q(0.75), runs=runs)


# ----------------------------------------------------------------------------------------------------
# Step 1: the child process (compile + small-shape checks of the ladder)
# ----------------------------------------------------------------------------------------------------
def _sticky_cuda_error():
    """True if this process's CUDA context no longer works (after an illegal address, a trap...)."""
    cp, _, _ = gpu()
    try:
        cp.cuda.Device().synchronize()
        x = cp.arange(4)
        return int(x.sum()) != 6
    except Exception:
        return True


def child_main(items, out_path):
    def emit(d):
        with open(out_path, "a") as f:
            f.write(json.dumps(clean(d)) + "\n")
    try:
        gpu()
    except Exception as e:
        emit(dict(event="fatal", error=repr(e)))
        sys.exit(2)
    problems = {}
    for label, fname, entry, defs in items:
        emit(dict(event="start", label=label))
        rec = dict(event="done", label=label, checks=[])
        try:
            gm = Gemm(label, fname, entry, defs)
            rec["build"] = gm.info()
            for i, shape in enumerate(SMALL_SHAPES):
                if shape not in problems:
                    problems[shape] = Problem(*shape, seed=1000 + i)
                r = check(gm, problems[shape])
                rec["checks"].append(r)
            rec["ok"] = all(r["ok"] for r in rec["checks"])
        except Exception as e:
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
            rec["traceback"] = traceback.format_exc()[-3000:]
            if _sticky_cuda_error():
                rec["fault"] = True
                emit(rec)
                sys.exit(3)
        emit(rec)
    sys.exit(0)


def read_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except FileNotFoundError:
        pass
    return out


def run_preflight(items, workdir, while_waiting=None, target=None):
    """Run `items` through child processes; returns {label: record}. `while_waiting()` is called (and must
    return quickly, True to be called again) while a child runs."""
    ctx = mp.get_context("spawn")
    results, remaining, attempt = {}, list(items), 0
    while remaining and attempt < 5 and time.time() - T0 < GLOBAL_GUARD_S - 60:
        attempt += 1
        path = workdir / f"preflight-{attempt}.jsonl"
        if path.exists():
            path.unlink()
        p = ctx.Process(target=target or child_main, args=(remaining, str(path)))
        p.start()
        last_n, last_t, killed = 0, time.time(), False
        more = while_waiting is not None
        while p.is_alive():
            if more:
                more = bool(while_waiting())
            else:
                p.join(0.5)
            n = len(read_lines(path))
            if n != last_n:
                last_n, last_t = n, time.time()
            elif time.time() - last_t > CHILD_STALL_S:
                log(f"preflight child silent for {CHILD_STALL_S:.0f} s: killed")
                p.kill()
                p.join(5)
                killed = True
                break
        p.join(5)
        lines = read_lines(path)
        started = None
        for d in lines:
            if d.get("event") == "start":
                started = d["label"]
            elif d.get("event") == "done":
                results[d["label"]] = d
                started = None
                st = "ok" if d.get("ok") else ("FAULT" if d.get("fault") else "FAILED")
                b = d.get("build", {})
                errs = " ".join(f"{r['err']:.2e}" if r.get("err") is not None else "nan"
                                for r in d.get("checks", []))
                log(f"preflight {d['label']:28s} {st:6s} regs {b.get('regs')} local {b.get('local_bytes')} "
                    f"smem {b.get('dynamic_smem')} compile {b.get('compile_s')} s  errs {errs}"
                    + (f"  {d.get('error', '')[:300]}" if not d.get("ok") else ""))
            elif d.get("event") == "fatal":
                log("preflight child could not start:", d.get("error"))
                return results
        if started is not None and started not in results:   # killed or crashed inside this item
            why = (f"no progress for {CHILD_STALL_S:.0f} s (a hang?): killed" if killed
                   else f"child died (exit code {p.exitcode}) while running it")
            results[started] = dict(event="done", label=started, ok=False, fault=True, error=why)
            log(f"preflight {started}: {why}")
        remaining = [it for it in remaining if it[0] not in results]
    for it in remaining:
        results[it[0]] = dict(event="done", label=it[0], ok=False, error="not reached by the preflight")
    return results


# ----------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default=os.environ.get("OUTDIR") or os.environ.get("OUT") or ".")
    args = ap.parse_args()
    outdir = pathlib.Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out_json = outdir / "gemm-mma-ladder.json"

    cp, np, torch = gpu()
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    res = dict(
        script="labs/results/logs/2026-12-01/gemm-mma-ladder-sweep.py",
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=dict(name=gpu_name, sms=sms, cc=_ctx["cc"], l2_bytes=props.get("l2CacheSize"),
                 clock_khz=props.get("clockRate"), driver=cp.cuda.runtime.driverGetVersion(),
                 runtime=cp.cuda.runtime.runtimeGetVersion()),
        versions=dict(cupy=cp.__version__, torch=torch.__version__, numpy=np.__version__,
                      python=sys.version.split()[0]),
        method=dict(runs=RUNS, sweep_runs=SWEEP_RUNS, warmup=WARMUP, l2_flush="read 120 MiB before every run",
                    error="max|c - ref| / (sqrt(K) rms(a) rms(b)), fp32 torch reference, TF32 off",
                    bound="|c - ref| <= 2^-8 |ref| + 2^-10 sqrt(K) rms(a) rms(b) elementwise"),
        preflight={}, roof=None, cublas=[], ladder=[], checks=[], sweep=[], best=None, errors=[])

    def save():
        try:
            out_json.write_text(json.dumps(clean(res), indent=1))
        except Exception as e:
            log("could not write", out_json, e)

    log(f"{gpu_name}, {sms} SMs, sm_{_ctx['cc']}, CuPy {cp.__version__}, torch {torch.__version__}; "
        f"kernels from {KDIR}; results to {out_json}")

    def work():
        # ---- step 1: preflight in a child; compile the sweep variants here meanwhile --------------------
        sweep_builds, sweep_todo = {}, list(SWEEP)
        t_pre = time.time()

        def compile_next():
            if not sweep_todo or time.time() - T0 > GLOBAL_GUARD_S - 90:
                return False
            d = sweep_todo.pop(0)
            lab = sweep_label(d)
            try:
                sweep_builds[lab] = Gemm(lab, "07_rasterized.cu", "gemm_rasterized", dict(d, ANYN_ENTRY=0))
            except Exception as e:
                sweep_builds[lab] = e
            return True

        pre = run_preflight(LADDER, outdir, while_waiting=compile_next)
        res["preflight"] = pre
        log(f"preflight done in {time.time() - t_pre:.1f} s; {len(sweep_builds)} sweep variants compiled meanwhile")
        save()

        # ---- step 2: the mma.sync roof ------------------------------------------------------------------
        roof = None
        try:
            probe = cp.RawModule(code=(KDIR / "00_mma_probe.cu").read_text(),
                                 options=options({})).get_function("mma_probe")
            sink = cp.zeros(8 * sms, dtype=cp.float32)
            blocks, iters = 4 * sms, 16384
            flops = blocks * 8 * iters * 8 * 4096
            t = bench(lambda: probe((blocks,), (256,), (sink, np.int32(iters))), runs=10, warmup=2, flush=False)
            roof = flops / (t["median_ms"] * 1e-3) / 1e12
            res["roof"] = dict(kernel="mma_probe", blocks=blocks, threads=256, iters=iters, flops=flops,
                               regs=int(probe.num_regs), tflops=roof, **t)
            log(f"mma.sync roof probe: {t['median_ms']:.3f} ms, {roof:.1f} TFLOP/s ({blocks} blocks x 8 warps)")
        except Exception as e:
            res["errors"].append(dict(where="roof", error=repr(e), traceback=traceback.format_exc()[-2000:]))
            log("roof probe FAILED:", repr(e))
        save()

        # ---- step 3: ladder builds in this process (CuPy's cache makes these loads), checks, timings ------
        builds = {}
        for label, fname, entry, defs in LADDER:
            p = pre.get(label, {})
            if p.get("fault") or "build" not in p:
                log(f"skip {label}: {p.get('error', 'no preflight record')[:200]}")
                continue
            try:
                builds[label] = Gemm(label, fname, entry, defs)
            except Exception as e:
                res["errors"].append(dict(where=f"build {label}", error=repr(e)))
                log(f"build {label} FAILED in the parent: {e!r}")

        cublas_ref = {}
        for si, (M, N, K) in enumerate(TIME_SHAPES):
            if time.time() - T0 > GLOBAL_GUARD_S - 40:
                log("global guard: skipping the rest of the ladder timings")
                break
            shape_key = f"{M}x{N}x{K}"
            flops = 2.0 * M * N * K
            try:
                prob = Problem(M, N, K, seed=2000 + si)
            except Exception as e:
                res["errors"].append(dict(where=f"inputs {shape_key}", error=repr(e)))
                log(f"inputs {shape_key} FAILED: {e!r}")
                continue
            c_t = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

            def cublas_run():
                torch.matmul(prob.a, prob.b, out=c_t)

            try:
                t_before = bench(cublas_run)
                cublas_run()
                torch.cuda.synchronize()
                cub_err = float((c_t.float() - prob.ref).abs().max()) / prob.sigma
                cublas_ref[shape_key] = c_t.clone()
            except Exception as e:
                res["errors"].append(dict(where=f"cublas {shape_key}", error=repr(e)))
                log(f"cuBLAS {shape_key} FAILED: {e!r}")
                t_before, cub_err = None, None
            for label, gm in builds.items():
                rec = dict(kernel=label, file=gm.fname, config=gm.config(), shape=shape_key, flops=flops,
                           regs=gm.regs, local_bytes=gm.local_bytes, preflight_ok=bool(pre[label].get("ok")))
                try:
                    want_check = si == 0 or label == BEST
                    if want_check:
                        chk = check(gm, prob)
                        rec.update(err=chk["err"], ok=chk["ok"], tol=chk["tol"])
                        res["checks"].append(dict(kernel=label, **chk))
                    buf, view = prob.out_buffer()
                    t = bench(gm.launcher(prob.a_c, prob.b_c, view, M, N, K))
                    rec.update(t)
                    rec["tflops"] = flops / (t["median_ms"] * 1e-3) / 1e12
                    if shape_key in cublas_ref:              # the timed output against cuBLAS's, every time
                        ev = prob.evaluate(buf, ref=cublas_ref[shape_key].float(), rel=2.0 ** -7, absf=2.0 ** -9)
                        rec["vs_cublas_err"], rec["vs_cublas_ok"] = ev["err"], ev["ok"]
                    del buf, view
                    log(f"{label:28s} {shape_key}: {t['median_ms']:.3f} ms {rec['tflops']:6.1f} TFLOP/s"
                        + (f"  err {rec['err']:.2e} {'ok' if rec['ok'] else 'WRONG'}" if "err" in rec else ""))
                except Exception as e:
                    rec["error"] = repr(e)[:1000]
                    log(f"{label} {shape_key} FAILED: {e!r}")
                    if _sticky_cuda_error():
                        res["errors"].append(dict(where=f"{label} {shape_key}", error="CUDA context lost"))
                        res["ladder"].append(rec)
                        save()
                        raise
                res["ladder"].append(rec)
            try:
                t_after = bench(cublas_run)
            except Exception as e:
                t_after = None
                res["errors"].append(dict(where=f"cublas after {shape_key}", error=repr(e)))
            meds = [t["median_ms"] for t in (t_before, t_after) if t]
            if meds:
                cub_ms = sum(meds) / len(meds)
                cub = dict(kernel="cublas (torch.matmul)", shape=shape_key, flops=flops, median_ms=cub_ms,
                           before=t_before, after=t_after, tflops=flops / (cub_ms * 1e-3) / 1e12, err=cub_err)
                res["cublas"].append(cub)
                log(f"cuBLAS {shape_key}: before {meds[0]:.3f} ms, after {meds[-1]:.3f} ms: "
                    f"{cub['tflops']:.1f} TFLOP/s")
                for rec in res["ladder"]:
                    if rec["shape"] == shape_key and "tflops" in rec:
                        rec["pct_cublas"] = 100.0 * rec["tflops"] / cub["tflops"]
                        if roof:
                            rec["pct_roof"] = 100.0 * rec["tflops"] / roof
            prob = c_t = None
            torch.cuda.empty_cache()
            save()

        # ---- step 4: the sweep of the best rung at 8192^3 (the last timing shape) ----------------------
        M, N, K = TIME_SHAPES[-1]
        shape_key = f"{M}x{N}x{K}"
        flops = 2.0 * M * N * K
        cub8 = next((c for c in res["cublas"] if c["shape"] == shape_key), None)
        t_sweep = time.time()
        try:
            prob = Problem(M, N, K, seed=3000, want_ref=False)
            small = Problem(*SWEEP_CHECK, seed=3001)
            prob_cub = torch.matmul(prob.a, prob.b)          # cuBLAS on the sweep's own data
            cref_f = prob_cub.float()
            del prob_cub
        except Exception as e:
            res["errors"].append(dict(where="sweep inputs", error=repr(e)))
            log(f"sweep inputs FAILED: {e!r}")
            prob = None
        n_cfg = len(SWEEP)
        for i, d in enumerate(SWEEP):
            if prob is None:
                break
            if time.time() - t_sweep > SWEEP_GUARD_S or time.time() - T0 > GLOBAL_GUARD_S - 15:
                log(f"sweep guard reached after {i} of {n_cfg} configurations")
                res["sweep_cut_after"] = i
                break
            lab = sweep_label(d)
            rec = dict(kernel=lab, defs=d, shape=shape_key, flops=flops)
            try:
                gm = sweep_builds.get(lab)
                if gm is None:
                    gm = Gemm(lab, "07_rasterized.cu", "gemm_rasterized", dict(d, ANYN_ENTRY=0))
                if isinstance(gm, Exception):
                    raise gm
                rec.update(config=gm.config(), regs=gm.regs, local_bytes=gm.local_bytes, dynamic_smem=gm.smem,
                           compile_s=round(gm.compile_s, 2))
                chk = check(gm, small)
                rec.update(check_err=chk["err"], check_ok=chk["ok"])
                buf, view = prob.out_buffer()
                t = bench(gm.launcher(prob.a_c, prob.b_c, view, M, N, K), runs=SWEEP_RUNS, warmup=2)
                rec.update(t)
                rec["tflops"] = flops / (t["median_ms"] * 1e-3) / 1e12
                ev = prob.evaluate(buf, ref=cref_f, rel=2.0 ** -7, absf=2.0 ** -9)
                rec["vs_cublas_err"], rec["vs_cublas_ok"] = ev["err"], ev["ok"]
                rec["ok"] = bool(chk["ok"] and ev["ok"])
                del buf, view
                if cub8:
                    rec["pct_cublas"] = 100.0 * rec["tflops"] / cub8["tflops"]
                if roof:
                    rec["pct_roof"] = 100.0 * rec["tflops"] / roof
                log(f"[sweep {i + 1:2d}/{n_cfg}] {gm.config():42s} regs {gm.regs:3d} local {gm.local_bytes} "
                    f"{t['median_ms']:.3f} ms {rec['tflops']:6.1f} TFLOP/s"
                    + (f" {rec['pct_cublas']:5.1f}% cuBLAS" if cub8 else "")
                    + f"  {'ok' if rec['ok'] else 'WRONG'} ({chk['err']:.1e}, vs cuBLAS {ev['err']:.1e})")
            except Exception as e:
                rec["error"] = repr(e)[:1000]
                log(f"[sweep {i + 1:2d}/{n_cfg}] {lab} FAILED: {e!r}"[:400])
                if _sticky_cuda_error():
                    res["errors"].append(dict(where=lab, error="CUDA context lost"))
                    res["sweep"].append(rec)
                    save()
                    raise
            res["sweep"].append(rec)
            if (i + 1) % 5 == 0:
                save()
        save()

        # the fastest correct, spill-free variant: checked against fp32 at 8192^3
        good = [r for r in res["sweep"] if r.get("ok") and r.get("tflops") and not r.get("local_bytes")]
        if good and prob is not None and time.time() - T0 < GLOBAL_GUARD_S - 5:
            top = max(good, key=lambda r: r["tflops"])
            best = dict(kernel=top["kernel"], defs=top["defs"], config=top.get("config"), tflops=top["tflops"],
                        median_ms=top["median_ms"], pct_cublas=top.get("pct_cublas"), pct_roof=top.get("pct_roof"))
            try:
                del cref_f
                prob.ref = torch.matmul(prob.a.float(), prob.b.float())
                gm = sweep_builds.get(top["kernel"])
                if not isinstance(gm, Gemm):
                    gm = Gemm(top["kernel"], "07_rasterized.cu", "gemm_rasterized", dict(top["defs"], ANYN_ENTRY=0))
                chk = check(gm, prob)
                best.update(err_8192=chk["err"], ok_8192=chk["ok"])
                res["checks"].append(dict(kernel=top["kernel"], **chk))
                log(f"best sweep variant {top.get('config')}: {top['tflops']:.1f} TFLOP/s, fp32 check at 8192^3: "
                    f"err {chk['err']:.2e} {'ok' if chk['ok'] else 'WRONG'}")
            except Exception as e:
                best["error"] = repr(e)
                log(f"best-variant check FAILED: {e!r}")
            res["best"] = best
        save()

    try:
        work()
    except Exception as e:
        res["errors"].append(dict(where="main", error=repr(e), traceback=traceback.format_exc()[-3000:]))
        log("run stopped early:", repr(e))
        traceback.print_exc()
    finally:
        save()
        print_table(res, out_json)


def print_table(res, out_json):
    roof = res["roof"]["tflops"] if res.get("roof") else None
    rows = []
    if res["roof"]:
        r = res["roof"]
        rows.append(("mma_probe (roof)", f"{r['blocks']} blocks x 8 warps", "-", r["median_ms"], r["tflops"],
                     None, 100.0, None, True))
    for c in res["cublas"]:
        rows.append(("cublas (torch.matmul)", "-", c["shape"], c["median_ms"], c["tflops"], 100.0,
                     100.0 * c["tflops"] / roof if roof else None, c.get("err"), True))
    for rec in res["ladder"]:
        if "tflops" in rec:
            rows.append((rec["kernel"], rec["config"], rec["shape"], rec["median_ms"], rec["tflops"],
                         rec.get("pct_cublas"), rec.get("pct_roof"), rec.get("err"),
                         rec.get("ok", rec.get("preflight_ok")) and rec.get("vs_cublas_ok", True)))
        else:
            rows.append((rec["kernel"], rec.get("config", "-"), rec["shape"], None, None, None, None, None, False))
    sw = sorted([r for r in res["sweep"] if "tflops" in r], key=lambda r: -r["tflops"])
    for rec in sw:
        rows.append(("sweep " + ("*" if rec.get("local_bytes") else ""), rec["config"], rec["shape"],
                     rec["median_ms"], rec["tflops"], rec.get("pct_cublas"), rec.get("pct_roof"),
                     rec.get("check_err"), rec.get("ok")))
    for rec in res["sweep"]:
        if "tflops" not in rec:
            rows.append(("sweep FAILED", rec.get("config", rec["kernel"])[:44], rec["shape"], None, None, None,
                         None, None, False))
    f = lambda x, fmt: (fmt.format(x) if x is not None else "-")
    print()
    print(f"{'kernel':28s} {'config':44s} {'shape':15s} {'ms':>8s} {'TFLOP/s':>8s} {'%cuBLAS':>8s} "
          f"{'%roof':>6s} {'max err':>9s} ok")
    for k, cfg, shp, ms, tf, pc, pr, err, ok in rows:
        print(f"{k[:28]:28s} {cfg[:44]:44s} {shp:15s} {f(ms, '{:8.3f}'):>8s} {f(tf, '{:8.1f}'):>8s} "
              f"{f(pc, '{:7.1f}%'):>8s} {f(pr, '{:5.1f}%'):>6s} {f(err, '{:9.2e}'):>9s} "
              f"{'yes' if ok else 'NO'}")
    if res["best"]:
        b = res["best"]
        print(f"\nbest: {b['config']}: {b['tflops']:.1f} TFLOP/s, {f(b.get('pct_cublas'), '{:.1f}')}% of cuBLAS, "
              f"{f(b.get('pct_roof'), '{:.1f}')}% of the mma.sync roof; fp32 check at 8192^3: "
              f"{'ok' if b.get('ok_8192') else 'not ok'} (err {f(b.get('err_8192'), '{:.2e}')})")
    print(f"\n{len(res['errors'])} errors; wrote {out_json}; total {time.time() - T0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
