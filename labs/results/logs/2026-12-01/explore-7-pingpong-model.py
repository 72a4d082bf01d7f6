"""CPU model of the protocol of kernels/07-gemm-hopper/08_pingpong.cu (no GPU, no CUDA): one producer thread, two
consumer warpgroups, full/empty mbarriers with parity waits (try_wait.parity P passes when the barrier's
completed-phase count has parity != P, so a wait two phases early passes wrongly), TMA completing at random
later moments (and out of order), wgmma groups completing in issue order, wait_group 0/1, and the two
named barriers of the hand-over (bar.sync = arrive + wait for the round, bar.arrive; two arrivals by one
side in a round is an error). Each run picks the next step at random; it checks that every k-tile a
consumer reads holds the data loaded for it (no parity passed early, no slot overwritten before its
release), that no TMA writes a slot a wgmma may still read, that tile j's accumulation saw k-tiles
j*KT .. j*KT+KT-1 in order, that the mainloops never interleave, that no named barrier is left with a
dangling arrival, and that nothing deadlocks.

    python3 labs/results/logs/2026-12-01/explore-7-pingpong-model.py     # ~20k random runs, ~15 s

Mutations (no hand-over; starting every tile at parity 0) make it fail, as they should: see MUTATIONS."""
import random, sys

class MBar:
    def __init__(s, count): s.count = count; s.pending = count; s.tx = 0; s.phase = 0   # phase: completed phases
    def arrive(s, tx=0):
        s.pending -= 1; s.tx += tx; assert s.pending >= 0, "too many arrivals"; s._check()
    def complete_tx(s, b):
        s.tx -= b; s._check()
    def _check(s):
        if s.pending == 0 and s.tx == 0:
            s.phase += 1; s.pending = s.count
    def try_wait(s, parity): return (s.phase & 1) != parity

class NamedBar:
    def __init__(s): s.arrived = set(); s.round = 0
    def arrive(s, who):
        assert who not in s.arrived, f"double arrival by {who} in one round"
        s.arrived.add(who)
        if len(s.arrived) == 2:
            s.arrived = set(); s.round += 1

