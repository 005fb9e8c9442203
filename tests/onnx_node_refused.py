"""Node tests of accepted ops that the compiler refuses, and why (tests/test_onnx_nodes.py).

Each entry: node test id (``<name>`` or ``<name>[const]``, see tests/onnx_nodes.py) -> text
the compile error (ModelError / UnsupportedOps) must contain, which names the op (or the
input) and the reason.  The conformance test fails if one of these compiles, and if any
node test not listed here is refused.
"""

from __future__ import annotations

#: node test id -> what the compile error must say
REFUSED: dict[str, str] = {}


def _refuse(match: str, *ids: str) -> None:
    for i in ids:
        assert i not in REFUSED, i
        REFUSED[i] = match


# Static shapes: the op's shape parameter (Reshape shape, Slice starts/ends, Resize scales/sizes,
# reduction axes, Pad pads, Tile repeats, Expand shape, Range bounds ...) arrives as a graph
# input, so the output shape is known only at run time; dvsdk compiles static shapes. The [const]
# variant of each runs with the parameter as an initializer (Range's [const] variant still has its
# start as an input).
_refuse("a shape-defining input is not constant",
    "test_center_crop_pad_crop_and_pad_expanded",
    "test_center_crop_pad_crop_axes_chw_expanded",
    "test_center_crop_pad_crop_axes_hwc_expanded", "test_center_crop_pad_crop_expanded",
    "test_center_crop_pad_crop_negative_axes_hwc_expanded",
    "test_center_crop_pad_pad_expanded", "test_constant_pad", "test_constant_pad_axes",
    "test_constant_pad_negative_axes", "test_constantofshape_float_ones",
    "test_constantofshape_int_shape_zero", "test_constantofshape_int_zeros", "test_edge_pad",
    "test_expand_dim_changed", "test_expand_dim_unchanged",
    "test_range_float16_type_positive_delta", "test_range_float16_type_positive_delta[const]",
    "test_range_float_type_positive_delta", "test_range_float_type_positive_delta[const]",
    "test_range_int32_type_negative_delta", "test_range_int32_type_negative_delta[const]",
    "test_reduce_l1_do_not_keepdims_example_expanded",
    "test_reduce_l1_do_not_keepdims_random_expanded",
    "test_reduce_l1_keep_dims_example_expanded", "test_reduce_l1_keep_dims_random_expanded",
    "test_reduce_l1_negative_axes_keep_dims_example_expanded",
    "test_reduce_l1_negative_axes_keep_dims_random_expanded",
    "test_reduce_l2_do_not_keepdims_example", "test_reduce_l2_do_not_keepdims_random",
    "test_reduce_l2_keep_dims_example", "test_reduce_l2_keep_dims_random",
    "test_reduce_l2_negative_axes_keep_dims_example",
    "test_reduce_l2_negative_axes_keep_dims_random", "test_reduce_log_sum_asc_axes_expanded",
    "test_reduce_log_sum_desc_axes_expanded", "test_reduce_log_sum_negative_axes_expanded",
    "test_reduce_max_bool_inputs", "test_reduce_max_do_not_keepdims_example",
    "test_reduce_max_do_not_keepdims_random", "test_reduce_max_keepdims_example",
    "test_reduce_max_keepdims_random", "test_reduce_max_negative_axes_keepdims_example",
    "test_reduce_max_negative_axes_keepdims_random",
    "test_reduce_mean_do_not_keepdims_example", "test_reduce_mean_do_not_keepdims_random",
    "test_reduce_mean_keepdims_example", "test_reduce_mean_keepdims_random",
    "test_reduce_mean_negative_axes_keepdims_example",
    "test_reduce_mean_negative_axes_keepdims_random", "test_reduce_min_bool_inputs",
    "test_reduce_min_do_not_keepdims_example", "test_reduce_min_do_not_keepdims_random",
    "test_reduce_min_keepdims_example", "test_reduce_min_keepdims_random",
    "test_reduce_min_negative_axes_keepdims_example",
    "test_reduce_min_negative_axes_keepdims_random",
    "test_reduce_prod_do_not_keepdims_example", "test_reduce_prod_do_not_keepdims_random",
    "test_reduce_prod_keepdims_example", "test_reduce_prod_keepdims_random",
    "test_reduce_prod_negative_axes_keepdims_example",
    "test_reduce_prod_negative_axes_keepdims_random",
    "test_reduce_sum_do_not_keepdims_example", "test_reduce_sum_do_not_keepdims_random",
    "test_reduce_sum_keepdims_example", "test_reduce_sum_keepdims_random",
    "test_reduce_sum_negative_axes_keepdims_example",
    "test_reduce_sum_negative_axes_keepdims_random",
    "test_reduce_sum_square_do_not_keepdims_example",
    "test_reduce_sum_square_do_not_keepdims_example_expanded",
    "test_reduce_sum_square_do_not_keepdims_random",
    "test_reduce_sum_square_do_not_keepdims_random_expanded",
    "test_reduce_sum_square_keepdims_example",
    "test_reduce_sum_square_keepdims_example_expanded",
    "test_reduce_sum_square_keepdims_random",
    "test_reduce_sum_square_keepdims_random_expanded",
    "test_reduce_sum_square_negative_axes_keepdims_example",
    "test_reduce_sum_square_negative_axes_keepdims_example_expanded",
    "test_reduce_sum_square_negative_axes_keepdims_random",
    "test_reduce_sum_square_negative_axes_keepdims_random_expanded", "test_reflect_pad",
    "test_reshape_extended_dims", "test_reshape_negative_dim",
    "test_reshape_negative_extended_dims", "test_reshape_one_dim", "test_reshape_reduced_dims",
    "test_reshape_reordered_all_dims", "test_reshape_reordered_last_dims",
    "test_reshape_zero_and_negative_dim", "test_reshape_zero_dim",
    "test_resize_downsample_scales_linear",
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_linear_half_pixel_symmetric",
    "test_resize_downsample_scales_nearest",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_resize_downsample_sizes_nearest", "test_resize_downsample_sizes_nearest_not_larger",
    "test_resize_downsample_sizes_nearest_not_smaller", "test_resize_upsample_scales_linear",
    "test_resize_upsample_scales_linear_align_corners",
    "test_resize_upsample_scales_linear_half_pixel_symmetric",
    "test_resize_upsample_scales_nearest", "test_resize_upsample_scales_nearest_axes_2_3",
    "test_resize_upsample_scales_nearest_axes_3_2", "test_resize_upsample_sizes_nearest",
    "test_resize_upsample_sizes_nearest_axes_2_3",
    "test_resize_upsample_sizes_nearest_axes_3_2",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel",
    "test_resize_upsample_sizes_nearest_floor_align_corners",
    "test_resize_upsample_sizes_nearest_not_larger",
    "test_resize_upsample_sizes_nearest_not_smaller",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric", "test_slice",
    "test_slice_default_axes", "test_slice_default_steps", "test_slice_end_out_of_bounds",
    "test_slice_neg", "test_slice_neg_steps", "test_slice_negative_axes",
    "test_slice_start_out_of_bounds", "test_split_variable_parts_1d_opset13",
    "test_split_variable_parts_1d_opset18", "test_split_variable_parts_2d_opset13",
    "test_split_variable_parts_2d_opset18", "test_split_variable_parts_default_axis_opset13",
    "test_split_variable_parts_default_axis_opset18", "test_squeeze",
    "test_squeeze_negative_axes", "test_tile", "test_tile_precomputed",
    "test_unsqueeze_axis_0", "test_unsqueeze_axis_1", "test_unsqueeze_axis_2",
    "test_unsqueeze_negative_axes", "test_unsqueeze_three_axes", "test_unsqueeze_two_axes",
    "test_unsqueeze_unsorted_axes", "test_upsample_nearest", "test_wrap_pad")

