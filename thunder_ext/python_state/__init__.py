"""Python state as effects: the objects a traced program reads and writes besides tensors.

The call's arguments and their aliasing (:mod:`.arguments`), objects reached through weak references
(:mod:`.referents`), dicts, lists, attributes and objects the call creates (:mod:`.dict_state`,
:mod:`.object_state`, :mod:`.module_state`), all written back by one epilogue (:mod:`.state_epilogue`); state the
interpreter answers as eager (:mod:`.interpreter_state`), tensor hooks and tensor attributes
(:mod:`.tensor_hooks`, :mod:`.tensor_attributes`), in-place metadata changes (:mod:`.rebinding`). The design is
``docs/python-state.md``.
"""
