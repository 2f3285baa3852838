"""Bagua's QAdam, low-precision decentralized and asynchronous model average algorithms
(``module.with_bagua``) on 4 ranks, checked against references computed here from every rank's
own gradients or weights, gathered over gloo:
- QAdam (flat and hierarchical, weight decay, several buckets, a step of two backwards): during
  warm-up the gradients are the ranks' mean and both moments are Adam's; after it the gradients
  are each rank's own, the momentum is what ByteGrad's MinMax-UInt8 exchange of every rank's
  momentum gives (within the compression's bound of the exact mean), the variance is frozen, and
  every weight is the Adam step of those; the replicas stay identical; a parameter that no rank's
  backward reaches after warm-up (grad None) keeps its momentum, variance and weight; betas
  changed by load_state_dict are the next backward's;
- low-precision decentralized (a ring of 4, every 2nd step, also with 2 micro-batches a step
  (the interval counts steps), bfloat16 weights (the difference quantized in float32),
  hierarchical: a ring of 2 hosts, several buckets): after each step every weight is what a
  simulation of every ring member's state gives, within half a quantization step of the exact mix
  (and half a unit in the last place of the weights' dtype), and each rank's copies of its
  neighbours' weights are theirs; gradients stay each rank's own;
- asynchronous model average: with a learning rate of 0 and different weights on every rank, the
  background averaging makes every rank's weights their mean while training runs; with training,
  warm-up steps give the ranks' mean gradient, the rounds keep the sum of the ranks' weights what
  training alone made it, abort() stops the rounds (also where it comes during warm-up, or where
  only one rank's thread started), resume() starts them again, and a final synchronous average
  makes the replicas equal; misuses and failures, each raised where it should be and none hanging:
  an abort() on rank 0 alone (the others raise at a training forward once the timeout passed,
  saying abort/resume are collective; a resume on every rank then goes on), an abort, resume and
  abort on rank 0 alone (that last abort raises within the algorithm's timeout), an error of rank
  2's thread (every rank stops at the same round and raises, the weights keep their sum), an
  error in training's release of the weights (they are released); the script then exits with
  the thread running (it must not hang);
- bad settings raise, on every rank. The hierarchical cases make two "hosts" of ranks {0, 1} and
  {2, 3}."""
import datetime
import functools
import math
import re
import threading
import time

import torch

import algorithm_refs
from algorithm_refs import bytegrad_reference, fake_hosts
from common import init

from chorus import torch_api as bagua
from chorus.torch_api.algorithms import async_model_average, bytegrad, decentralized, q_adam

rank, world, gloo = init(timeout_s=60)
bagua.init_process_group()
assert world == 4, "run with 4 ranks"
gathered = functools.partial(algorithm_refs.gathered, group=gloo)
LR = 0.05
DEADLINE_S = 60  # for a number of rounds to come; they come every few ms
ASYNC_TIMEOUT = datetime.timedelta(seconds=3)  # the async cases of errors: their group's timeout


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 32)
        self.c = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def make(seed):
    torch.manual_seed(seed + rank)  # different on every rank: with_bagua broadcasts rank 0's
    return Net()



def flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def batch(g):
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def loss_of(model, x, y):
    out = model(x)
    if out.dtype == torch.bfloat16:  # torch 1.13's CPU mse_loss takes no bfloat16
        return (out - y).pow(2).mean()
    return torch.nn.functional.mse_loss(out, y)


def local_grads(model, batches):
    """This rank's own gradients at the model's weights, accumulated over ``batches``."""
    ref = Net().to(next(model.parameters()).dtype)
    ref.load_state_dict(model.state_dict())
    for x, y in batches:
        loss_of(ref, x, y).backward()
    return [p.grad for p in ref.parameters()]




def assert_close(what, got, want, tol=1e-6):
    d = float((got - want).abs().max())
    assert d <= tol, f"{what}: differs from the reference by {d}"
    return d


def qadam_momentum(b, mine, w0, m0, b1, weight_decay, hierarchical):
    """Bucket b's momentum after a compressed step, as every rank gets it: every rank's own (in
    the bucket's layout and by the same operations as QAdam's), and what ByteGrad's exchange makes
    of them; returns it, every rank's and the exchange's inputs."""
    grad = flat(mine[p] for p in b.params)
    if weight_decay:
        grad = grad.add(flat(w0[p] for p in b.params), alpha=weight_decay)
    m_r = flat(m0[p] for p in b.params).mul(b1).add_(grad, alpha=1 - b1)
    everyone = gathered(m_r)
    inputs = [everyone[0] + everyone[1], everyone[2] + everyone[3]] if hierarchical else everyone
    return bytegrad_reference(inputs, world), everyone, inputs


