"""Elastic membership from Python (docs/elastic.md, docs/python.md): after a rank is lost the
survivors shrink and go on; an elastic job (``chorus-run --elastic``) takes in newcomers started
with ``chorus-run --join``::

    try:
        dist.all_reduce(grads)
    except chorus.NodeLost:
        chorus.shrink()                  # every survivor: torch's default group is now theirs
        dist.all_reduce(grads)           # ranks 0..M-1, in their old order

torch.distributed has no reconfigure call: these functions put the new group in the old one's
place in torch.distributed's tables (the default group, or the subgroup given), so
``dist.get_rank()``, ``dist.get_world_size()`` and every op with ``group=`` see the new members.
Under torch 1.x the group is chorus's ProcessGroup itself; under torch 2.x it is a torch
ProcessGroup dispatching to chorus's c10d::Backend, so a new ProcessGroup is made around the new
backend, under the old one's name (which functional collectives look groups up by). Objects that
hold the old group (a DistributedDataParallel) are made again.
"""
from datetime import timedelta

import torch as _torch
import torch.distributed as _dist
from torch.distributed import distributed_c10d as _c10d

from . import _chorus

_TORCH2 = int(_torch.__version__.split(".")[0]) >= 2
_DEVICES = ["cpu", "cuda"] if _chorus.cuda else ["cpu"]  # the backend's devices (chorus/__init__.py registers it so)
_groups = 0  # groups chorus.new_group made: their names in torch's tables


def _ours(group):
    """The chorus backend of `group` (None: the default group)."""
    pg = _c10d._get_default_group() if group is None else group
    if _TORCH2 and isinstance(pg, _c10d.ProcessGroup):
        try:
            pg = pg._get_backend(_torch.device("cpu"))  # what the ProcessGroup dispatches to
            pg = getattr(pg, "wrapped_pg", pg)  # under TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper
        except RuntimeError:
            pass  # no CPU backend: not chorus's
    if not isinstance(pg, _chorus.ProcessGroupChorus):
        raise TypeError(f"chorus's elastic calls take a group of the \"chorus\" backend, not {type(pg).__name__}")
    return pg


# torch 1.x: its tables hold chorus's ProcessGroup itself.

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


# torch 2.x: its tables hold ProcessGroups, each dispatching to a backend per device type. What
# follows does what _new_process_group_helper and destroy_process_group do for a custom backend.

