"""The Thunder boundary: every way thunder-effects touches Thunder's internals, in one folder.

* :mod:`.names` — the tables of every private Thunder name read and every attribute attached to Thunder objects;
* :mod:`.patches` — the one module that installs (and removes) stand-ins for Thunder functions;
* :mod:`.fast` — Thunder's own computations done faster (equivalent results, pinned by tests);
* :mod:`.cache_hit` — the cache-hit path of a ``thunder_ext.jit`` function;
* :mod:`.state` — whether the pipeline is active for the compilation in progress, and what it recorded;
* :mod:`.compat` — the import shim for torch builds without named tensors.
"""