# Element types the kernels do not compute (graph inputs of BFLOAT16, the FLOAT8 and FLOAT4
# formats, INT4/UINT4/INT2/UINT2 and STRING): numpy has no such types; refused by name and type at
# load.
_refuse("has an element type the SDK does not handle",
    "test_cast_BFLOAT16_to_FLOAT", "test_cast_FLOAT4E2M1_to_FLOAT",
    "test_cast_FLOAT4E2M1_to_FLOAT16", "test_cast_FLOAT8E4M3FNUZ_to_FLOAT",
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT16", "test_cast_FLOAT8E4M3FN_to_FLOAT",
    "test_cast_FLOAT8E4M3FN_to_FLOAT16", "test_cast_FLOAT8E5M2FNUZ_to_FLOAT",
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT16", "test_cast_FLOAT8E5M2_to_FLOAT",
    "test_cast_FLOAT8E5M2_to_FLOAT16", "test_cast_INT2_to_FLOAT", "test_cast_INT2_to_FLOAT16",
    "test_cast_INT2_to_INT8", "test_cast_INT4_to_FLOAT", "test_cast_INT4_to_FLOAT16",
    "test_cast_INT4_to_INT8", "test_cast_UINT2_to_FLOAT", "test_cast_UINT2_to_FLOAT16",
    "test_cast_UINT2_to_UINT8", "test_cast_UINT4_to_FLOAT", "test_cast_UINT4_to_FLOAT16",
    "test_cast_UINT4_to_UINT8", "test_cast_e8m0_FLOAT8E8M0_to_FLOAT",
    "test_cast_e8m0_FLOAT8E8M0_to_FLOAT16", "test_castlike_BFLOAT16_to_FLOAT_expanded",
    "test_castlike_BFLOAT16_to_FLOAT_expanded[const]",
    "test_castlike_FLOAT16_to_FLOAT4E2M1_expanded",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded",
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded",
    "test_castlike_FLOAT16_to_FLOAT8E5M2_expanded", "test_castlike_FLOAT16_to_INT2_expanded",
    "test_castlike_FLOAT16_to_INT4_expanded", "test_castlike_FLOAT16_to_UINT2_expanded",
    "test_castlike_FLOAT16_to_UINT4_expanded", "test_castlike_FLOAT4E2M1_to_FLOAT16_expanded",
    "test_castlike_FLOAT4E2M1_to_FLOAT16_expanded[const]",
    "test_castlike_FLOAT4E2M1_to_FLOAT_expanded",
    "test_castlike_FLOAT4E2M1_to_FLOAT_expanded[const]",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded[const]",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded[const]",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded[const]",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded[const]",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded[const]",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded[const]",
    "test_castlike_FLOAT8E5M2_to_FLOAT16_expanded",
    "test_castlike_FLOAT8E5M2_to_FLOAT16_expanded[const]",
    "test_castlike_FLOAT8E5M2_to_FLOAT_expanded",
    "test_castlike_FLOAT8E5M2_to_FLOAT_expanded[const]",
    "test_castlike_FLOAT_to_BFLOAT16_expanded", "test_castlike_FLOAT_to_FLOAT4E2M1_expanded",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded",
    "test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded",
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded",
    "test_castlike_FLOAT_to_FLOAT8E5M2_expanded", "test_castlike_FLOAT_to_INT2_expanded",
    "test_castlike_FLOAT_to_INT4_expanded", "test_castlike_FLOAT_to_UINT2_expanded",
    "test_castlike_FLOAT_to_UINT4_expanded", "test_castlike_INT2_to_FLOAT16_expanded",
    "test_castlike_INT2_to_FLOAT16_expanded[const]", "test_castlike_INT2_to_FLOAT_expanded",
    "test_castlike_INT2_to_FLOAT_expanded[const]", "test_castlike_INT2_to_INT8_expanded",
    "test_castlike_INT2_to_INT8_expanded[const]", "test_castlike_INT4_to_FLOAT16_expanded",
    "test_castlike_INT4_to_FLOAT16_expanded[const]", "test_castlike_INT4_to_FLOAT_expanded",
    "test_castlike_INT4_to_FLOAT_expanded[const]", "test_castlike_INT4_to_INT8_expanded",
    "test_castlike_INT4_to_INT8_expanded[const]", "test_castlike_UINT2_to_FLOAT16_expanded",
    "test_castlike_UINT2_to_FLOAT16_expanded[const]", "test_castlike_UINT2_to_FLOAT_expanded",
    "test_castlike_UINT2_to_FLOAT_expanded[const]", "test_castlike_UINT2_to_UINT8_expanded",
    "test_castlike_UINT2_to_UINT8_expanded[const]", "test_castlike_UINT4_to_FLOAT16_expanded",
    "test_castlike_UINT4_to_FLOAT16_expanded[const]", "test_castlike_UINT4_to_FLOAT_expanded",
    "test_castlike_UINT4_to_FLOAT_expanded[const]", "test_castlike_UINT4_to_UINT8_expanded",
    "test_castlike_UINT4_to_UINT8_expanded[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded", "test_equal_string",
    "test_equal_string[const]", "test_equal_string_broadcast",
    "test_equal_string_broadcast[const]", "test_range_bfloat16_type_positive_delta",
    "test_range_bfloat16_type_positive_delta[const]")

