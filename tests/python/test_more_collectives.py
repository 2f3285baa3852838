"""What test_collectives.py leaves out: dist.all_gather_coalesced, CPU tensors of other strides
(transposes, slices with a step) in the ops test_futures.py leaves out, bool and complex tensors, the
dtypes chorus refuses, and the ops' names in torch.profiler's events. Each result is checked
against a reference computed from every rank's inputs and, where gloo 1.13 takes the case,
against gloo's result in the same run. Run by launch_ranks.py with 2 and 3 ranks; a failure
raises, so the rank exits non-zero."""
import sys
import warnings

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import chorus
from common import check, init, input_of, reduce_ref

warnings.filterwarnings("ignore", message="torch.distributed.all_(gather|reduce)_coalesced will be deprecated")
rank, world, gloo = init()
pg = dist.distributed_c10d._get_default_group()  # the backend itself: no view_as_real on the way
cases = 0


def flat(t):
    # Complex as pairs of reals (check() compares floats within a tolerance), any shape as 1-D.
    return (torch.view_as_real(t) if t.is_complex() else t).reshape(-1)


def compare(what, mine, theirs, want):
    global cases
    check(what + " (against the reference)", flat(mine), flat(want), world)
    if theirs is not None:
        check(what + " (against gloo)", flat(mine), flat(theirs), world)
    cases += 1


def raises(what, exc, text, fn):
    """fn raises exc (every rank alike: the checks are local), its message holding `text`."""
    global cases
    try:
        fn()
    except exc as e:
        if text not in str(e):
            raise AssertionError(f"{what}: raised {type(e).__name__} without {text!r}: {e}") from None
        cases += 1
        return
    raise AssertionError(f"{what}: did not raise {exc.__name__}")


def strided(t):
    """t's values in a tensor of other strides: every second element of a buffer twice as long,
    whose other elements hold a mark (-7, or True) that unchanged() checks."""
    base = torch.ones(2 * t.numel(), dtype=torch.bool) if t.dtype == torch.bool else \
        torch.full((2 * t.numel(),), -7, dtype=t.dtype)
    strides, k = [], 2
    for size in reversed(t.shape):
        strides.insert(0, k)
        k *= size
    v = base.as_strided(t.shape, strides)
    v.copy_(t)
    assert not v.is_contiguous() or t.numel() <= 1
    return v, base


def unchanged(what, base):
    gaps = base[1::2]
    want = torch.ones_like(gaps) if base.dtype == torch.bool else torch.full_like(gaps, -7)
    if not torch.equal(gaps, want):
        raise AssertionError(f"{what}: the op wrote memory between the tensor's elements")


# --- dist.all_gather_coalesced ---------------------------------------------------------------
SHAPES = [(3,), (2, 5), (1000,), (4, 1, 3)]
for dt in (torch.float32, torch.float64, torch.int64, torch.complex64, torch.bool):
    def values(r, i, shape):
        t = input_of(r, torch.Size(shape).numel(), torch.int64, salt=i).reshape(shape)  # -30 .. 29
        if dt == torch.bool:
            return t % 2 == 1
        if dt.is_complex:
            return torch.complex(t.to(torch.float32), (t * 3 - 1).to(torch.float32))
        return t.to(dt)

    def agc(group, noncontig=False):
        ins = [values(rank, i, s) for i, s in enumerate(SHAPES)]
        if noncontig:  # the 2-D input transposed, and its outputs shaped alike
            ins[1] = values(rank, 1, (5, 2)).t()
        outs = [[torch.empty(t.shape, dtype=dt) for t in ins] for _ in range(world)]
        dist.all_gather_coalesced(outs, ins, group=group)
        return outs

    for noncontig in (False, True):
        mine = agc(None, noncontig)
        # gloo takes every dtype here but bool (complex reaches it as float, through view_as_real).
        theirs = agc(gloo, noncontig) if dt != torch.bool else None
        for r in range(world):
            for i, s in enumerate(SHAPES):
                want = values(r, 1, (5, 2)).t() if noncontig and i == 1 else values(r, i, s)
                compare(f"all_gather_coalesced {dt} rank {r}'s #{i} noncontig={noncontig}", mine[r][i],
                        None if theirs is None else theirs[r][i], want)
