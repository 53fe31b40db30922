"""Kernel classification on real kernel names (gpu-facts.md and the recorded H200 fixtures)."""
from __future__ import annotations

import collections
import os

import pytest
from cpu_traces import GPU_CONFIGS, gpu_fixture

from advisor.trace import load_trace
from advisor.trace.classify import CLASSES, RULES, base_name, classify

TC = [
    # TF32 / fp16 / bf16 Tensor Core GEMMs and convs (gpu-facts.md, brief, fixtures)
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(Params)",
    "cutlass_80_tensorop_s16816gemm_f16_256x128_32x3_nn_align8",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align2>"
    "(cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align2::Params)",
    "sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
    "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22"
    "ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi128ELi32EEENS4_52Conv2dWgradOutputGradient"
    "TileAccessIteratorOptimizedINS_11MatrixShapeILi64ELi32EEENS_10bfloat16_tENS_9transform",
    "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22"
    "ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi64ELi32EEENS4_52Conv2dWgradOutputGradient"
    "TileAccessIteratorOptimizedINS_11MatrixShapeILi64ELi32EEENS_10tfloat32_tENS_9transform",
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN",
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
    "nvjet_sm90_tss_128x128_64x6_2x1_v_bz_TNT",
    "sm90_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_gmma_kernel",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<wgmma_tma_bf16>>",
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_nn",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
    "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
    "turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_nn",
    "volta_h884gemm_64x64_ldg8_nn",
    "void xmma_cudnn::gemm::kernel<hmma_fprop>(Params)",
    "ampere_tf32_s1688gemm_tf32_128x128_32x3_nn",
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x32x64_stage5_"
    "warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel__5x_cudnn",
    "sm80_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize32x32x64_stage3_warpsize2x2x1_tensor16x8x8_"
    "aligna4_alignc4_execute_kernel__5x_cublas",
    "sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_"
    "warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn",
    "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_"
    "nhwc_align8>(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::Params)",
]

NOT_TC = [
    "sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_"
    "warpsize1x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_"
    "alignc4_execute_kernel__5x_cublas",
    "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int)",
    "void implicit_convolve_sgemm<__half, __half, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int)",
    "ampere_sgemm_128x64_nn",
    "volta_sgemm_128x64_tn",
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true>(cublasGemmSmallNParams<float>)",
    "void cutlass::Kernel<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(Params)",
    "void cutlass::Kernel2<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<"
    "Sgemm, float, float, float>>>(Params)",
    "magma_sgemm_kernel_fermi_nn",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false>(Params)",
    "void dot_kernel<float, 128, 0>(cublasDotParams<float>)",
    "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, float const*)",
    "void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int)",
    "void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(Params)",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __half, float, __half, false>(Params)",
    "maxwell_scudnn_128x64_relu_small_nn",
]

OTHER_CLASSES = {
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false,"
    " true, (cudnnKernelDataType_t)0>(params, __nv_bfloat16 const*, __nv_bfloat16*)": "layout_transpose",
    "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, "
    "(cudnnKernelDataType_t)0>(params, float const*, float*)": "layout_transpose",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)": "fill_memset",
    "void at::native::fill_kernel<float>(float*, long)": "fill_memset",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<3>, "
    "FusedSgdMathFunctor<float, 3>, double>(TensorListMetadata<3>)": "optimizer",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4>, "
    "FusedAdamMathFunctor<float, 4, ADAM_MODE::ADAMW, false>, double>(Params)": "optimizer",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)": "communication",
    "void at::native::batch_norm_collect_statistics_kernel<at::native::Var, float, float, float, "
    "int>(Accessor)": "normalization",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 32, true, 1, true>(cudnnTensorStruct)":
        "normalization",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int)":
        "normalization",
    "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 4, true, "
    "false>(float*, float const*, int, int, int, bool const*, int, bool)": "normalization",
    "void at::native::welford_kernel<float>(float*)": "normalization",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
    "float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float>)": "reduction",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Params)": "attention",
    "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)":
        "attention",
    "void at::native::(anonymous namespace)::efficient_attention_backward_kernel<bf16>(Params)":
        "attention",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)":
        "elementwise",
    # the parameter list mentions cudnn::reduced_divisor: it must not make this a reduction
    "void nhwcAddPaddingKernel<__nv_bfloat16, __nv_bfloat16, float, true, (cudnnKernelDataType_t)0>"
    "(int, int, __nv_bfloat16 const*, __nv_bfloat16*, cudnn::reduced_divisor, float)": "elementwise",
    "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(int, float const*)": "other",
}


