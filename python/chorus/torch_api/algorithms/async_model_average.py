"""Bagua's asynchronous model average: after ``warmup_steps`` training steps of gradient all-reduce
(averaged), gradients stay each rank's own and a thread of each rank averages the model's weights
with every other rank's every ``sync_interval_ms``, while training goes on.

A round of that thread, the same on every rank: a one-byte all-reduce (MAX) of "stop" flags, so
that every rank stops at the same round (a rank's ``abort()``, or its exit, stops them all); a
snapshot ``s`` of this rank's weights; their sum over the ranks, ``S``; then
``w += S / n - s`` (Bagua's update: what training did to ``w`` since the snapshot is kept, and the
ranks' weights keep their sum). Training holds the weights from a training forward to the end of
its backward (so that a backward sees the weights its forward saw) and during an optimizer step
(``optimizer.step`` of the optimizers given to with_bagua is wrapped); the thread holds them to
take its snapshot and to add its update, and a thread that waits goes before training's next
turn. The thread's collectives run on a process group of its own: one handle's ops go in the
order they are issued, and the thread's would interleave with training's differently on
different ranks.

``abort(model)`` (collective: every rank calls it) ends the averaging: this rank asks to stop,
every thread stops at the next round's flags, and this rank's thread is joined (a rank whose
thread has not started yet takes part in that round itself). ``resume(model)`` (collective too)
starts it again at the next training forward. At exit, a thread still running is stopped the same
way (at most ``EXIT_WAIT_S``, then left: it is a daemon). A failure of the thread (a rank lost, a
timeout) is raised by the next training forward or ``abort()``.

As Bagua: ``peer_selection_mode="all"`` only; ``sync_interval_ms=0`` averages nothing (gradients
stay each rank's own); a step is a training forward. Not guarded: forwards in eval mode or without
grad, and other reads of the weights (a checkpoint): call ``abort`` first. Collectives inside the
module's forward (SyncBatchNorm) could wait for a rank whose thread waits for these weights."""
import threading
import weakref

import torch
import torch.distributed as dist

from .. import communication
from ..communication import BaguaCommunicator, ReduceOp
from .base import Algorithm, AlgorithmImpl, wrap_step

MODES = ("all",)
EXIT_WAIT_S = 10.0
_SLICE_S = 0.1  # waits are sliced, to notice a stop or an exit


class _Killed(Exception):
    """The process exits: the thread leaves at once, mid-round if need be."""