def run(tiles, KT, STAGES, IN_FLIGHT, seed):
    rnd = random.Random(seed)
    full = [MBar(1) for _ in range(STAGES)]; empty = [MBar(1) for _ in range(STAGES)]
    slot = [None] * STAGES          # tag of the k-tile whose bytes are in the slot
    readers = [set() for _ in range(STAGES)]   # k-tiles whose wgmma may still read the slot
    tma_inflight = []               # (slot, tag)
    bars = {1: NamedBar(), 2: NamedBar()}
    log_issue = []                  # (consumer, tile j, kt) in issue order
    results = {}

    def producer():
        s, ph = 0, 0
        for j in range(tiles):
            for kt in range(KT):
                g = j * KT + kt
                while not empty[s].try_wait(ph ^ 1):
                    yield "wait"
                full[s].arrive(tx=1)
                assert not readers[s], f"TMA into slot {s} while k-tiles {readers[s]} may read it"
                tma_inflight.append((s, g))
                yield "ok"
                s += 1
                if s == STAGES: s, ph = 0, ph ^ 1

    def consumer(c):
        groups = []                 # this warpgroup's wgmma groups: {slot, tag, done}
        j = c
        while j < tiles:
            g0 = j * KT; s = g0 % STAGES; ph = (g0 // STAGES) & 1
            if j > 0:               # bar.sync 1 + c
                b = bars[1 + c]; me = f"c{c}"
                r0 = b.round; b.arrive(me); yield "ok"
                while b.round == r0:
                    yield "wait"
            prev = None; acc = []
            for kt in range(KT):
                g = g0 + kt
                while not full[s].try_wait(ph):
                    yield "wait"
                assert slot[s] == g, f"c{c} tile {j} kt {kt}: slot {s} holds {slot[s]}, expected {g} (parity passed early)"
                readers[s].add(g)
                grp = {"slot": s, "tag": g, "done": False}
                groups.append(grp); pending_groups.append(grp)
                log_issue.append((c, j, kt)); acc.append(g)
                yield "ok"
                n_keep = 1 if IN_FLIGHT else 0
                while sum(not x["done"] for x in groups) > n_keep:
                    yield "wait"
                if IN_FLIGHT:
                    if prev is not None:
                        release(prev, c); yield "ok"
                    prev = (s, g)
                else:
                    release((s, g), c); yield "ok"
                s += 1
                if s == STAGES: s, ph = 0, ph ^ 1
            if j + 1 < tiles:       # bar.arrive on the other's barrier
                bars[2 - c].arrive(f"c{c}"); yield "ok"
            while any(not x["done"] for x in groups):
                yield "wait"
            if IN_FLIGHT and prev is not None:
                release(prev, c); yield "ok"
            results[j] = acc
            yield "ok"              # epilogue
            j += 2

    def release(sg, c):
        s, g = sg
        assert slot[s] == g, f"slot {s} overwritten before release of {g}"
        readers[s].discard(g)
        empty[s].arrive()

    pending_groups = []
    agents = {"p": producer(), "c0": consumer(0), "c1": consumer(1)}
    done = set()
    steps = 0
    while len(done) < 3:
        steps += 1
        if steps > 10_000_000: raise RuntimeError("too long")
        # async events: TMA completion, wgmma completion (in issue order across the SM's tensor pipe)
        events = []
        if tma_inflight: events.append("tma")
        if pending_groups: events.append("mma")
        live = [k for k in agents if k not in done]
        choices = live + events
        progressed = False
        order = choices[:]; rnd.shuffle(order)
        for ch in order:
            if ch == "tma":
                i = rnd.randrange(len(tma_inflight)) if rnd.random() < 0.3 else 0
                s, g = tma_inflight.pop(i); slot[s] = g; full[s].complete_tx(1); progressed = True; break
            if ch == "mma":
                pending_groups.pop(0)["done"] = True; progressed = True; break
            try:
                r = next(agents[ch])
            except StopIteration:
                done.add(ch); progressed = True; break
            if r == "ok": progressed = True; break
            # "wait": try others
        if not progressed:
            raise RuntimeError(f"deadlock: tiles={tiles} KT={KT} STAGES={STAGES} seed={seed} "
                               f"full={[f.phase for f in full]} empty={[e.phase for e in empty]}")
    # checks
    for j in range(tiles):
        assert results[j] == list(range(j * KT, j * KT + KT)), (j, results[j])
    # mainloops do not interleave: issue order is tile-major
    tiles_in_order = [t for _, t, _ in log_issue]
    assert tiles_in_order == sorted(tiles_in_order), "mainloops interleaved"
    for c, t, _ in log_issue: assert t % 2 == c
    assert not bars[1].arrived and not bars[2].arrived, "dangling named-barrier arrival at exit"
    return steps

MUTATIONS = {"no hand-over": (" if j > 0:               # bar.sync 1 + c", " if False:"),
             "parity 0 at every tile start": ("ph = (g0 // STAGES) & 1", "ph = 0"),
             "hand over even without a next tile": ("if j + 1 < tiles:       # bar.arrive", "if True:       # bar.arrive")}


def mutants():
    src = open(__file__).read().replace('if __name__ == "__main__":', "if False:")
    for name, (old, new) in MUTATIONS.items():
        ns = {}
        exec(compile(src.replace(old, new), name, "exec"), ns)
        fails = 0
        for tiles in (2, 3, 5):
            for KT in (1, 3, 7):
                for ST in (2, 4, 6):
                    for seed in range(10):
                        try:
                            ns["run"](tiles, KT, ST, 1, seed)
                        except (AssertionError, RuntimeError):
                            fails += 1
        print(f"mutant '{name}': {fails} of 270 runs fail" + ("" if fails else "  <- NOT caught"))

if __name__ == "__main__":
    n = 0
    for tiles in (0, 1, 2, 3, 4, 7, 12):
        for KT in (1, 2, 3, 5, 6, 7, 13):
            for STAGES in (2, 3, 4, 6, 7):
                for IF in (0, 1):
                    for seed in range(40):
                        run(tiles, KT, STAGES, IF, seed); n += 1
    print("ok", n, "runs")
    mutants()
