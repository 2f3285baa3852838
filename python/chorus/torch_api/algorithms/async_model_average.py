"""Bagua's asynchronous model average: after ``warmup_steps`` training steps of gradient all-reduce
(averaged), gradients stay each rank's own and a thread of each rank averages the model's weights
with every other rank's every ``sync_interval_ms``, while training goes on.

A round of that thread, the same on every rank: a snapshot ``s`` of this rank's weights (and the
buffer its sum comes in: all the round's memory, taken first); a one-word all-reduce (MAX) of the
ranks' flags, which says whether a rank asks to stop (its ``abort()`` or its exit) or failed
(its snapshot raised: out of memory), and which rank, so that every rank stops at the same round;
then the sum of the snapshots over the ranks, ``S``, and ``w += S / n - s`` (Bagua's update: what
training did to ``w`` since the snapshot is kept, and the ranks' weights keep their sum). A local
error after the round's all-reduces (none allocates there) is said in the next round's flags.
Training holds the weights from a training forward to the end of its backward (so that a backward
sees the weights its forward saw) and during an optimizer step (``optimizer.step`` of the
optimizers given to with_bagua is wrapped); the thread holds them to take its snapshot and to add
its update, and a thread that waits goes before training's next turn. The thread's collectives run
on a process group of its own: one handle's ops go in the order they are issued, and the thread's
would interleave with training's differently on different ranks.

``abort(model)`` ends the averaging. It is collective, as ``resume``: every rank calls it (the
others' threads stop at the round where the first rank's flag comes, and their ``abort()`` joins
them then). A rank whose thread a peer's abort stopped, and which does not call ``abort()``
within ``timeout`` (the group's timeout: a collective's bound), raises a RuntimeError at its next
training forward saying so; ranks drift apart in async training, so an abort that comes later on
some ranks is not an error. ``resume(model)`` (collective too) starts the averaging again at the
next training forward. At exit, a thread still running is stopped the same way (at most
``EXIT_WAIT_S``, then left: it is a daemon). A failure of the thread (a rank lost, a timeout, an
error of its own) is raised by the next training forward or ``abort()``; a failure on another
rank stops every rank's thread at the same round, and the others raise an error naming it.

As Bagua: ``peer_selection_mode="all"`` only; ``sync_interval_ms=0`` averages nothing (gradients
stay each rank's own); a step is a training forward. Not guarded: forwards in eval mode or without
grad, and other reads of the weights (a checkpoint): call ``abort`` first (on every rank).
Collectives inside the module's forward (SyncBatchNorm) could wait for a rank whose thread waits
for these weights."""
import datetime
import threading
import time
import weakref

import torch
import torch.distributed as dist

from .. import communication
from ..communication import BaguaCommunicator, ReduceOp
from .base import Algorithm, AlgorithmImpl, wrap_step

MODES = ("all",)
EXIT_WAIT_S = 10.0
_SLICE_S = 0.1  # waits are sliced, to notice a stop or an exit

# A round's flag, one int64 a rank, reduced with MAX: (what << 32) | the rank that says it, so that
# the gravest wins and names a rank.
GO, ABORT, EXIT, FAILED = 0, 1, 2, 3
COLLECTIVE = ("abort() and resume() are collective: every rank calls them, also where one rank alone saves a "
              "checkpoint between them")


class _Killed(Exception):
    """The process exits: the thread leaves at once, mid-round if need be."""


def default_timeout_s():
    """The default group's timeout as Python can read it under torch 1.13 (its ProcessGroup does
    not say): the default store's, which init_process_group sets to its ``timeout`` where it made
    the store (env://, tcp://, file://); torch's default (30 minutes) where none is readable."""
    try:
        return dist.distributed_c10d._get_default_store().timeout.total_seconds()
    except Exception:
        return dist.distributed_c10d.default_pg_timeout.total_seconds()


class WeightLock:
    """Who may touch the weights now: training or the averaging thread. A waiting thread goes
    before training's next turn (training alone would take the weights back at once, each step)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._holder = None
        self._thread_waits = False

    def acquire_for_training(self, timeout_s):
        """Raises a RuntimeError where the weights are not free within ``timeout_s``: the thread
        holds them only to copy, never waiting for anything meanwhile."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._holder is not None or self._thread_waits:
                left = deadline - time.monotonic()
                if left <= 0:
                    holder = self._holder or "nobody (the averaging thread waits for them)"
                    raise RuntimeError(f"AsyncModelAverageAlgorithm: training waited {timeout_s:g} s for the "
                                       f"model's weights, held by {holder}")
                self._cv.wait(min(_SLICE_S, left))
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
                self._holder = "the averaging thread"
                return True
            finally:
                self._thread_waits = False
                self._cv.notify_all()

    def release(self):
        with self._cv:
            self._holder = None
            self._cv.notify_all()