# (torch's Python refuses mixed dtypes itself; the group's own call is chorus's to refuse.)
raises("all_gather_coalesced of mixed dtypes", chorus.InvalidArgument, "share a dtype",
       lambda: pg.allgather_coalesced([[torch.empty(2), torch.empty(2, dtype=torch.float64)] for _ in range(world)],
                                      [torch.ones(2), torch.ones(2, dtype=torch.float64)]))
raises("all_gather_coalesced with an output list too many", chorus.InvalidArgument, "one output list per rank",
       lambda: dist.all_gather_coalesced([[torch.empty(2)]] * (world + 1), [torch.ones(2)]))
raises("all_gather_coalesced with an output of another shape", chorus.InvalidArgument,
       "where input 0 is torch.float32[2, 3]",
       lambda: dist.all_gather_coalesced([[torch.empty(3, 2)] for _ in range(world)], [torch.ones(2, 3)]))
raises("all_gather_coalesced of no input", chorus.InvalidArgument, "not an empty one",
       lambda: pg.allgather_coalesced([[] for _ in range(world)], []))

# --- CPU tensors of other strides ------------------------------------------------------------
n = 301
f32 = torch.float32
ins = [input_of(r, n, f32) for r in range(world)]

# all_reduce_coalesced: a transposed matrix, a slice with a step and a contiguous tensor.
def arc(group):
    m = input_of(rank, 12, f32, salt=1).view(3, 4).t()
    s, base = strided(input_of(rank, 50, f32, salt=2))
    c = input_of(rank, 7, f32, salt=3)
    dist.all_reduce_coalesced([m, s, c], dist.ReduceOp.SUM, group=group)
    unchanged("all_reduce_coalesced (strided)", base)
    return torch.cat([m.reshape(-1), s, c])
arc_want = torch.cat([reduce_ref([input_of(r, 12, f32, salt=1).view(3, 4).t().reshape(-1) for r in range(world)],
                                 "sum"),
                      reduce_ref([input_of(r, 50, f32, salt=2) for r in range(world)], "sum"),
                      reduce_ref([input_of(r, 7, f32, salt=3) for r in range(world)], "sum")])
compare("all_reduce_coalesced (strided)", arc(None), arc(gloo), arc_want)

def all_gather_strided(group):
    x, _ = strided(ins[rank])
    outs = [torch.empty(n) for _ in range(world)]
    outs[0], base0 = strided(torch.zeros(n))  # a strided output too
    dist.all_gather(outs, x, group=group)
    unchanged("all_gather (strided output)", base0)
    return torch.cat(outs)
compare("all_gather (strided)", all_gather_strided(None), all_gather_strided(gloo), torch.cat(ins))

def all_gather_into_tensor_strided(async_op):
    x, _ = strided(ins[rank])
    out, base = strided(torch.zeros(world * n))
    w = dist.all_gather_into_tensor(out, x, async_op=async_op)
    if async_op:
        w.get_future().wait()  # the future completes once the result is copied back
    unchanged("all_gather_into_tensor (strided)", base)
    return out
for a in (False, True):  # gloo 1.13 has no _allgather_base
    compare(f"all_gather_into_tensor (strided, async={a})", all_gather_into_tensor_strided(a), None, torch.cat(ins))
raises("all_gather_into_tensor into an expanded tensor", chorus.InvalidArgument, "share memory",
       lambda: dist.all_gather_into_tensor(torch.zeros(1).expand(world * n), ins[rank]))

# gloo 1.13's gather, scatter and all_to_all_single read and write a non-contiguous tensor's
# memory as if it were contiguous (the storage's order, not the tensor's; a scatter wrote between
# the elements), so gloo runs these on contiguous tensors of the same values.
def gather_strided(group):
    x = input_of(rank, 2 * n, f32).view(n, 2).t()  # 2 x n, transposed
    if group is not None:
        x = x.contiguous()
    outs = [torch.empty(2, n) for _ in range(world)] if rank == 0 else None
    dist.gather(x, outs, 0, group=group)
    return torch.cat([o.reshape(-1) for o in outs]) if rank == 0 else x.reshape(-1)