def check_qadam(name, hierarchical, pg=None, weight_decay=0.0, warmup=3, steps=8, accumulate_at=None):
    """``accumulate_at``: that step (after warm-up) takes two backwards."""
    betas, eps = (0.9, 0.999), 1e-8
    b1, b2 = betas
    model = make(11)
    opt = q_adam.QAdamOptimizer(model.parameters(), lr=LR, warmup_steps=warmup, betas=betas, eps=eps,
                                weight_decay=weight_decay)
    model = model.with_bagua([opt], q_adam.QAdamAlgorithm(opt, hierarchical=hierarchical), process_group=pg,
                             bucket_bytes=2048)
    buckets = model._bagua_engine.buckets
    assert len(buckets) > 2, "several buckets"
    params = list(model.parameters())
    g = torch.Generator().manual_seed(80 + rank)
    worst = 0.0
    for step in range(steps):
        micro = [batch(g) for _ in range(2 if step == accumulate_at else 1)]
        mine = dict(zip(params, local_grads(model, micro)))
        w0 = {p: p.detach().clone() for p in params}
        m0 = {p: opt.state[p]["exp_avg"].clone() for p in params}
        v0 = {p: opt.state[p]["exp_avg_sq"].clone() for p in params}
        opt.zero_grad()
        for x, y in micro:
            loss_of(model, x, y).backward()
        warm = step < warmup
        want_m, want_v = {}, {}
        if warm:
            for p in params:
                mean = torch.stack(gathered(mine[p])).mean(0)
                worst = max(worst, assert_close(f"{name}, step {step}: a warm-up gradient against the ranks' mean",
                                                p.grad, mean))
                grad = p.grad if weight_decay == 0 else p.grad.add(w0[p], alpha=weight_decay)
                want_m[p] = m0[p].mul(b1).add_(grad, alpha=1 - b1)
                want_v[p] = v0[p].mul(b2).addcmul_(grad, grad, value=1 - b2)
        else:
            for p in params:
                assert torch.equal(p.grad, mine[p]), f"{name}, step {step}: a gradient is not this rank's own"
                want_v[p] = v0[p]
            for b in buckets:
                want, everyone, inputs = qadam_momentum(b, mine, w0, m0, b1, weight_decay, hierarchical)
                # Against the exact mean: half a step of each input's compression, then of the result's.
                exact = torch.stack(everyone).mean(0)
                first = sum(float(v.max() - v.min()) for v in inputs) / (510 * world)
                bound = first + (float(exact.max() - exact.min()) + 2 * first) / 510 + 1e-6
                got = flat(opt.state[p]["exp_avg"] for p in b.params)
                err = float((got - exact).abs().max())
                assert 0 < err <= bound, f"{name}, step {step}: the momentum's error {err} is not within (0, {bound}]"
                off = 0
                for p in b.params:
                    want_m[p] = want.narrow(0, off, p.numel()).view_as(p)
                    off += p.numel()
        opt.step()
        for p in params:
            state = opt.state[p]
            assert state["step"] == step + 1
            worst = max(worst, assert_close(f"{name}, step {step}: exp_avg", state["exp_avg"], want_m[p]))
            if warm:
                assert_close(f"{name}, step {step}: exp_avg_sq", state["exp_avg_sq"], want_v[p])
            else:
                assert torch.equal(state["exp_avg_sq"], want_v[p]), f"{name}, step {step}: the variance moved"
            t = step + 1
            denom = (want_v[p].sqrt() / math.sqrt(1 - b2 ** t)).add_(eps)
            want_w = w0[p].addcdiv(want_m[p], denom, value=-LR / (1 - b1 ** t))
            worst = max(worst, assert_close(f"{name}, step {step}: a weight", p.detach(), want_w))
    state = flat([p for p in params] + [opt.state[p]["exp_avg"] for p in params])
    assert all(torch.equal(state, o) for o in gathered(state)), f"{name}: the replicas differ"
    print(f"rank {rank}: {name}: {warmup} warm-up steps, {steps - warmup} compressed, each within {worst:.1e} "
          f"of the reference")