class AsyncModelAverageAlgorithm(Algorithm):
    def __init__(self, peer_selection_mode: str = "all", sync_interval_ms: int = 500, warmup_steps: int = 0,
                 timeout: datetime.timedelta = None):
        """``timeout`` (chorus's, not Bagua's): the bound of the averaging thread's collectives, of
        training's wait for the weights, and of how long a rank whose thread a peer's ``abort()``
        stopped may take to call ``abort()`` itself. Default: the default group's (its
        init_process_group timeout)."""
        if peer_selection_mode not in MODES:
            raise ValueError(f"AsyncModelAverageAlgorithm: peer_selection_mode must be one of {MODES}, "
                             f"not {peer_selection_mode!r}")
        if sync_interval_ms < 0:
            raise ValueError(f"AsyncModelAverageAlgorithm: sync_interval_ms must not be negative, "
                             f"not {sync_interval_ms}")
        if warmup_steps < 0:
            raise ValueError(f"AsyncModelAverageAlgorithm: warmup_steps must not be negative, not {warmup_steps}")
        if timeout is not None and (not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() <= 0):
            raise ValueError(f"AsyncModelAverageAlgorithm: timeout must be a positive datetime.timedelta, "
                             f"not {timeout!r}")
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = warmup_steps
        self.timeout = timeout

    def reify(self, process_group):
        return AsyncModelAverageAlgorithmImpl(process_group, self.peer_selection_mode, self.sync_interval_ms,
                                              self.warmup_steps, self.timeout)