gather_want = torch.cat([input_of(r, 2 * n, f32).view(n, 2).t().reshape(-1) for r in range(world)]) if rank == 0 \
    else input_of(rank, 2 * n, f32).view(n, 2).t().reshape(-1)
compare("gather (strided input)", gather_strided(None), gather_strided(gloo), gather_want)

def scatter_strided(group):
    out, base = strided(torch.zeros(n)) if group is None else (torch.zeros(n), None)
    src = world - 1
    dist.scatter(out, [input_of(src, n, f32, salt=j) for j in range(world)] if rank == src else None, src,
                 group=group)
    if base is not None:
        unchanged("scatter (strided output)", base)
    return out
compare("scatter (strided output)", scatter_strided(None), scatter_strided(gloo), input_of(world - 1, n, f32, salt=rank))

# (all_reduce, broadcast, send and recv of such tensors are test_futures.py's.)
def reduce_strided(group):
    x, base = strided(ins[rank]) if group is None else (ins[rank].clone(), None)
    dist.reduce(x, 0, dist.ReduceOp.SUM, group=group)
    if base is not None:
        unchanged("reduce (strided)", base)
    return x
mine, theirs = reduce_strided(None), reduce_strided(gloo)
# Off the root, chorus leaves the buffer as it was; gloo may leave partial sums there.
compare("reduce (strided)", mine, theirs if rank == 0 else None, reduce_ref(ins, "sum") if rank == 0 else ins[rank])

# A receive from any rank into a slice with a step.
if rank == 0:
    for _ in range(world - 1):
        got, base = strided(torch.zeros(n))
        src = dist.recv(got, tag=21)
        unchanged("recv from any rank (strided)", base)
        compare(f"recv from any rank (strided) from {src}", got, None, ins[src])
else:
    dist.send(ins[rank], 0, tag=21)

# reduce_scatter and its tensor form: gloo 1.13 has neither.
def reduce_scatter_strided():
    out, base = strided(torch.zeros(n))
    dist.reduce_scatter(out, [input_of(rank, n, f32, salt=j) for j in range(world)], dist.ReduceOp.MAX)
    unchanged("reduce_scatter (strided output)", base)
    return out
rs_want = reduce_ref([input_of(r, n, f32, salt=rank) for r in range(world)], "max")
compare("reduce_scatter (strided output)", reduce_scatter_strided(), None, rs_want)

def reduce_scatter_tensor_strided():
    out, base = strided(torch.zeros(n))
    x, _ = strided(torch.cat([input_of(rank, n, f32, salt=j) for j in range(world)]))
    dist.reduce_scatter_tensor(out, x, dist.ReduceOp.MAX)
    unchanged("reduce_scatter_tensor (strided output)", base)
    return out
compare("reduce_scatter_tensor (strided)", reduce_scatter_tensor_strided(), None, rs_want)

def size_of(i, j):
    return 3 * (i + 1) + j

def block(i, j):
    return input_of(i, size_of(i, j), f32, salt=j)
a2a_want = torch.cat([block(j, rank) for j in range(world)])

def all_to_all_strided():  # gloo 1.13 has no list form
    pairs = [strided(torch.zeros(size_of(j, rank))) for j in range(world)]
    outs = [p[0] for p in pairs]
    dist.all_to_all(outs, [strided(block(rank, j))[0] for j in range(world)])
    for _, base in pairs:
        unchanged("all_to_all (strided outputs)", base)
    return torch.cat(outs)
compare("all_to_all (strided)", all_to_all_strided(), None, a2a_want)