class WeightLock:
    """Who may touch the weights now: training or the averaging thread. A waiting thread goes
    before training's next turn (training alone would take the weights back at once, each step)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._holder = None
        self._thread_waits = False

    def acquire_for_training(self):
        with self._cv:
            # The thread holds them only to copy: it never waits for anything meanwhile.
            while self._holder is not None or self._thread_waits:
                self._cv.wait(_SLICE_S)
            self._holder = "training"

    def acquire_for_thread(self, give_up):
        """False where ``give_up()`` came true first."""
        with self._cv:
            self._thread_waits = True
            try:
                while self._holder is not None:
                    if give_up():
                        return False
                    self._cv.wait(_SLICE_S)
                self._holder = "thread"
                return True
            finally:
                self._thread_waits = False
                self._cv.notify_all()

    def release(self):
        with self._cv:
            self._holder = None
            self._cv.notify_all()


class AsyncModelAverageAlgorithm(Algorithm):
    def __init__(self, peer_selection_mode: str = "all", sync_interval_ms: int = 500, warmup_steps: int = 0):
        if peer_selection_mode not in MODES:
            raise ValueError(f"AsyncModelAverageAlgorithm: peer_selection_mode must be one of {MODES}, "
                             f"not {peer_selection_mode!r}")
        if sync_interval_ms < 0:
            raise ValueError(f"AsyncModelAverageAlgorithm: sync_interval_ms must not be negative, "
                             f"not {sync_interval_ms}")
        if warmup_steps < 0:
            raise ValueError(f"AsyncModelAverageAlgorithm: warmup_steps must not be negative, not {warmup_steps}")
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = warmup_steps

    def reify(self, process_group):
        return AsyncModelAverageAlgorithmImpl(process_group, self.peer_selection_mode, self.sync_interval_ms,
                                              self.warmup_steps)


class AsyncModelAverageAlgorithmImpl(AlgorithmImpl):
    def __init__(self, process_group, peer_selection_mode="all", sync_interval_ms=500, warmup_steps=0):
        super().__init__(process_group)
        if len(process_group.ranks) != dist.get_world_size():
            # Its thread's group is made by torch.distributed, which every rank of the world must call.
            raise ValueError(f"AsyncModelAverageAlgorithm: takes a process group of every rank of the world "
                             f"({dist.get_world_size()}), not of {len(process_group.ranks)}")
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = warmup_steps
        self.thread_comm = BaguaCommunicator(dist.new_group(process_group.ranks, backend="chorus"),
                                             process_group.ranks)
        self.steps = 0  # training forwards so far
        self.warm = warmup_steps > 0  # this step all-reduces gradients
        self.lock = WeightLock()
        self._training_holds = False
        self.rounds = 0  # averaging rounds done (alike on every rank once the thread stopped)
        self._open = True  # averaging wanted and not yet stopped (abort closes it, resume opens it)
        self._thread = None
        self._stop = threading.Event()
        self._kill = False
        self._error = None
        self._groups = []
        self._cuda = []  # the weights' GPUs

    @property
    def syncs_gradients(self):
        return self.warm

    def attach(self, engine):
        by_kind = {}
        for p in engine.params:
            by_kind.setdefault((p.dtype, p.device), []).append(p)
        self._groups = list(by_kind.values())
        self._cuda = sorted({p.device for p in engine.params if p.is_cuda}, key=str)
        for opt in engine.module.bagua_optimizers:
            wrap_step(opt, self._locked_step)
        me = weakref.ref(self)
        at_exit = getattr(threading, "_register_atexit", None)  # before non-daemon threads are joined
        if at_exit is not None:
            at_exit(lambda: me() is not None and me()._at_exit())
        else:
            import atexit
            atexit.register(lambda: me() is not None and me()._at_exit())

    def _locked_step(self, step, *args, **kwargs):
        took = self._hold()
        try:
            return step(*args, **kwargs)
        finally:
            if took:
                self._let_go()

    def _hold(self):
        if self._training_holds:
            return False
        self.lock.acquire_for_training()
        self._training_holds = True
        return True

    def _let_go(self):
        if self._training_holds:
            self._training_holds = False
            self._settle()
            self.lock.release()

    def _settle(self):
        """Waits for the work queued on the weights' GPUs (this thread's stream): what a holder
        wrote is in place before the other side takes the weights (Bagua synchronizes too)."""
        for device in self._cuda:
            torch.cuda.current_stream(device).synchronize()

    def before_forward(self, engine):
        self._raise_failure()
        self.warm = self.steps < self.warmup_steps
        self.steps += 1
        if self.warm or self.sync_interval_ms == 0:
            return
        if self._open and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="chorus-async-model-average", daemon=True)
            self._thread.start()
        self._hold()

    def launch(self, bucket):
        return communication.allreduce_inplace(bucket.flat, ReduceOp.AVG, comm=self.global_comm, async_op=True)

    def finish(self, bucket, token):
        token.wait()

    def after_backward(self, engine):
        self._let_go()

    def reset(self):
        self._let_go()
        return None

    # The thread.

    def _run(self):
        flag = torch.zeros(1, dtype=torch.uint8)
        try:
            while True:
                flag[0] = int(self._stop.is_set())
                communication.allreduce_inplace(flag, ReduceOp.MAX, comm=self.thread_comm)
                if flag.item():
                    return
                self._average()
                self.rounds += 1
                self._stop.wait(self.sync_interval_ms / 1000)
        except _Killed:
            pass
        except BaseException as e:  # raised in the training thread, at its next forward or abort
            self._error = e

    def _weights(self, fn):
        if not self.lock.acquire_for_thread(lambda: self._kill):
            raise _Killed()
        try:
            with torch.no_grad():
                out = fn()
            self._settle()
            return out
        finally:
            self.lock.release()

    def _average(self):
        snaps = self._weights(lambda: [torch.cat([p.detach().reshape(-1) for p in ps]) for ps in self._groups])
        sums = [s.clone() for s in snaps]
        works = [communication.allreduce_inplace(s, ReduceOp.SUM, comm=self.thread_comm, async_op=True) for s in sums]
        for w in works:
            w.wait()
        n = self.thread_comm.nranks()
        deltas = [total.div_(n).sub_(snap) for total, snap in zip(sums, snaps)]

        def apply():
            for ps, delta in zip(self._groups, deltas):
                off = 0
                for p in ps:
                    p.add_(delta.narrow(0, off, p.numel()).view_as(p))
                    off += p.numel()
        self._weights(apply)

    # The training thread's calls.

    def abort(self, bagua_module=None):
        """Stops the background averaging (collective: every rank of the group calls it); returns
        once this rank's thread has ended. The weights are then this rank's alone until ``resume``."""
        self._let_go()  # the thread may wait for weights that a forward without its backward held
        if not self._open:
            self._raise_failure()
            return
        self._open = False
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():  # each of its waits is bounded: the group's timeout, or a slice
                self._thread.join(1.0)
            self._thread = None
        elif self.sync_interval_ms > 0:
            # This rank's thread did not start since with_bagua or resume (no training forward past
            # the warm-up here): another rank's may have, and waits in its first round for this
            # rank's flags. So every rank says "stop" in that round once: its thread, or here.
            flag = torch.ones(1, dtype=torch.uint8)
            communication.allreduce_inplace(flag, ReduceOp.MAX, comm=self.thread_comm)
        self._raise_failure()

    def resume(self, bagua_module=None):
        """Starts the background averaging again after ``abort`` (collective: every rank calls it),
        at the next training forward past the warm-up."""
        self._raise_failure()
        self._open = True

    def _raise_failure(self):
        if self._error is not None:
            e, self._error = self._error, None
            self._open = False
            self._thread = None
            raise RuntimeError(f"AsyncModelAverageAlgorithm: the background averaging failed: {e}") from e

    def _at_exit(self):
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._stop.set()
        self._let_go()
        thread.join(EXIT_WAIT_S)
        if thread.is_alive():
            self._kill = True
            thread.join(2 * _SLICE_S)
