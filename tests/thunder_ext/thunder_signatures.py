"""The parameter names of every Thunder function thunder_ext patches, hooks or binds (lightning-thunder 0.2.6):
the expectations ``test_patches`` and ``test_call_path`` pin, so that a Thunder change fails loudly."""

EXPECTED_PARAMETERS: dict[str, tuple[str, ...]] = {
    "insert_alias_updates": ("computation_trace", "alias_tensor_indices"),
    "fuse_bound_symbols": ("trace", "merge_func"),
    "dce": ("trace", "needed_proxies"),
    "rematerialize": ("trace",),
    "find_cut": ("external_producer_outputs", "producer", "consumer"),
    "Region": ("producers", "consumers", "bound_symbols"),
    "fuse": ("self", "region", "fusion_counter"),
    "can_fuse": ("self", "bsym"),
    "_update_fusion_call_ctx": ("bsym",),
    "transform_trace_post_optimization": ("self", "trace", "kwargs"),
    "call_cuda_graph": ("self", "fn_name", "args"),
    "build_cuda_graph": ("self", "fn", "args", "static_args_mask"),
    "thunder_general_jit": ("fn", "args", "kwargs", "sharp_edges", "ad_hoc_executor"),
    "_copy_": ("a", "b"),
    "process_recorded_modifications": ("ctx", "epilogue_trace"),
    "build_value_from_wrapped": ("wrapped_v",),
    "wrap": ("value", "provenance"),
    "put_grads": ("a", "g"),
    "split_into_forward_and_backward": ("joint_trace",),
    "sort_waits": ("execution_trace",),
    "_infer_name_postfix_from_provenance": ("pr",),
    "unpack_inputs": ("ctx", "prologue_trace", "pro_to_comp_inps", "pro_to_epi_inps", "args", "kwargs"),
    "proxify": ("self", "value"),
    "tensorproxy": ("t", "name", "history"),
    "_elementwise_binary_helper": ("a", "b", "name", "fn", "type_promotion_kind"),
    "_elementwise_unary_helper": ("a", "name", "fn", "type_promotion_kind"),
    "propagate_constraints": ("ctx", "inputs", "intermediates", "computation_trace"),
    "_infer_tensor_properties": ("like", "shape", "device", "dtype", "requires_grad", "grad", "distparallel_type",
                                 "thunder_fsdp_padding_size"),
    "pyval": ("x",),
    "add_transform": ("cfn", "transform", "disable_torch_autograd_support"),
    **{name: ("self",) for name in ("__bool__", "__float__", "__int__", "__index__")},
}
"""Parameter names of every patched Thunder function (lightning-thunder 0.2.6), pinned here: the
replacements are called with the same arguments, and each stand-in takes ``original`` and then these."""