class NetExtra(Net):
    """Net and a last layer that forward uses only while ``extra`` is set."""

    def __init__(self):
        super().__init__()
        self.d = torch.nn.Linear(4, 4)
        self.extra = True

    def forward(self, x):
        out = super().forward(x)
        return self.d(out) if self.extra else out


def check_qadam_unused(warmup=2, steps=5):
    """A parameter that no rank's backward reaches after warm-up (its grad None after
    zero_grad(set_to_none=True)) keeps its momentum, variance, step count and weight, as torch's
    Adam leaves it, weight decay or not; the others' momenta move."""
    torch.manual_seed(19 + rank)
    model = NetExtra()
    opt = q_adam.QAdamOptimizer(model.parameters(), lr=LR, warmup_steps=warmup, weight_decay=0.01)
    model = model.with_bagua([opt], q_adam.QAdamAlgorithm(opt, hierarchical=False), bucket_bytes=2048)
    extra = list(model.d.parameters())
    others = [p for p in model.parameters() if all(p is not q for q in extra)]
    g = torch.Generator().manual_seed(130 + rank)
    kept = None
    for step in range(steps):
        model.extra = step < warmup  # on every rank
        moving = {p: opt.state[p]["exp_avg"].clone() for p in others}
        x, y = batch(g)
        opt.zero_grad(set_to_none=True)
        loss_of(model, x, y).backward()
        opt.step()
        if step == warmup - 1:
            kept = [(p.detach().clone(), opt.state[p]["exp_avg"].clone(), opt.state[p]["exp_avg_sq"].clone())
                    for p in extra]
            assert all(float(m.abs().max()) > 0 for _, m, _ in kept), "the extra layer's momentum is 0 after warm-up"
        if step >= warmup:
            for p, (w, m, v) in zip(extra, kept):
                state = opt.state[p]
                assert p.grad is None, f"QAdam, an unused parameter, step {step}: it has a gradient"
                assert state["step"] == warmup, f"QAdam, an unused parameter, step {step}: stepped {state['step']}"
                assert torch.equal(state["exp_avg"], m), \
                    f"QAdam, an unused parameter, step {step}: its momentum moved by {float((state['exp_avg'] - m).abs().max())}"
                assert torch.equal(state["exp_avg_sq"], v) and torch.equal(p.detach(), w), \
                    f"QAdam, an unused parameter, step {step}: its variance or weight moved"
            for p in others:
                assert not torch.equal(opt.state[p]["exp_avg"], moving[p]), f"QAdam, step {step}: a momentum stood still"
    print(f"rank {rank}: QAdam: a parameter unused on every rank after warm-up keeps its momentum, variance and "
          f"weight over {steps - warmup} compressed steps")


def check_qadam_load_state_dict(warmup=2):
    """Betas changed by load_state_dict (torch makes new param_groups) are the next compressed
    backward's: the momentum against the reference with the new beta1."""
    model = make(20)
    opt = q_adam.QAdamOptimizer(model.parameters(), lr=LR, warmup_steps=warmup, betas=(0.9, 0.999))
    model = model.with_bagua([opt], q_adam.QAdamAlgorithm(opt, hierarchical=False), bucket_bytes=2048)
    params = list(model.parameters())
    g = torch.Generator().manual_seed(140 + rank)
    for _ in range(warmup + 1):  # warm-up, and a compressed step
        train_step(model, opt, g)
    saved = opt.state_dict()
    saved["param_groups"][0]["betas"] = (0.5, 0.999)
    opt.load_state_dict(saved)
    x, y = batch(g)
    mine = dict(zip(params, local_grads(model, [(x, y)])))
    w0 = {p: p.detach().clone() for p in params}
    m0 = {p: opt.state[p]["exp_avg"].clone() for p in params}
    opt.zero_grad()
    loss_of(model, x, y).backward()
    worst = 0.0
    for b in model._bagua_engine.buckets:
        want, _, _ = qadam_momentum(b, mine, w0, m0, 0.5, 0.0, False)
        worst = max(worst, assert_close("QAdam after load_state_dict: the momentum with the loaded beta1",
                                        flat(opt.state[p]["exp_avg"] for p in b.params), want))
    opt.step()
    print(f"rank {rank}: QAdam: betas loaded by load_state_dict are used, the momentum within {worst:.1e} of the "
          f"reference")


def train_step(model, opt, g):
    x, y = batch(g)
    opt.zero_grad()
    loss_of(model, x, y).backward()
    opt.step()