def _need(obj, name):
    """A torch internal these calls rely on; a torch without it is told by name."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise NotImplementedError(f"chorus's elastic calls need torch.distributed's {name}, which torch "
                                  f"{_torch.__version__} lacks") from None


def _wrap(backend, store, name, desc, old):
    """A torch ProcessGroup that dispatches to chorus's `backend` on chorus's devices."""
    group = _c10d.ProcessGroup
    custom = _need(group, "BackendType").CUSTOM
    if hasattr(group, "Options"):  # torch <= 2.4: the group's options name its backend
        pg = group(store, backend.rank(), backend.size(), group.Options(backend="chorus"))
    else:
        pg = group(store, backend.rank(), backend.size())
        _need(pg, "_set_default_backend")(custom)
    if getattr(old, "bound_device_id", None) is not None:
        pg.bound_device_id = old.bound_device_id  # before the backends, which take it
    for device in _DEVICES:
        _need(pg, "_register_backend")(_torch.device(device), custom, backend)
    if hasattr(pg, "_set_group_name"):  # after the backends: it names them
        pg._set_group_name(name)
    if hasattr(pg, "_set_group_desc"):
        pg._set_group_desc(getattr(old, "group_desc", None) or desc)
    return pg


def _enter(old, backend, ranks, desc, name=None):
    """Puts a ProcessGroup around `backend` where `old` (a ProcessGroup, or None) was in torch
    2.x's tables; `ranks`: its members' world ranks, in rank order. Returns it."""
    state = _need(_c10d, "_world")
    pg_map, pg_names, pg_ranks = (_need(state, t) for t in ("pg_map", "pg_names", "pg_group_ranks"))
    kind, store = pg_map.get(old, ("chorus", None))
    if store is None:
        store = _dist.HashStore()  # a newcomer's or chorus.new_group's: chorus's groups take none from it
    name = name or pg_names.get(old)
    if name is None:  # a newcomer's default group: named as init_process_group names one
        name = str(getattr(state, "group_count", 0))
        state.group_count = int(name) + 1
    registry = _torch._C._distributed_c10d
    register = getattr(registry, "_register_process_group", None)
    unregister = _need(registry, "_unregister_process_group") if register else None
    pg = _wrap(backend, store, name, desc, old)  # before any table changes: it may fail

    config = getattr(state, "pg_backend_config", {}).get(old, ",".join(f"{d}:chorus" for d in _DEVICES))
    tag = getattr(state, "pg_to_tag", {}).get(old)
    for table in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "pg_to_tag", "pg_coalesce_state",
                  "pg_default_device"):
        getattr(state, table, {}).pop(old, None)
    pg_map[pg] = (kind, store)
    pg_names[pg] = name
    pg_ranks[pg] = {r: i for i, r in enumerate(ranks)}
    if hasattr(state, "pg_backend_config"):
        state.pg_backend_config[pg] = config
    if hasattr(state, "pg_to_tag") and hasattr(state, "tags_to_pg"):
        if tag is None:  # a new group: tagged as torch tags its own
            tag = f"ptd:{name}"
            for t in ("", tag):
                state.tags_to_pg.setdefault(t, []).append(pg)
        else:
            for pgs in state.tags_to_pg.values():
                pgs[:] = [pg if g is old else g for g in pgs]
        state.pg_to_tag[pg] = tag
    if register:  # torch's C++ registry, where functional collectives find groups by name
        unregister(name)
        register(name, pg)
    return pg


def _install(group, new):
    """Puts chorus's `new` in place of `group` (None: the default group) in torch.distributed's
    tables; returns the group torch now holds."""
    world = group is None or group is _c10d.GroupMember.WORLD
    old = _c10d.GroupMember.WORLD if world else group
    ranks = range(new.size()) if world else _chorus._members(new)
    if _TORCH2:
        pg = _enter(old, new, ranks, "default_pg" if world else "undefined")
    else:
        _replace(old, new, ranks)
        pg = new
    if world:
        if hasattr(_c10d, "_update_default_pg"):
            _c10d._update_default_pg(pg)
        else:
            _need(_c10d, "_world").default_pg = pg
    return pg


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
    return _install(group, _chorus._shrink(old, [int(r) for r in exclude]))


def grow():
    """Collective over the world's members: the world grown by the newcomers waiting (see
    newcomers()), members' ranks kept, newcomers after them; it becomes the default group."""
    return _install(None, _chorus._grow(_ours(None)))


def revoke(group=None):
    """Ends every op in flight of the world and its groups, at every member, with chorus.Revoked;
    the world is then fit only for shrink() or grow()."""
    _chorus._revoke(_ours(group))


def epoch(group=None):
    """The membership epoch: 0 as admitted, one more per shrink or grow."""
    return _chorus._epoch(_ours(group))


def newcomers():
    """Newcomers waiting for a grow, as this process was last told: ranks may hear at different
    moments, so agree (all_reduce it with MAX) before calling grow()."""
    return _chorus._newcomers(_ours(None))


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
    name = f"chorus_elastic_group_{_groups}"
    if _TORCH2:
        return _enter(None, pg, ranks, "undefined", name)
    _register(pg, "chorus", store, name, ranks)
    return pg


def join(timeout=timedelta(minutes=30)):
    """A newcomer's init_process_group (started by ``chorus-run --join``): registers with the
    running elastic job and waits, up to `timeout`, until its members grow(); the grown world is
    then torch's default group, this process ranked after the members."""
    if _dist.is_initialized():
        raise RuntimeError("chorus.join() makes the default group: this process has one already")
    return _install(None, _chorus._join_newcomer(timeout))
