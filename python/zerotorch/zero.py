"""``zerotorch.zero``: DeepSpeed's ``deepspeed.zero.GatheredParameters`` for engines made by
``zerotorch.initialize``."""

import weakref

# Live engines, so that a bare list of parameters finds the engine that shards them.
_ENGINES = weakref.WeakSet()


def _register(engine):
    _ENGINES.add(engine)


def _owner(params):
    ids = {id(p) for p in params}
    for engine in list(_ENGINES):
        if ids & engine._param_ids:
            return engine
    return None


class GatheredParameters:
    """``with GatheredParameters(params, modifier_rank=None):`` every parameter of the engine
    that owns ``params`` holds its full values inside the block (stage 3 gathers them; at
    stages 0-2 they are full anyway). With ``modifier_rank``, the values that rank left in
    ``params`` are broadcast to every rank at the end of the block and written into the shards
    and the fp32 masters, so the change survives the next step (DeepSpeed's semantics; it also
    holds at stages 0-2 here, where DeepSpeed's masters would overwrite it). Every rank must
    enter the block: gathering is collective. Parameters no engine owns: nothing happens.
    """

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        if params is None:
            params = []
        elif hasattr(params, "data") and not isinstance(params, (list, tuple)):
            params = [params]
        self._params = list(params)
        self._modifier_rank = modifier_rank
        self._engine = _owner(self._params) if enabled else None
        self._scope = None

    def __enter__(self):
        if self._engine is not None:
            self._scope = self._engine._engine.gathered(self._modifier_rank is not None)
        return self

    def __exit__(self, *exc):
        if self._scope is None:
            return False
        try:
            if self._modifier_rank is not None and exc[0] is None:
                import torch
                with torch.no_grad():
                    for p in self._params:
                        self._engine._engine.broadcast(p.data, int(self._modifier_rank))
        finally:
            self._scope.close()
            self._scope = None
        return False