def train_until(model, opt, g, done, what, moved=None):
    """Training steps until ``done()``, at least one; ``moved`` adds up what SGD's steps move."""
    deadline = time.monotonic() + DEADLINE_S
    steps = 0
    while True:
        x, y = batch(g)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        if moved is not None:
            moved -= LR * flat(p.grad for p in model.parameters())
        opt.step()
        steps += 1
        if done():
            return steps
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"


def check_async_converges():
    """A learning rate of 0 and each rank's weights its own: the rounds, while training runs, make
    every rank's weights the mean of all ranks' first ones."""
    algorithm = async_model_average.AsyncModelAverageAlgorithm(sync_interval_ms=5)
    model = make(12)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    model = model.with_bagua([opt], algorithm)
    impl = model.bagua_algorithm
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(90 + rank)))
    start = flat(model.parameters())
    mean = torch.stack(gathered(start)).mean(0)
    assert float((start - mean).abs().max()) > 0.1, "the ranks' weights start apart"
    g = torch.Generator().manual_seed(100 + rank)
    steps = train_until(model, opt, g, lambda: impl.rounds >= 2, "2 averaging rounds")
    impl.abort(model)
    rounds = impl.rounds
    assert all(int(r) == rounds for r in gathered(torch.tensor([rounds]))), "the ranks did different rounds"
    end = flat(model.parameters())
    d = assert_close("async model average, lr 0: the weights against the mean of every rank's first", end, mean, 1e-6)
    print(f"rank {rank}: async model average, lr 0: {rounds} rounds in {steps}+ steps made the weights the "
          f"ranks' mean within {d:.1e}")


def check_async_training():
    """Warm-up, rounds while training, an abort during warm-up and after it, resume, a final
    average; the rounds keep the sum of the ranks' weights."""
    algorithm = async_model_average.AsyncModelAverageAlgorithm(sync_interval_ms=5, warmup_steps=3)
    model = make(13)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model = model.with_bagua([opt], algorithm, bucket_bytes=2048)
    impl = model.bagua_algorithm
    params = list(model.parameters())
    start = flat(params)
    moved = torch.zeros_like(start)
    g = torch.Generator().manual_seed(110 + rank)
    for step in range(3):
        if step == 1:  # abort during warm-up: no thread yet, every rank still says "stop" once
            impl.abort(model)
            impl.resume(model)
        x, y = batch(g)
        mine = local_grads(model, [(x, y)])
        opt.zero_grad()
        loss_of(model, x, y).backward()
        for p, own in zip(params, mine):
            assert_close(f"async model average, warm-up step {step}: a gradient against the ranks' mean", p.grad,
                         torch.stack(gathered(own)).mean(0))
        moved -= LR * flat(p.grad for p in params)
        opt.step()
        assert impl._thread is None and impl.rounds == 0, "the averaging started during warm-up"
    train_until(model, opt, g, lambda: impl.rounds >= 3, "3 rounds", moved)
    impl.abort(model)
    stopped = impl.rounds
    for _ in range(3):  # aborted: no rounds
        x, y = batch(g)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        moved -= LR * flat(p.grad for p in params)
        opt.step()
    assert impl._thread is None and impl.rounds == stopped, "a round after abort"
    impl.resume(model)
    train_until(model, opt, g, lambda: impl.rounds >= stopped + 2, "2 rounds after resume", moved)
    impl.abort(model)
    # Only rank 0's thread starts (its training forward); the others' abort says "stop" in its first round.
    impl.resume(model)
    before = impl.rounds
    if rank == 0:
        x, y = batch(g)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        moved -= LR * flat(p.grad for p in params)
        opt.step()
        assert impl._thread is not None
    impl.abort(model)
    assert impl.rounds == before, "a round where only rank 0's thread started"
    rounds = impl.rounds
    assert all(int(r) == rounds for r in gathered(torch.tensor([rounds]))), "the ranks did different rounds"
    # The rounds move no weight mass: every rank's weights add up to what the ranks' steps alone make.
    end = flat(params)
    total = torch.stack(gathered(end)).sum(0)
    want = torch.stack(gathered(start + moved)).sum(0)
    d = assert_close("async model average: the sum of the ranks' weights", total, want, 1e-5)
    apart = float((torch.stack(gathered(end)) - end).abs().max())
    assert apart > 0, "the replicas are equal before the final average (training on different data)"
    for p in params:
        bagua.allreduce_inplace(p.data, op=bagua.ReduceOp.AVG)
    end = flat(params)
    assert all(torch.equal(end, o) for o in gathered(end)), "the replicas differ after the final average"
    print(f"rank {rank}: async model average: warm-up gradients the ranks' mean; {rounds} rounds over aborts and "
          f"resumes keep the ranks' weight sum within {d:.1e}; replicas equal after a final average")
    return model, opt, g