# Cast to those same types: refused as Cast[to=<TYPE>].
_refuse("Cast[to=BFLOAT16]",
    "test_cast_FLOAT_to_BFLOAT16", "test_castlike_FLOAT_to_BFLOAT16_expanded[const]")
_refuse("Cast[to=FLOAT4E2M1]",
    "test_cast_FLOAT16_to_FLOAT4E2M1", "test_cast_FLOAT_to_FLOAT4E2M1",
    "test_castlike_FLOAT16_to_FLOAT4E2M1_expanded[const]",
    "test_castlike_FLOAT_to_FLOAT4E2M1_expanded[const]")
_refuse("Cast[to=FLOAT8E4M3FNUZ]",
    "test_cast_FLOAT16_to_FLOAT8E4M3FNUZ", "test_cast_FLOAT_to_FLOAT8E4M3FNUZ",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded[const]",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded[const]")
_refuse("Cast[to=FLOAT8E4M3FN]",
    "test_cast_FLOAT16_to_FLOAT8E4M3FN", "test_cast_FLOAT_to_FLOAT8E4M3FN",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded[const]",
    "test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded[const]")
_refuse("Cast[to=FLOAT8E5M2FNUZ]",
    "test_cast_FLOAT16_to_FLOAT8E5M2FNUZ", "test_cast_FLOAT_to_FLOAT8E5M2FNUZ",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ",
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded[const]",
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded[const]")
_refuse("Cast[to=FLOAT8E5M2]",
    "test_cast_FLOAT16_to_FLOAT8E5M2", "test_cast_FLOAT_to_FLOAT8E5M2",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2", "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2",
    "test_castlike_FLOAT16_to_FLOAT8E5M2_expanded[const]",
    "test_castlike_FLOAT_to_FLOAT8E5M2_expanded[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded[const]")
_refuse("Cast[to=FLOAT8E8M0]",
    "test_cast_e8m0_FLOAT16_to_FLOAT8E8M0", "test_cast_e8m0_FLOAT_to_FLOAT8E8M0")
_refuse("Cast[to=INT2]",
    "test_cast_FLOAT16_to_INT2", "test_cast_FLOAT_to_INT2",
    "test_castlike_FLOAT16_to_INT2_expanded[const]",
    "test_castlike_FLOAT_to_INT2_expanded[const]")
_refuse("Cast[to=INT4]",
    "test_cast_FLOAT16_to_INT4", "test_cast_FLOAT_to_INT4",
    "test_castlike_FLOAT16_to_INT4_expanded[const]",
    "test_castlike_FLOAT_to_INT4_expanded[const]")
_refuse("Cast[to=UINT2]",
    "test_cast_FLOAT16_to_UINT2", "test_cast_FLOAT_to_UINT2",
    "test_castlike_FLOAT16_to_UINT2_expanded[const]",
    "test_castlike_FLOAT_to_UINT2_expanded[const]")
_refuse("Cast[to=UINT4]",
    "test_cast_FLOAT16_to_UINT4", "test_cast_FLOAT_to_UINT4",
    "test_castlike_FLOAT16_to_UINT4_expanded[const]",
    "test_castlike_FLOAT_to_UINT4_expanded[const]")

# Empty tensors: an input with a zero-size dimension (the empty-set reductions, an empty axes list
# fed as an input, zero-size splits) is refused at load; the [const] variants of the empty-axes
# ones run.
_refuse("has a zero-size dimension",
    "test_castlike_DOUBLE_to_FLOAT16_expanded", "test_castlike_DOUBLE_to_FLOAT_expanded",
    "test_castlike_FLOAT16_to_DOUBLE_expanded", "test_castlike_FLOAT16_to_FLOAT_expanded",
    "test_castlike_FLOAT_to_DOUBLE_expanded", "test_castlike_FLOAT_to_FLOAT16_expanded",
    "test_reduce_l1_default_axes_keepdims_example_expanded",
    "test_reduce_l1_default_axes_keepdims_random_expanded",
    "test_reduce_l1_empty_set_expanded", "test_reduce_l1_empty_set_expanded[const]",
    "test_reduce_l2_default_axes_keepdims_example",
    "test_reduce_l2_default_axes_keepdims_random", "test_reduce_l2_empty_set",
    "test_reduce_l2_empty_set[const]", "test_reduce_log_sum_default_expanded",
    "test_reduce_log_sum_empty_set_expanded", "test_reduce_log_sum_empty_set_expanded[const]",
    "test_reduce_max_empty_set", "test_reduce_max_empty_set[const]",
    "test_reduce_mean_default_axes_keepdims_example",
    "test_reduce_mean_default_axes_keepdims_random", "test_reduce_min_empty_set",
    "test_reduce_min_empty_set[const]", "test_reduce_prod_empty_set",
    "test_reduce_prod_empty_set[const]", "test_reduce_sum_default_axes_keepdims_example",
    "test_reduce_sum_default_axes_keepdims_random", "test_reduce_sum_empty_axes_input_noop",
    "test_reduce_sum_empty_axes_input_noop_example", "test_reduce_sum_empty_set",
    "test_reduce_sum_empty_set[const]", "test_reduce_sum_empty_set_non_reduced_axis_zero",
    "test_reduce_sum_empty_set_non_reduced_axis_zero[const]",
    "test_reduce_sum_square_default_axes_keepdims_example",
    "test_reduce_sum_square_default_axes_keepdims_example_expanded",
    "test_reduce_sum_square_default_axes_keepdims_random",
    "test_reduce_sum_square_default_axes_keepdims_random_expanded",
    "test_reduce_sum_square_empty_set", "test_reduce_sum_square_empty_set[const]",
    "test_reduce_sum_square_empty_set_expanded",
    "test_reduce_sum_square_empty_set_expanded[const]", "test_reshape_allowzero_reordered",
    "test_reshape_allowzero_reordered[const]", "test_split_zero_size_splits_opset13",
    "test_split_zero_size_splits_opset13[const]", "test_split_zero_size_splits_opset18",
    "test_split_zero_size_splits_opset18[const]")

# Sequence and optional inputs: only tensors are compiled.
_refuse("is a sequence, not a tensor",
    "test_identity_sequence")


_refuse("is an optional, not a tensor",
    "test_identity_opt")

# Training-mode ops: a dropping Dropout is random, training BatchNormalization updates statistics;
# inference graphs only.
_refuse("Dropout[training_mode]",
    "test_training_dropout", "test_training_dropout[const]", "test_training_dropout_default",
    "test_training_dropout_default[const]", "test_training_dropout_zero_ratio")


_refuse("BatchNormalization[training]",
    "test_batchnorm_epsilon_training_mode", "test_batchnorm_epsilon_training_mode[const]",
    "test_batchnorm_example_training_mode", "test_batchnorm_example_training_mode[const]")

# Optional outputs the kernels do not produce: Dropout's mask, MaxPool's Indices.
_refuse("Dropout[mask]",
    "test_dropout_default_mask", "test_dropout_default_mask_ratio",
    "test_dropout_default_mask_ratio[const]", "test_training_dropout_default_mask",
    "test_training_dropout_default_mask[const]", "test_training_dropout_mask",
    "test_training_dropout_mask[const]", "test_training_dropout_zero_ratio_mask",
    "test_training_dropout_zero_ratio_mask[const]")


_refuse("MaxPool[Indices]",
    "test_maxpool_with_argmax_2d_precomputed_pads",
    "test_maxpool_with_argmax_2d_precomputed_strides")

# Resize modes without a kernel: tf_crop_and_resize, antialiased linear and cubic.


_refuse("Resize[tf_crop_and_resize]",
    "test_resize_tf_crop_and_resize", "test_resize_tf_crop_and_resize[const]",
    "test_resize_tf_crop_and_resize_axes_2_3",
    "test_resize_tf_crop_and_resize_axes_2_3[const]",
    "test_resize_tf_crop_and_resize_axes_3_2",
    "test_resize_tf_crop_and_resize_axes_3_2[const]",
    "test_resize_tf_crop_and_resize_extrapolation_value",
    "test_resize_tf_crop_and_resize_extrapolation_value[const]")


_refuse("Resize[antialias]",
    "test_resize_downsample_scales_linear_antialias",
    "test_resize_downsample_scales_linear_antialias[const]",
    "test_resize_downsample_sizes_linear_antialias",
    "test_resize_downsample_sizes_linear_antialias[const]")


# --- issue 28 item 2: node tests of ops that gained CPU kernels (LayerNormalization, Gelu,
# Erf, TopK, CastLike, ScatterND, Einsum, Attention, LSTM/GRU/RNN, cubic Resize,
# GridSample) and of the *_expanded function bodies that use them, refused for the
# reasons the sections above give for other ops.
# Element types numpy has no type for (bfloat16, the float8/float4 formats, INT4/UINT4/INT2/UINT2)
# as a graph input.
_refuse("has an element type the SDK does not handle",
    "test_castlike_BFLOAT16_to_FLOAT", "test_castlike_BFLOAT16_to_FLOAT[const]",
    "test_castlike_FLOAT16_to_FLOAT4E2M1", "test_castlike_FLOAT16_to_FLOAT8E4M3FN",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ", "test_castlike_FLOAT16_to_FLOAT8E5M2",
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ", "test_castlike_FLOAT16_to_INT2",
    "test_castlike_FLOAT16_to_INT4", "test_castlike_FLOAT16_to_UINT2",
    "test_castlike_FLOAT16_to_UINT4", "test_castlike_FLOAT4E2M1_to_FLOAT",
    "test_castlike_FLOAT4E2M1_to_FLOAT[const]", "test_castlike_FLOAT4E2M1_to_FLOAT16",
    "test_castlike_FLOAT4E2M1_to_FLOAT16[const]", "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT[const]", "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16[const]", "test_castlike_FLOAT8E4M3FN_to_FLOAT",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT[const]", "test_castlike_FLOAT8E4M3FN_to_FLOAT16",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT16[const]", "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT[const]", "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16[const]", "test_castlike_FLOAT8E5M2_to_FLOAT",
    "test_castlike_FLOAT8E5M2_to_FLOAT[const]", "test_castlike_FLOAT8E5M2_to_FLOAT16",
    "test_castlike_FLOAT8E5M2_to_FLOAT16[const]", "test_castlike_FLOAT_to_BFLOAT16",
    "test_castlike_FLOAT_to_FLOAT4E2M1", "test_castlike_FLOAT_to_FLOAT8E4M3FN",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ", "test_castlike_FLOAT_to_FLOAT8E5M2",
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ", "test_castlike_FLOAT_to_INT2",
    "test_castlike_FLOAT_to_INT4", "test_castlike_FLOAT_to_UINT2",
    "test_castlike_FLOAT_to_UINT4", "test_castlike_INT2_to_FLOAT",
    "test_castlike_INT2_to_FLOAT[const]", "test_castlike_INT2_to_FLOAT16",
    "test_castlike_INT2_to_FLOAT16[const]", "test_castlike_INT2_to_INT8",
    "test_castlike_INT2_to_INT8[const]", "test_castlike_INT4_to_FLOAT",
    "test_castlike_INT4_to_FLOAT[const]", "test_castlike_INT4_to_FLOAT16",
    "test_castlike_INT4_to_FLOAT16[const]", "test_castlike_INT4_to_INT8",
    "test_castlike_INT4_to_INT8[const]", "test_castlike_UINT2_to_FLOAT",
    "test_castlike_UINT2_to_FLOAT[const]", "test_castlike_UINT2_to_FLOAT16",
    "test_castlike_UINT2_to_FLOAT16[const]", "test_castlike_UINT2_to_UINT8",
    "test_castlike_UINT2_to_UINT8[const]", "test_castlike_UINT4_to_FLOAT",
    "test_castlike_UINT4_to_FLOAT[const]", "test_castlike_UINT4_to_FLOAT16",
    "test_castlike_UINT4_to_FLOAT16[const]", "test_castlike_UINT4_to_UINT8",
    "test_castlike_UINT4_to_UINT8[const]", "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ")
# An empty graph input (CastLike"s target-type example, the empty-set reductions).
_refuse("has a zero-size dimension",
    "test_castlike_DOUBLE_to_FLOAT", "test_castlike_DOUBLE_to_FLOAT16",
    "test_castlike_FLOAT16_to_DOUBLE", "test_castlike_FLOAT16_to_FLOAT",
    "test_castlike_FLOAT_to_DOUBLE", "test_castlike_FLOAT_to_FLOAT16",
    "test_reduce_l2_default_axes_keepdims_example_expanded",
    "test_reduce_l2_default_axes_keepdims_random_expanded", "test_reduce_l2_empty_set_expanded",
    "test_reduce_l2_empty_set_expanded[const]",
    "test_reduce_log_sum_exp_default_axes_keepdims_example_expanded",
    "test_reduce_log_sum_exp_default_axes_keepdims_random_expanded",
    "test_reduce_log_sum_exp_empty_set_expanded",
    "test_reduce_log_sum_exp_empty_set_expanded[const]")
# CastLike to such a type (the [const] variant: the target-type input is an initializer).
_refuse("CastLike[",
    "test_castlike_FLOAT16_to_FLOAT4E2M1[const]",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN[const]",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ[const]",
    "test_castlike_FLOAT16_to_FLOAT8E5M2[const]",
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ[const]", "test_castlike_FLOAT16_to_INT2[const]",
    "test_castlike_FLOAT16_to_INT4[const]", "test_castlike_FLOAT16_to_UINT2[const]",
    "test_castlike_FLOAT16_to_UINT4[const]", "test_castlike_FLOAT_to_BFLOAT16[const]",
    "test_castlike_FLOAT_to_FLOAT4E2M1[const]", "test_castlike_FLOAT_to_FLOAT8E4M3FN[const]",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ[const]", "test_castlike_FLOAT_to_FLOAT8E5M2[const]",
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ[const]", "test_castlike_FLOAT_to_INT2[const]",
    "test_castlike_FLOAT_to_INT4[const]", "test_castlike_FLOAT_to_UINT2[const]",
    "test_castlike_FLOAT_to_UINT4[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2[const]",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2[const]",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ[const]")
# Static shapes: TopK"s K, Resize"s scales/sizes, the reductions" axes as graph inputs.
_refuse("a shape-defining input is not constant",
    "test_reduce_l2_do_not_keepdims_example_expanded",
    "test_reduce_l2_do_not_keepdims_random_expanded",
    "test_reduce_l2_keep_dims_example_expanded", "test_reduce_l2_keep_dims_random_expanded",
    "test_reduce_l2_negative_axes_keep_dims_example_expanded",
    "test_reduce_l2_negative_axes_keep_dims_random_expanded",
    "test_reduce_log_sum_exp_do_not_keepdims_example_expanded",
    "test_reduce_log_sum_exp_do_not_keepdims_random_expanded",
    "test_reduce_log_sum_exp_keepdims_example_expanded",
    "test_reduce_log_sum_exp_keepdims_random_expanded",
    "test_reduce_log_sum_exp_negative_axes_keepdims_example_expanded",
    "test_reduce_log_sum_exp_negative_axes_keepdims_random_expanded",
    "test_resize_downsample_scales_cubic",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_downsample_scales_cubic_align_corners", "test_resize_downsample_sizes_cubic",
    "test_resize_upsample_scales_cubic",
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_upsample_scales_cubic_align_corners",
    "test_resize_upsample_scales_cubic_asymmetric", "test_resize_upsample_sizes_cubic",
    "test_top_k", "test_top_k_negative_axis", "test_top_k_same_values",
    "test_top_k_same_values_2d", "test_top_k_same_values_largest", "test_top_k_smallest",
    "test_top_k_uint64")
# Antialiased cubic Resize (as antialiased linear: no kernel).
_refuse("Resize[antialias]",
    "test_resize_downsample_scales_cubic_antialias",
    "test_resize_downsample_scales_cubic_antialias[const]",
    "test_resize_downsample_sizes_cubic_antialias",
    "test_resize_downsample_sizes_cubic_antialias[const]")


# --- issue 28, ops B: node tests of ops that gained CPU kernels (Trilu, CumSum, CumProd,
# BitShift, Bitwise*, ScatterElements/Scatter, GatherND, OneHot, EyeLike, CenterCropPad,
# ReverseSequence, the quantization ops, LpPool, MaxUnpool, RoiAlign, Col2Im, AffineGrid),
# refused for the reasons the sections above give for other ops.
# Static shapes: OneHot's depth, CenterCropPad's shape, Col2Im's image and block shapes,
# AffineGrid's size and MaxUnpool's output_shape as graph inputs (their [const] variants run).
_refuse("a shape-defining input is not constant",
    "test_affine_grid_2d", "test_affine_grid_2d_align_corners", "test_affine_grid_3d",
    "test_affine_grid_3d_align_corners", "test_center_crop_pad_crop",
    "test_center_crop_pad_crop_and_pad", "test_center_crop_pad_crop_axes_chw",
    "test_center_crop_pad_crop_axes_hwc", "test_center_crop_pad_crop_negative_axes_hwc",
    "test_center_crop_pad_pad", "test_col2im", "test_col2im_5d", "test_col2im_dilations",
    "test_col2im_pads", "test_col2im_strides", "test_maxunpool_export_with_output_shape",
    "test_onehot_negative_indices", "test_onehot_with_axis", "test_onehot_with_negative_axis",
    "test_onehot_without_axis")
# Quantized element types numpy has no type for (float8, float4, int4/uint4, int2/uint2) as a
# graph input.
_refuse("has an element type the SDK does not handle",
    "test_dequantizelinear_e4m3fn", "test_dequantizelinear_e4m3fn[const]",
    "test_dequantizelinear_e4m3fn_float16", "test_dequantizelinear_e4m3fn_float16[const]",
    "test_dequantizelinear_e4m3fn_zero_point", "test_dequantizelinear_e4m3fn_zero_point[const]",
    "test_dequantizelinear_e5m2", "test_dequantizelinear_e5m2[const]",
    "test_dequantizelinear_float4e2m1", "test_dequantizelinear_float4e2m1[const]",
    "test_dequantizelinear_int2", "test_dequantizelinear_int2[const]",
    "test_dequantizelinear_int4", "test_dequantizelinear_int4[const]",
    "test_dequantizelinear_uint2", "test_dequantizelinear_uint2[const]",
    "test_dequantizelinear_uint4", "test_dequantizelinear_uint4[const]",
    "test_quantizelinear_e4m3fn", "test_quantizelinear_e5m2", "test_quantizelinear_float4e2m1",
    "test_quantizelinear_int2", "test_quantizelinear_int4", "test_quantizelinear_uint2",
    "test_quantizelinear_uint4")
# QuantizeLinear to such a type (the [const] variant: the zero point is an initializer).
_refuse("QuantizeLinear output type must be",
    "test_quantizelinear_e4m3fn[const]", "test_quantizelinear_e5m2[const]",
    "test_quantizelinear_float4e2m1[const]", "test_quantizelinear_int2[const]",
    "test_quantizelinear_int4[const]", "test_quantizelinear_uint2[const]",
    "test_quantizelinear_uint4[const]")
# An empty graph input (Trilu of a 0 x n matrix).
_refuse("has a zero-size dimension",
    "test_tril_zero", "test_tril_zero[const]", "test_triu_zero", "test_triu_zero[const]")

# Issue 28's reductions (ReduceL1, ReduceLogSum, ReduceLogSumExp): the axes as a graph input (their
# [const] variants run), an empty axes input, the empty-set reductions.
_refuse("a shape-defining input is not constant",
    "test_reduce_l1_do_not_keepdims_example", "test_reduce_l1_do_not_keepdims_random",
    "test_reduce_l1_keep_dims_example", "test_reduce_l1_keep_dims_random",
    "test_reduce_l1_negative_axes_keep_dims_example",
    "test_reduce_l1_negative_axes_keep_dims_random", "test_reduce_log_sum_asc_axes",
    "test_reduce_log_sum_desc_axes", "test_reduce_log_sum_negative_axes",
    "test_reduce_log_sum_exp_do_not_keepdims_example",
    "test_reduce_log_sum_exp_do_not_keepdims_random", "test_reduce_log_sum_exp_keepdims_example",
    "test_reduce_log_sum_exp_keepdims_random",
    "test_reduce_log_sum_exp_negative_axes_keepdims_example",
    "test_reduce_log_sum_exp_negative_axes_keepdims_random")
_refuse("has a zero-size dimension",
    "test_reduce_l1_default_axes_keepdims_example", "test_reduce_l1_default_axes_keepdims_random",
    "test_reduce_l1_empty_set", "test_reduce_l1_empty_set[const]", "test_reduce_log_sum_default",
    "test_reduce_log_sum_empty_set", "test_reduce_log_sum_empty_set[const]",
    "test_reduce_log_sum_exp_default_axes_keepdims_example",
    "test_reduce_log_sum_exp_default_axes_keepdims_random", "test_reduce_log_sum_exp_empty_set",
    "test_reduce_log_sum_exp_empty_set[const]")