@pytest.mark.parametrize("name", TC)
def test_tensor_core_names(name):
    assert classify(name) == "tc_gemm_conv", name


@pytest.mark.parametrize("name", NOT_TC)
def test_not_tensor_core_names(name):
    assert classify(name) == "gemm_conv", name


@pytest.mark.parametrize("name,cls", sorted(OTHER_CLASSES.items()))
def test_other_classes(name, cls):
    assert classify(name) == cls, name


def test_plain_xmma_substring_is_not_enough():
    # gpu-facts: "A plain "xmma" substring test is wrong" -- the operand dtype decides.
    f32 = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize32x32x8"
    assert classify(f32) == "gemm_conv"
    assert classify(f32.replace("f32f32_f32f32", "bf16bf16_bf16f32")) == "tc_gemm_conv"


def test_rules_carry_reasons_and_known_classes():
    for _pred, cls, why in RULES:
        assert cls in CLASSES and len(why) > 20


def test_base_name_drops_parameters_not_templates():
    n = "void (anonymous namespace)::softmax_warp_forward<float>(float*, cudnn::reduced_divisor)"
    assert base_name(n) == "void anon::softmax_warp_forward<float>"
    assert "fillfunctor" in base_name("void k<4, at::native::FillFunctor<float>>(int)")


def _fixture_models():
    paths = [gpu_fixture(c) for c in GPU_CONFIGS]
    have = [p for p in paths if os.path.exists(p)]
    if not have:
        pytest.fail("GPU fixture traces missing from tests/fixtures/traces/")
    return {os.path.basename(p).split(".")[0]: load_trace(p) for p in have}


def _time_by_name(model):
    t = collections.Counter()
    for nid, d in zip(model.kernels.name_id.tolist(), model.kernels.dur.tolist()):
        t[model.names[nid]] += d
    return t


def test_fixture_gemm_conv_kernels_by_precision():
    """Every GEMM/conv kernel in the real H200 traces lands on the side its precision implies."""
    models = _fixture_models()
    for cfg, m in models.items():
        times = _time_by_name(m)
        tc = sum(t for n, t in times.items() if classify(n) == "tc_gemm_conv")
        gemm = sum(t for n, t in times.items() if classify(n) == "gemm_conv")
        if cfg == "fp32_nchw" or cfg == "no_annotations":
            # TF32 off: nothing may be called Tensor Core
            assert tc == 0, [n for n in times if classify(n) == "tc_gemm_conv"]
            assert gemm > 0
        else:
            assert tc > gemm, (cfg, tc, gemm)
        for n in times:
            low = n.lower()
            if "xmma" in low and "_f32f32_f32f32_" in low:
                assert classify(n) == "gemm_conv", n
            if any(s in low for s in ("bf16bf16_bf16f32", "f16f16_f16f32", "tf32f32_", "tensorop_",
                                      "nvjet")):
                assert classify(n) == "tc_gemm_conv", n


def test_fixture_kernels_all_get_a_class():
    for m in _fixture_models().values():
        classes = {CLASSES[c] for c in set(m.kernels.cls.tolist())}
        assert classes <= set(CLASSES)
        other = {n for n in _time_by_name(m) if classify(n) == "other"}
        # only pooling and GradScaler bookkeeping are left unclassified in these ResNets
        assert all("pool" in n or "amp_update_scale" in n for n in other), other