def async_model(seed):
    model = make(seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    algorithm = async_model_average.AsyncModelAverageAlgorithm(sync_interval_ms=5, timeout=ASYNC_TIMEOUT)
    model = model.with_bagua([opt], algorithm)
    return model, opt, model.bagua_algorithm


def train_until_raises(model, opt, g, what, moved=None):
    """Training steps until a forward raises a RuntimeError, which is returned."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        x, y = batch(g)
        opt.zero_grad()
        try:
            loss = loss_of(model, x, y)
        except RuntimeError as e:
            return e
        loss.backward()
        if moved is not None:
            moved -= LR * flat(p.grad for p in model.parameters())
        opt.step()
        assert time.monotonic() < deadline, f"{what}: no error within {DEADLINE_S} s"


def same_on_every_rank(value, what):
    everyone = [int(v) for v in gathered(torch.tensor([value]))]
    assert all(v == value for v in everyone), f"{what}: the ranks differ: {everyone}"


def check_peer_abort_error(e, secs_at_least):
    """The error of a rank whose averaging rank 0's abort() stopped, this rank not calling abort()."""
    msg = str(e)
    assert "rank 0 called abort()" in msg and "collective" in msg, msg
    ago = float(re.search(r"(\d+\.\d) s ago", msg).group(1))
    assert ago >= secs_at_least, f"raised {ago} s after the stop, within the timeout ({secs_at_least} s)"


def check_async_abort_alone():
    """abort() on rank 0 alone (as around a checkpoint that rank 0 alone saves): every rank's
    averaging stops at the same round; the others, not calling abort() within the timeout, raise
    at a training forward saying that abort() is collective; then a resume on every rank goes on."""
    model, opt, impl = async_model(21)
    g = torch.Generator().manual_seed(150 + rank)
    train_until(model, opt, g, lambda: impl.rounds >= 2, "2 rounds")
    if rank == 0:
        impl.abort(model)
    else:
        check_peer_abort_error(train_until_raises(model, opt, g, "the error of an abort() on rank 0 alone"),
                               ASYNC_TIMEOUT.total_seconds())
        assert impl._thread is None, "the thread is still there after the error"
    stopped = impl.rounds
    same_on_every_rank(stopped, "the rounds at rank 0's abort")
    impl.resume(model)  # on every rank: the ranks' rounds go on together
    train_until(model, opt, g, lambda: impl.rounds >= stopped + 2, "2 rounds after a resume on every rank")
    impl.abort(model)
    same_on_every_rank(impl.rounds, "the rounds after the resume")
    print(f"rank {rank}: async model average: an abort() on rank 0 alone stopped every rank at round {stopped}, "
          f"the others raised; a resume on every rank went on to round {impl.rounds}")


def check_async_abort_resume_alone():
    """abort(), resume() and a training step on rank 0 alone: its new thread waits alone in its
    first round; its next abort() raises within the algorithm's timeout (not the group's 30
    minutes, nor the default group's 60 s here), saying that abort/resume are collective; the
    others raise as above."""
    model, opt, impl = async_model(22)
    g = torch.Generator().manual_seed(160 + rank)
    train_until(model, opt, g, lambda: impl.rounds >= 1, "a round")
    if rank == 0:
        impl.abort(model)
        impl.resume(model)
        train_step(model, opt, g)
        assert impl._thread is not None, "no thread after a resume and a training step"
        start = time.monotonic()
        try:
            impl.abort(model)
        except RuntimeError as e:
            took = time.monotonic() - start
            assert "opening all-reduce" in str(e) and "collective" in str(e), e
        else:
            raise AssertionError("abort() after an abort and resume on rank 0 alone did not raise")
        assert took <= 3 * ASYNC_TIMEOUT.total_seconds(), f"abort() took {took:.1f} s, past the algorithm's timeout"
        what = f"rank 0's abort() raised after {took:.1f} s"
    else:
        check_peer_abort_error(train_until_raises(model, opt, g, "the error of an abort() on rank 0 alone"),
                               ASYNC_TIMEOUT.total_seconds())
        what = "raised"
    print(f"rank {rank}: async model average: abort, resume and abort on rank 0 alone: {what}")


def check_async_failure():
    """An error of rank 2's thread alone (its torch.cat, out of memory) stops every rank's
    averaging at the same round, where nobody adds anything: rank 2 raises it, the others raise
    naming rank 2, abort() returns at once on every rank, the ranks' weights keep their sum, and a
    resume on every rank goes on."""
    model, opt, impl = async_model(23)
    params = list(model.parameters())
    start = flat(params)
    moved = torch.zeros_like(start)
    g = torch.Generator().manual_seed(170 + rank)
    train_until(model, opt, g, lambda: impl.rounds >= 2, "2 rounds", moved)
    real_cat, failed = torch.cat, []

    def cat(*args, **kwargs):
        if threading.current_thread().name == "chorus-async-model-average" and not failed:
            failed.append(impl.rounds)
            raise RuntimeError("injected: out of memory")
        return real_cat(*args, **kwargs)
    if rank == 2:
        torch.cat = cat
    try:
        e = train_until_raises(model, opt, g, "the error of rank 2's failure", moved)
    finally:
        torch.cat = real_cat
    want = "the background averaging failed: injected: out of memory" if rank == 2 else "failed on rank 2"
    assert want in str(e), e
    stopped = impl.rounds
    same_on_every_rank(stopped, "the rounds at rank 2's failure")
    begun = time.monotonic()
    impl.abort(model)
    took = time.monotonic() - begun
    assert took < ASYNC_TIMEOUT.total_seconds(), f"abort() after the failure took {took:.1f} s"
    total, want = torch.stack(gathered(flat(params))).sum(0), torch.stack(gathered(start + moved)).sum(0)
    d = assert_close("async model average, a failed round: the sum of the ranks' weights", total, want, 1e-5)
    impl.resume(model)
    train_until(model, opt, g, lambda: impl.rounds >= stopped + 2, "2 rounds after a resume", moved)
    impl.abort(model)
    same_on_every_rank(impl.rounds, "the rounds after the resume")
    total, want = torch.stack(gathered(flat(params))).sum(0), torch.stack(gathered(start + moved)).sum(0)
    assert_close("async model average, after the resume: the sum of the ranks' weights", total, want, 1e-5)
    print(f"rank {rank}: async model average: rank 2's thread failing stopped every rank at round {stopped}, "
          f"each raised ({'its own error' if rank == 2 else 'naming rank 2'}), the weight sum kept within {d:.1e}; "
          f"resumed to round {impl.rounds}")


def check_async_settle_failure():
    """Where training's release of the weights raises (its GPU synchronize, injected on rank 1),
    the weights are released all the same and the rounds go on; training's wait for the weights is
    bounded by the timeout."""
    model, opt, impl = async_model(24)
    g = torch.Generator().manual_seed(180 + rank)
    train_until(model, opt, g, lambda: impl.rounds >= 1, "a round")
    if rank == 1:
        def settle():
            if threading.current_thread() is threading.main_thread():
                raise RuntimeError("injected: synchronize failed")
        x, y = batch(g)
        opt.zero_grad()
        loss = loss_of(model, x, y)
        impl._settle = settle
        try:
            loss.backward()
        except RuntimeError as e:
            assert "injected" in str(e), e
        else:
            raise AssertionError("the injected error did not come out of backward")
        finally:
            del impl._settle
        assert impl.lock._holder is None, f"the weights are still held by {impl.lock._holder}"
    # One target for every rank (a rank that stops short of its own would see another's abort come first).
    mark = max(int(r) for r in gathered(torch.tensor([impl.rounds])))
    train_until(model, opt, g, lambda: impl.rounds >= mark + 2, "2 rounds after the failed release")
    impl.abort(model)
    same_on_every_rank(impl.rounds, "the rounds")
    lock = async_model_average.WeightLock()
    assert lock.acquire_for_thread(lambda: False)
    try:
        lock.acquire_for_training(0.2)
    except RuntimeError as e:
        assert "held by the averaging thread" in str(e), e
    else:
        raise AssertionError("training took the weights that the thread held")
    lock.release()
    lock.acquire_for_training(0.2)
    print(f"rank {rank}: async model average: a failed release of the weights released them; rounds went on to "
          f"{impl.rounds}; training's wait for the weights is bounded")


def ring_exchange(states, xs):
    """Bagua's low-precision exchange of every member of a ring, on ``states[j]`` (member j's x^,
    its copies of its left and right neighbours' x^: updated), with ``xs[j]`` member j's weights
    after its step; returns every member's new weights. The same operations as Bagua's op."""
    n = len(xs)
    diffs = [xs[j].float().add(states[j][1].float(), alpha=1 / 3).add_(states[j][2].float(), alpha=1 / 3)
             .add_(states[j][0].float(), alpha=-5 / 3) for j in range(n)]
    sent = [bytegrad.decompress(bytegrad.compress(d)) for d in diffs]
    out = []
    for j in range(n):
        mine, left, right = states[j]
        left.add_(sent[(j - 1) % n])
        right.add_(sent[(j + 1) % n])
        mine.copy_(sent[j] + mine)
        out.append(mine.clone())
    return out, diffs


def check_low_precision(name, algorithm, pg=None, hosts=None, steps=6, micro_batches=1, dtype=torch.float32):
    """``hosts``: the ranks of each host (hierarchical), whose leaders form the ring;
    ``micro_batches``: forwards and backwards a step (accumulated gradients); ``dtype``: the model's."""
    model = make(15).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model = model.with_bagua([opt], algorithm, process_group=pg, bucket_bytes=2048)
    impl, buckets = model.bagua_algorithm, model._bagua_engine.buckets
    assert len(buckets) > 2, "several buckets"
    params = list(model.parameters())
    ring = [[r] for r in range(world)] if hosts is None else hosts
    # Every member's state, simulated here on every rank: every member starts at with_bagua's weights.
    states = [[[flat(b.params).clone() for _ in range(3)] for _ in ring] for b in buckets]
    g = torch.Generator().manual_seed(120 + rank)
    worst, err_max = 0.0, 0.0
    for step in range(steps):
        micro = [tuple(t.to(dtype) for t in batch(g)) for _ in range(micro_batches)]
        mine = dict(zip(params, local_grads(model, micro)))
        w0 = {p: p.detach().clone() for p in params}
        opt.zero_grad()
        for x, y in micro:
            loss_of(model, x, y).backward()
        for p in params:
            assert torch.equal(p.grad, mine[p]), f"{name}, step {step}: a gradient is not this rank's own"
        stepped = {p: w0[p].add(p.grad, alpha=-LR) for p in params}  # SGD's step, before the exchange
        opt.step()
        due = step % algorithm.communication_interval == 0  # counted in optimizer steps
        for b, bucket_states in zip(buckets, states):
            got = flat(b.params)
            if not due:
                worst = max(worst, assert_close(f"{name}, step {step}: a weight without an exchange", got,
                                                flat(stepped[p] for p in b.params)))
                continue
            everyone = gathered(flat(stepped[p] for p in b.params))
            xs = [torch.stack([everyone[r] for r in members]).sum(0) / len(members) for members in ring]
            before = [s[0].clone() for s in bucket_states]
            new, diffs = ring_exchange(bucket_states, xs)
            j = next(k for k, members in enumerate(ring) if rank in members)
            worst = max(worst, assert_close(f"{name}, step {step}, bucket {b.index}: a weight", got, new[j]))
            # From first principles: within half a quantization step of the ring's mean of the known
            # weights plus this member's step, x + (x^_left + x^_right + x^) / 3 - x^ (in float64),
            # and half a unit in the last place of the dtype's rounding of the result.
            n = len(ring)
            hat = [t.double() for t in before]
            exact = xs[j].double() + (hat[(j - 1) % n] + hat[(j + 1) % n] + hat[j]) / 3 - hat[j]
            off_by = (got.double() - exact).abs()
            span = float(diffs[j].max() - diffs[j].min())
            bound = span / 510 + exact.abs() * (torch.finfo(dtype).eps / 2) + 1e-6
            k = int((off_by - bound).argmax())
            assert off_by[k] <= bound[k], \
                f"{name}, step {step}: {float(off_by[k])} off the exact mix, over {float(bound[k])}"
            err_max = max(err_max, float(off_by.max()))
            ours = impl.states[b.index]
            hats = gathered(ours[0])
            if impl.ring is not None:
                # Its x^ is the reference's, and its copies of its neighbours' x^ are theirs, exactly.
                hats = [hats[members[0]] for members in ring]
                assert torch.equal(ours[0], bucket_states[j][0]), f"{name}, step {step}: x^ differs from the reference"
                assert torch.equal(ours[1], hats[(j - 1) % n]) and torch.equal(ours[2], hats[(j + 1) % n]), \
                    f"{name}, step {step}: a copy of a neighbour's x^ is not the neighbour's"
    assert err_max > 0, f"{name}: nothing was compressed"
    print(f"rank {rank}: {name}: {steps} steps, weights within {worst:.1e} of the reference, "
          f"within {err_max:.1e} of the exact mix")


def left_alone(model, optimizers, what):
    """Where with_bagua raised: no engine, hook or bagua_* attribute left, the optimizers' step
    not wrapped, and with_bagua can be called again."""
    assert getattr(model, "_bagua_engine", None) is None, what
    for name in ("bagua_optimizers", "bagua_algorithm"):
        assert not hasattr(model, name), f"{what}: with_bagua raised and left {name}"
    assert not model._forward_pre_hooks, f"{what}: with_bagua raised and left a forward hook"
    for opt in optimizers:
        assert "step" not in vars(opt), f"{what}: with_bagua raised and left the optimizer's step wrapped"


def check_bad_settings():
    three = bagua.new_group([0, 1, 2])
    for bad, want in ((lambda: q_adam.QAdamOptimizer(Net().parameters(), warmup_steps=0), "warmup_steps"),
                      (lambda: async_model_average.AsyncModelAverageAlgorithm(peer_selection_mode="shift_one"),
                       "peer_selection_mode"),
                      (lambda: async_model_average.AsyncModelAverageAlgorithm(sync_interval_ms=-1), "sync_interval_ms"),
                      (lambda: decentralized.LowPrecisionDecentralizedAlgorithm(communication_interval=0),
                       "communication_interval"),
                      (lambda: Net().with_bagua([], async_model_average.AsyncModelAverageAlgorithm(),
                                                process_group=three),
                       "every rank of the world" if rank < 3 else "not a member")):
        try:
            bad()
        except ValueError as e:
            assert want in str(e), f"expected {want!r} in {e}"
        else:
            raise AssertionError(f"no error where {want!r} was expected")
    model = make(14)
    opt = q_adam.QAdamOptimizer(list(model.parameters())[:2])
    try:
        model.with_bagua([opt], q_adam.QAdamAlgorithm(opt))
    except ValueError as e:
        assert "parameters must be the module's" in str(e), e
    else:
        raise AssertionError("QAdam with an optimizer of some of the module's parameters did not raise")
    left_alone(model, [opt], "QAdam's check")
    model = make(16)
    other = torch.optim.SGD(list(model.parameters())[:2], lr=LR)
    try:
        model.with_bagua([other], decentralized.LowPrecisionDecentralizedAlgorithm(hierarchical=False))
    except RuntimeError as e:
        assert "is not one of the optimizers'" in str(e), e
    else:
        raise AssertionError("low-precision decentralized without the optimizer did not raise")
    left_alone(model, [other], "low-precision decentralized's check")
    print(f"rank {rank}: bad settings raise")


check_qadam("QAdam", hierarchical=False)
check_qadam("QAdam, weight decay, two backwards in a step", hierarchical=False, weight_decay=0.01, accumulate_at=5)
two_hosts = fake_hosts()
check_qadam("QAdam, hierarchical", hierarchical=True, pg=two_hosts)
check_qadam_unused()
check_qadam_load_state_dict()
check_low_precision("low-precision decentralized, a ring of 4",
                    decentralized.LowPrecisionDecentralizedAlgorithm(hierarchical=False))
check_low_precision("low-precision decentralized, every 2nd step",
                    decentralized.LowPrecisionDecentralizedAlgorithm(hierarchical=False, communication_interval=2))
check_low_precision("low-precision decentralized, hierarchical (a ring of 2 hosts)",
                    decentralized.LowPrecisionDecentralizedAlgorithm(), pg=two_hosts, hosts=[[0, 1], [2, 3]])
check_low_precision("low-precision decentralized, every 2nd step, 2 micro-batches a step",
                    decentralized.LowPrecisionDecentralizedAlgorithm(hierarchical=False, communication_interval=2),
                    micro_batches=2)
check_low_precision("low-precision decentralized, bfloat16",
                    decentralized.LowPrecisionDecentralizedAlgorithm(hierarchical=False), dtype=torch.bfloat16)
check_bad_settings()
check_async_converges()
model, opt, g = check_async_training()
check_async_settle_failure()
check_async_failure()
check_async_abort_alone()
check_async_abort_resume_alone()
# Exit with the averaging running: the thread is stopped at exit, on every rank, without hanging.
model.bagua_algorithm.resume(model)
train_until(model, opt, g, lambda: model.bagua_algorithm.rounds >= 1, "a round before exit")
print(f"rank {rank}: exiting with the averaging running")