def all_to_all_single_strided(group, splits):
    if splits:
        rows_in = [size_of(rank, j) for j in range(world)]
        rows_out = [size_of(j, rank) for j in range(world)]
        x = torch.cat([block(rank, j) for j in range(world)])
        out = torch.zeros(sum(rows_out))
    else:
        rows_in = rows_out = None
        x = torch.cat([input_of(rank, 2 * n, f32, salt=j) for j in range(world)]).view(-1, 2)
        out = torch.zeros(world * n, 2)
    if group is None:  # gloo's take contiguous tensors (above)
        out, base = strided(out)
        x, _ = strided(x)
    dist.all_to_all_single(out, x, rows_out, rows_in, group=group)
    if group is None:
        unchanged("all_to_all_single (strided)", base)
    return out
compare("all_to_all_single (strided, splits)", all_to_all_single_strided(None, True),
        all_to_all_single_strided(gloo, True), a2a_want)
compare("all_to_all_single (strided, even)", all_to_all_single_strided(None, False),
        all_to_all_single_strided(gloo, False),
        torch.cat([input_of(j, 2 * n, f32, salt=rank) for j in range(world)]).view(-1, 2))

# --- bool ------------------------------------------------------------------------------------
def bools(r, k, salt=0):
    return input_of(r, k, torch.int64, salt=salt) % 2 == 1

def bool_ref(ts, op):
    s = torch.stack([t.to(torch.int64) for t in ts])
    return {"sum": s.sum(0) > 0, "prod": s.prod(0) != 0, "min": s.min(0).values == 1, "max": s.max(0).values == 1,
            "band": s.min(0).values == 1, "bor": s.max(0).values == 1, "bxor": s.sum(0) % 2 == 1}[op]

BOOL_OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
            "bxor": dist.ReduceOp.BXOR}