class AsyncModelAverageAlgorithmImpl(AlgorithmImpl):
    def __init__(self, process_group, peer_selection_mode="all", sync_interval_ms=500, warmup_steps=0, timeout=None):
        super().__init__(process_group)
        if len(process_group.ranks) != dist.get_world_size():
            # Its thread's group is made by torch.distributed, which every rank of the world must call.
            raise ValueError(f"AsyncModelAverageAlgorithm: takes a process group of every rank of the world "
                             f"({dist.get_world_size()}), not of {len(process_group.ranks)}")
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = warmup_steps
        # Without a timeout, new_group's group keeps the world's, init_process_group's (the chorus
        # backend takes torch's 30-minute default, which new_group passes, as none given).
        kw = {} if timeout is None else {"timeout": timeout}
        self.thread_comm = BaguaCommunicator(dist.new_group(process_group.ranks, backend="chorus", **kw),
                                             process_group.ranks)
        self.timeout_s = timeout.total_seconds() if timeout is not None else default_timeout_s()
        self.me = dist.get_rank()
        self.steps = 0  # training forwards so far
        self.warm = warmup_steps > 0  # this step all-reduces gradients
        self.lock = WeightLock()
        self._training_holds = False
        self.rounds = 0  # averaging rounds done (alike on every rank once the thread stopped)
        self._open = True  # averaging wanted and not yet stopped (abort closes it, resume opens it)
        self._thread = None
        # Why the thread ended, set by it as its last act: ("stopped",) by this rank's abort or exit;
        # ("peer", ABORT or EXIT, rank, when) by a peer's; ("failed", error, in_flags) by its own
        # error; ("peer_failed", rank) by a peer's failure.
        self._end = None
        self._stop = threading.Event()
        self._exiting = False
        self._kill = False
        self._in_flags = False
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
        self.lock.acquire_for_training(self.timeout_s)
        self._training_holds = True
        return True

    def _let_go(self):
        if self._training_holds:
            self._training_holds = False
            try:
                self._settle()
            finally:
                self.lock.release()

    def _settle(self):
        """Waits for the work queued on the weights' GPUs (this thread's stream): what a holder
        wrote is in place before the other side takes the weights (Bagua synchronizes too)."""
        for device in self._cuda:
            torch.cuda.current_stream(device).synchronize()

    def before_forward(self, engine):
        self._check_thread()
        self.warm = self.steps < self.warmup_steps
        self.steps += 1
        if self.warm or self.sync_interval_ms == 0:
            return
        if self._open and self._thread is None:
            self._end, self._in_flags = None, False
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
        end = ("stopped",)
        try:
            end = self._rounds()
        except _Killed:
            pass
        except BaseException as e:  # a collective failed: raised in the training thread, at its next forward or abort
            end = ("failed", e, self._in_flags)
        finally:
            self._end = end

    def _rounds(self):
        failure = None  # this rank's own error, said in the next flags
        while True:
            stopping = self._stop.is_set()
            snaps = None
            if failure is None and not stopping:
                try:
                    snaps = self._weights(self._snapshot)
                except _Killed:
                    raise
                except Exception as e:  # this rank's alone (out of memory): the others learn it from the flags
                    failure = e
            if failure is not None:
                code = FAILED
            elif self._stop.is_set():  # also where it came during the snapshot
                code = EXIT if self._exiting else ABORT
            else:
                code = GO
            said, who = self._flags(code)
            if said != GO:
                if failure is not None:
                    return ("failed", failure, False)
                if said == FAILED:
                    return ("peer_failed", who)
                if self._stop.is_set():  # this rank's abort or exit (a peer's flag may have come first)
                    return ("stopped",)
                return ("peer", said, who, time.monotonic())
            failure = self._average(*snaps)
            if failure is None:
                self.rounds += 1
                self._stop.wait(self.sync_interval_ms / 1000)

    def _flags(self, code):
        """The round's opening all-reduce: the gravest flag of the ranks' and the rank that said it."""
        flag = torch.tensor([code << 32 | self.me if code != GO else 0], dtype=torch.int64)
        self._in_flags = True
        communication.allreduce_inplace(flag, ReduceOp.MAX, comm=self.thread_comm)
        self._in_flags = False
        value = int(flag.item())
        return value >> 32, value & 0xFFFFFFFF

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

    def _snapshot(self):
        """This rank's weights, flat by dtype and device, and a copy that their sum replaces."""
        snaps = [torch.cat([p.detach().reshape(-1) for p in ps]) for ps in self._groups]
        return snaps, [s.clone() for s in snaps]

    def _average(self, snaps, sums):
        """The round's sum and update; returns an error of this rank's own after the sum, or None."""
        works = [communication.allreduce_inplace(s, ReduceOp.SUM, comm=self.thread_comm, async_op=True) for s in sums]
        for w in works:
            w.wait()
        n = self.thread_comm.nranks()

        def apply():
            for ps, total, snap in zip(self._groups, sums, snaps):
                delta = total.div_(n).sub_(snap)
                off = 0
                for p in ps:
                    p.add_(delta.narrow(0, off, p.numel()).view_as(p))
                    off += p.numel()
        try:
            self._weights(apply)
        except _Killed:
            raise
        except Exception as e:
            return e
        return None

    # The training thread's calls.

    def abort(self, bagua_module=None):
        """Stops the background averaging (collective: every rank of the group calls it); returns
        once this rank's thread has ended. The weights are then this rank's alone until ``resume``."""
        self._let_go()  # the thread may wait for weights that a forward without its backward held
        if not self._open:
            self._check_thread()
            return
        self._open = False
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():  # each of its waits is bounded: the group's timeout, or a slice
                self._thread.join(1.0)
            end, self._thread, self._end = self._end, None, None
            # Stopped by this abort, or by a peer's abort whose counterpart this is.
            if end[0] not in ("stopped", "peer"):
                self._raise_end(end)
        elif self.sync_interval_ms > 0:
            # This rank's thread did not start since with_bagua or resume (no training forward past
            # the warm-up here): another rank's may have, and waits in its first round for this
            # rank's flags. So every rank says "stop" in that round once: its thread, or here.
            said, who = self._flags(ABORT)
            if said == FAILED:
                self._raise_end(("peer_failed", who))

    def resume(self, bagua_module=None):
        """Starts the background averaging again after ``abort`` (collective: every rank calls it),
        at the next training forward past the warm-up."""
        self._check_thread()
        self._open = True

    def _check_thread(self):
        """Raises what ended this rank's thread, where it is to be said: a failure (its own or a
        peer's), or a peer's abort or exit that this rank did not follow within the timeout."""
        end = self._end
        if end is None or end[0] == "stopped":
            return
        if end[0] == "peer" and time.monotonic() - end[3] < self.timeout_s:
            return  # this rank's abort() may still come: ranks drift apart
        self._open, self._thread, self._end = False, None, None
        self._raise_end(end)

    def _raise_end(self, end):
        self._open = False
        kind = end[0]
        if kind == "failed":
            e = end[1]
            hint = (f" (in a round's opening all-reduce, which every rank's thread joins: {COLLECTIVE})"
                    if end[2] else "")
            raise RuntimeError(f"AsyncModelAverageAlgorithm: the background averaging failed{hint}: {e}") from e
        if kind == "peer_failed":
            raise RuntimeError(f"AsyncModelAverageAlgorithm: the background averaging failed on rank {end[1]} (its "
                               f"error is raised there); every rank's averaging stopped at the same round")
        _, why, who, when = end
        did = "called abort()" if why == ABORT else "exited"
        raise RuntimeError(f"AsyncModelAverageAlgorithm: rank {who} {did} {time.monotonic() - when:.1f} s ago, which "
                           f"stopped this rank's averaging too, and this rank has not called abort() since: "
                           f"{COLLECTIVE}. The averaging is off here until resume()")

    def _at_exit(self):
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._exiting = True
        self._stop.set()
        try:
            self._let_go()
        except Exception:
            pass
        thread.join(EXIT_WAIT_S)
        if thread.is_alive():
            self._kill = True
            thread.join(2 * _SLICE_S)
