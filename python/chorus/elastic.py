"""Elastic membership from Python (docs/elastic.md, docs/python.md): after a rank is lost the
survivors shrink and go on; an elastic job (``chorus-run --elastic``) takes in newcomers started
with ``chorus-run --join``::

    try:
        dist.all_reduce(grads)
    except chorus.NodeLost:
        chorus.shrink()                  # every survivor: torch's default group is now theirs
        dist.all_reduce(grads)           # ranks 0..M-1, in their old order

torch.distributed 1.13 has no reconfigure call: these functions put the new group in the old
one's place in torch.distributed's tables (the default group, or the subgroup given), so
``dist.get_rank()``, ``dist.get_world_size()`` and every op with ``group=`` see the new members.
Objects that hold the old group (a DistributedDataParallel) are made again.
"""
import functools
from datetime import timedelta

import torch as _torch
import torch.distributed as _dist
from torch.distributed import distributed_c10d as _c10d

from . import _chorus

_groups = 0  # groups chorus.new_group made: their names in torch's tables


def _torch1(call):
    """These calls rewrite torch 1.x's tables of process groups; torch 2.x's hold ProcessGroups
    that dispatch to a chorus c10d::Backend, which they do not know yet: said at once, by name."""
    @functools.wraps(call)
    def checked(*args, **kwargs):
        if int(_torch.__version__.split(".")[0]) >= 2:
            raise NotImplementedError(f"chorus.{call.__name__} from Python is written for torch 1.x's process groups; "
                                      f"torch {_torch.__version__} is not supported yet (from C++: docs/elastic.md)")
        return call(*args, **kwargs)
    return checked


def _ours(group):
    pg = _c10d._get_default_group() if group is None else group
    if not isinstance(pg, _chorus.ProcessGroupChorus):
        raise TypeError(f"chorus's elastic calls take a group of the \"chorus\" backend, not {type(pg).__name__}")
    return pg


def _register(pg, backend, store, name, ranks):
    """Enters `pg` in torch.distributed's tables; `ranks`: its members' world ranks, in rank order."""
    _c10d._pg_map[pg] = (backend, store)
    _c10d._pg_names[pg] = name
    _c10d._pg_group_ranks[pg] = {r: i for i, r in enumerate(ranks)}


def _replace(old, new, ranks):
    """Puts `new` where `old` was in torch.distributed's tables."""
    backend, store = _c10d._pg_map.get(old, ("chorus", None))
    name = _c10d._pg_names.get(old, "")
    for table in (_c10d._pg_map, _c10d._pg_names, _c10d._pg_group_ranks):
        table.pop(old, None)
    if store is None:
        store = _dist.HashStore()  # a newcomer's: chorus's subgroups need no store
    _register(new, backend, store, name, ranks)


def _install(old, new):
    if old is None or old is _c10d.GroupMember.WORLD:
        _replace(old, new, range(new.size()))
        _c10d._update_default_pg(new)
    else:
        _replace(old, new, _chorus._members(new))
    return new


@_torch1
def shrink(exclude=(), group=None):
    """Collective over the members still alive after a loss (chorus.NodeLost): returns the group
    of the survivors, ranked in their old order, and puts it in place of the old one (the default
    group when `group` is None). `exclude`: ranks (of that group) still alive to leave out too;
    an excluded member that calls raises chorus.Revoked. A subgroup shrinks into the world's next
    epoch: every survivor shrinks the default group first (shrink()), then its subgroups; a rank
    outside the subgroup (NON_GROUP_MEMBER) gets that back."""
    if group is not None and group == _c10d.GroupMember.NON_GROUP_MEMBER:
        return group
    old = _ours(group)
    if group is not None and group is not _c10d.GroupMember.WORLD and _chorus._epoch(old) == epoch():
        raise RuntimeError("shrink the default group first (chorus.shrink()), then its subgroups: torch.distributed's "
                           "ranks are the default group's")
    return _install(old, _chorus._shrink(old, [int(r) for r in exclude]))


@_torch1
def grow():
    """Collective over the world's members: the world grown by the newcomers waiting (see
    newcomers()), members' ranks kept, newcomers after them; it becomes the default group."""
    old = _ours(None)
    return _install(old, _chorus._grow(old))


@_torch1
def revoke(group=None):
    """Ends every op in flight of the world and its groups, at every member, with chorus.Revoked;
    the world is then fit only for shrink() or grow()."""
    _chorus._revoke(_ours(group))


@_torch1
def epoch(group=None):
    """The membership epoch: 0 as admitted, one more per shrink or grow."""
    return _chorus._epoch(_ours(group))


@_torch1
def newcomers():
    """Newcomers waiting for a grow, as this process was last told: ranks may hear at different
    moments, so agree (all_reduce it with MAX) before calling grow()."""
    return _chorus._newcomers(_ours(None))


@_torch1
def new_group(ranks, timeout=None):
    """torch.distributed.new_group for a world that shrank or grew (or a newcomer's): torch's own
    waits on the store of the job's first launch (rank 0's), which may be gone and which a
    newcomer never had. Called by the members alone (each passes the same `ranks`, world ranks):
    the group's creation is chorus's collective over them; other ranks get NON_GROUP_MEMBER."""
    ranks = sorted(int(r) for r in ranks)
    me = _dist.get_rank()
    if me not in ranks:
        return _c10d.GroupMember.NON_GROUP_MEMBER
    _ours(None)
    store = _dist.HashStore()  # the backend's subgroups take none from it
    pg = _chorus._create_process_group(store, ranks.index(me), len(ranks), timeout or _c10d.default_pg_timeout, ranks)
    global _groups
    _groups += 1
    _register(pg, "chorus", store, f"chorus_elastic_group_{_groups}", ranks)
    return pg


@_torch1
def join(timeout=timedelta(minutes=30)):
    """A newcomer's init_process_group (started by ``chorus-run --join``): registers with the
    running elastic job and waits, up to `timeout`, until its members grow(); the grown world is
    then torch's default group, this process ranked after the members."""
    if _dist.is_initialized():
        raise RuntimeError("chorus.join() makes the default group: this process has one already")
    pg = _chorus._join_newcomer(timeout)
    return _install(None, pg)