# gloo 1.13 has no bool: it is checked with the op chorus runs (NCCL's mapping) over uint8 0s and 1s.
AS_U8 = {"sum": dist.ReduceOp.MAX, "prod": dist.ReduceOp.MIN, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
         "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
m = 203
for name, op in BOOL_OPS.items():
    want = bool_ref([bools(r, m) for r in range(world)], name)
    t = bools(rank, m)
    dist.all_reduce(t, op)
    g = bools(rank, m).to(torch.uint8)
    dist.all_reduce(g, AS_U8[name], group=gloo)
    compare(f"all_reduce bool {name}", t, g.bool(), want)
    t = bools(rank, m)
    dist.reduce(t, world - 1, op)
    compare(f"reduce bool {name}", t, None, want if rank == world - 1 else bools(rank, m))
    out = torch.empty(m, dtype=torch.bool)
    dist.reduce_scatter(out, [bools(rank, m, salt=j) for j in range(world)], op)
    compare(f"reduce_scatter bool {name}", out, None, bool_ref([bools(r, m, salt=rank) for r in range(world)], name))
    out = torch.empty(m, dtype=torch.bool)
    dist.reduce_scatter_tensor(out, torch.cat([bools(rank, m, salt=j) for j in range(world)]), op)
    compare(f"reduce_scatter_tensor bool {name}", out, None,
            bool_ref([bools(r, m, salt=rank) for r in range(world)], name))
    ts = [bools(rank, 5, salt=1), bools(rank, m, salt=2)]
    dist.all_reduce_coalesced(ts, op)
    compare(f"all_reduce_coalesced bool {name}", torch.cat(ts), None,
            torch.cat([bool_ref([bools(r, 5, salt=1) for r in range(world)], name),
                       bool_ref([bools(r, m, salt=2) for r in range(world)], name)]))
raises("all_reduce bool AVG", chorus.InvalidArgument, "AVG of bool tensors",
       lambda: dist.all_reduce(bools(rank, 4), dist.ReduceOp.AVG))
# One dtype a call (torch's Python refuses mixed lists itself; the group's own call is chorus's
# to refuse): uint8 and bool are both bytes to chorus, but reduce differently under SUM.
def coalesced(ts, op):
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = op
    return pg.allreduce_coalesced(ts, opts)
raises("allreduce_coalesced of uint8 and bool", chorus.InvalidArgument, "do not mix",
       lambda: coalesced([torch.ones(2, dtype=torch.uint8), bools(rank, 3)], dist.ReduceOp.SUM))

bins = [bools(r, m) for r in range(world)]
t = bins[rank].clone()
dist.broadcast(t, world - 1)
compare("broadcast bool", t, None, bins[world - 1])
outs = [torch.empty(m, dtype=torch.bool) for _ in range(world)]
dist.all_gather(outs, bins[rank])
compare("all_gather bool", torch.cat(outs), None, torch.cat(bins))
out = torch.empty(world * m, dtype=torch.bool)
dist.all_gather_into_tensor(out, bins[rank])
compare("all_gather_into_tensor bool", out, None, torch.cat(bins))
outs = [torch.empty(m, dtype=torch.bool) for _ in range(world)] if rank == 0 else None
dist.gather(bins[rank], outs, 0)
if rank == 0:
    compare("gather bool", torch.cat(outs), None, torch.cat(bins))
out = torch.empty(m, dtype=torch.bool)
dist.scatter(out, [bools(0, m, salt=j) for j in range(world)] if rank == 0 else None, 0)
compare("scatter bool", out, None, bools(0, m, salt=rank))
out = torch.empty(world * m, dtype=torch.bool)
dist.all_to_all_single(out, torch.cat([bools(rank, m, salt=j) for j in range(world)]))
compare("all_to_all_single bool", out, None, torch.cat([bools(j, m, salt=rank) for j in range(world)]))
outs = [torch.empty(m, dtype=torch.bool) for _ in range(world)]
dist.all_to_all(outs, [bools(rank, m, salt=j) for j in range(world)])
compare("all_to_all bool", torch.cat(outs), None, torch.cat([bools(j, m, salt=rank) for j in range(world)]))
got = torch.empty(m, dtype=torch.bool)
reqs = [dist.isend(bins[rank], (rank + 1) % world), dist.irecv(got, (rank - 1) % world)]
for w in reqs:
    w.wait()
compare("send/recv bool", got, None, bins[(rank - 1) % world])

# --- complex ---------------------------------------------------------------------------------
def cplx(r, k, dt, salt=0):
    re, im = input_of(r, k, torch.float64, salt=salt), input_of(r, k, torch.float64, salt=salt + 100)
    return torch.complex(re, im).to(dt)

def cplx_ref(ts, avg=False):
    s = sum(t.to(torch.complex128) for t in ts)
    return (s / len(ts) if avg else s).to(ts[0].dtype)

for dt in (torch.complex64, torch.complex128):
    cins = [cplx(r, m, dt) for r in range(world)]
    for name, op in (("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG)):
        want = cplx_ref(cins, name == "avg")
        # dist.all_reduce hands the backend view_as_real's floats; the group's own allreduce,
        # as chorus.torch_api calls it, the complex tensor itself.
        t = cins[rank].clone()
        dist.all_reduce(t, op)
        g = None
        if name == "sum":  # gloo 1.13 has no AVG
            g = cins[rank].clone()
            dist.all_reduce(g, op, group=gloo)
        compare(f"all_reduce {dt} {name}", t, g, want)
        t = cins[rank].clone()
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        pg.allreduce([t], opts).wait()
        compare(f"the group's allreduce {dt} {name}", t, g, want)
        small = [cplx(r, 5, dt, salt=7) for r in range(world)]
        ts = [cins[rank].clone(), small[rank].clone()]
        dist.all_reduce_coalesced(ts, op)  # as floats (view_as_real)
        compare(f"all_reduce_coalesced {dt} {name}", torch.cat(ts), None,
                torch.cat([want, cplx_ref(small, name == "avg")]))
        ts = [cins[rank].clone(), small[rank].clone()]
        copts = dist.AllreduceCoalescedOptions()
        copts.reduceOp = op
        pg.allreduce_coalesced(ts, copts).wait()  # complex itself
        compare(f"the group's allreduce_coalesced {dt} {name}", torch.cat(ts), None,
                torch.cat([want, cplx_ref(small, name == "avg")]))
        t = cins[rank].clone()
        dist.reduce(t, 0, op)  # gloo 1.13 has no complex reduce
        compare(f"reduce {dt} {name}", t, None, want if rank == 0 else cins[rank])
        out = torch.empty(m, dtype=dt)
        dist.reduce_scatter(out, [cplx(rank, m, dt, salt=j) for j in range(world)], op)
        compare(f"reduce_scatter {dt} {name}", out, None,
                cplx_ref([cplx(r, m, dt, salt=rank) for r in range(world)], name == "avg"))
        out = torch.empty(m, dtype=dt)
        dist.reduce_scatter_tensor(out, torch.cat([cplx(rank, m, dt, salt=j) for j in range(world)]), op)
        compare(f"reduce_scatter_tensor {dt} {name}", out, None,
                cplx_ref([cplx(r, m, dt, salt=rank) for r in range(world)], name == "avg"))
    for name, op in (("PRODUCT", dist.ReduceOp.PRODUCT), ("MIN", dist.ReduceOp.MIN), ("MAX", dist.ReduceOp.MAX),
                     ("BXOR", dist.ReduceOp.BXOR)):
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        raises(f"the group's allreduce {dt} {name}", chorus.InvalidArgument, f"{name} of complex tensors",
               lambda: pg.allreduce([cins[rank].clone()], opts))
        raises(f"reduce {dt} {name}", chorus.InvalidArgument, f"{name} of complex tensors",
               lambda: dist.reduce(cins[rank].clone(), 0, op))

    t = cins[rank].clone()
    dist.broadcast(t, world - 1)  # complex itself (gloo 1.13 refuses it)
    compare(f"broadcast {dt}", t, None, cins[world - 1])
    # A conjugate view (x.conj(): contiguous, its memory the values before the conjugation) is
    # sent as the values it reads. (torch 1.13's binding hands the backend such a view resolved,
    # a copy, so a receiving one is not written: the backend stages them itself where it is not.)
    t = cins[rank].clone()
    if rank == world - 1:
        t = t.conj()
    dist.broadcast(t, world - 1)
    compare(f"broadcast {dt} of a conjugate view", t.resolve_conj(), None, cins[world - 1].conj().resolve_conj())

    # bool and complex tensors do not mix with others in one coalesced call: bool's SUM is a MAX,
    # complex's MAX is refused, and the op would see neither.
    copts = dist.AllreduceCoalescedOptions()
    copts.reduceOp = dist.ReduceOp.MAX
    raises(f"the group's allreduce_coalesced of float32 and {dt}, MAX", chorus.InvalidArgument,
           "MAX of complex tensors", lambda: pg.allreduce_coalesced([torch.ones(2), cins[rank].clone()], copts))
    copts.reduceOp = dist.ReduceOp.SUM
    raises(f"the group's allreduce_coalesced of float32 and {dt}", chorus.InvalidArgument, "do not mix",
           lambda: pg.allreduce_coalesced([torch.ones(2), cins[rank].clone()], copts))

    def all_gather(group):  # through view_as_real, on both
        outs = [torch.empty(m, dtype=dt) for _ in range(world)]
        dist.all_gather(outs, cins[rank], group=group)
        return torch.cat(outs)
    compare(f"all_gather {dt}", all_gather(None), all_gather(gloo), torch.cat(cins))
    out = torch.empty(world * m, dtype=dt)
    dist.all_gather_into_tensor(out, cins[rank])
    compare(f"all_gather_into_tensor {dt}", out, None, torch.cat(cins))
    out = torch.empty(world * m, dtype=dt)
    pg._allgather_base(out, cins[rank]).wait()  # complex itself
    compare(f"the group's _allgather_base {dt}", out, None, torch.cat(cins))
    outs = [torch.empty(m, dtype=dt) for _ in range(world)] if rank == 0 else None
    dist.gather(cins[rank], outs, 0)  # complex itself
    if rank == 0:
        compare(f"gather {dt}", torch.cat(outs), None, torch.cat(cins))

    def scatter(group):
        out = torch.empty(m, dtype=dt)
        dist.scatter(out, [cplx(0, m, dt, salt=j) for j in range(world)] if rank == 0 else None, 0, group=group)
        return out
    compare(f"scatter {dt}", scatter(None), scatter(gloo), cplx(0, m, dt, salt=rank))

    def a2a_single(group):
        out = torch.empty(world * m, dtype=dt)
        dist.all_to_all_single(out, torch.cat([cplx(rank, m, dt, salt=j) for j in range(world)]), group=group)
        return out
    a2a_c = torch.cat([cplx(j, m, dt, salt=rank) for j in range(world)])
    compare(f"all_to_all_single {dt}", a2a_single(None), a2a_single(gloo), a2a_c)
    out = torch.empty(world * m, dtype=dt)
    pg.alltoall_base(out, torch.cat([cplx(rank, m, dt, salt=j) for j in range(world)]), [], [],
                     dist.AllToAllOptions()).wait()  # complex itself
    compare(f"the group's alltoall_base {dt}", out, None, a2a_c)
    outs = [torch.empty(m, dtype=dt) for _ in range(world)]
    pg.alltoall(outs, [cplx(rank, m, dt, salt=j) for j in range(world)], dist.AllToAllOptions()).wait()
    compare(f"the group's alltoall {dt}", torch.cat(outs), None, a2a_c)

    def ring(group):  # complex itself, on both
        got = torch.empty(m, dtype=dt)
        reqs = [dist.isend(cins[rank], (rank + 1) % world, group=group), dist.irecv(got, (rank - 1) % world, group=group)]
        for w in reqs:
            w.wait()
        return got
    compare(f"send/recv {dt}", ring(None), ring(gloo), cins[(rank - 1) % world])

# A complex and a real tensor in one alltoall_base are refused before anything moves.
raises("alltoall_base complex in, float out", chorus.InvalidArgument, "they share a dtype",
       lambda: pg.alltoall_base(torch.empty(2 * world), torch.zeros(world, dtype=torch.complex64), [], [],
                                dist.AllToAllOptions()))

# --- outputs the op cannot write --------------------------------------------------------------
# An expanded tensor (its elements share memory) in an output list is refused at the call, on
# every rank alike, before the op writes anything.
raises("all_gather into an expanded tensor", chorus.InvalidArgument, "share memory",
       lambda: dist.all_gather([torch.zeros(1).expand(4) for _ in range(world)], torch.ones(4)))
raises("all_gather_coalesced into an expanded tensor", chorus.InvalidArgument, "share memory",
       lambda: dist.all_gather_coalesced([[torch.zeros(1).expand(4)] for _ in range(world)], [torch.ones(4)]))

# --- dtypes chorus has not -------------------------------------------------------------------
raises("all_reduce int16", chorus.InvalidArgument, "chorus has no dtype for torch.int16",
       lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch's "ComplexHalf support is experimental"
    half = torch.zeros(3, dtype=torch.complex32)
raises("broadcast complex32", chorus.InvalidArgument, "chorus has no dtype for torch.complex32",
       lambda: dist.broadcast(half, 0))

# --- torch.profiler --------------------------------------------------------------------------
with profile(activities=[ProfilerActivity.CPU]) as prof:
    t = torch.ones(16)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    w = dist.all_gather_into_tensor(torch.empty(16 * world), t, async_op=True)
    w.wait()
    outs = [[torch.empty(2)] for _ in range(world)]
    dist.all_gather_coalesced(outs, [torch.ones(2)])
    dist.all_reduce(t, group=gloo)  # gloo's, to show the profiler sees what it names alike
names = {e.name for e in prof.events()}
for want in ("chorus:all_reduce", "chorus:broadcast", "chorus:_allgather_base", "chorus:all_gather_coalesced",
             "gloo:all_reduce"):
    assert want in names, f"torch.profiler has no {want!r} event: {sorted(n for n in names if ':' in n)}"
cases += 1
assert torch.equal(t, torch.full((16,), float(world * world))), t

dist.barrier()
print(f"rank {rank}: {cases} cases match")
dist.destroy_process_group()
sys.exit(0)
