"""Which CTS NN cases follow the extension's text against the CTS's reference (with the
reason, a code of ``SPEC``; issue 30 item 1).  The table is ``data/vx_cts_table.txt``, generated
from a run of every case (``test_vx_cts.py``); the test checks it both ways: a listed
case's references differ, an unlisted one's agree."""

from __future__ import annotations

from pathlib import Path

#: the spec's words (seed S0, the OpenVX NN extension) each text-vs-CTS reason rests on
SPEC = {
    "dilation": "vx_nn_convolution_params_t dilation_x: \u201cinflate\u201d the kernel by "
                "inserting zeros between the kernel elements in the x direction. The value is "
                "the number of zeros to insert. (the CTS reads tap m at m * (d + 1) + d, "
                "shifted by d, and drops taps past the padded input)",
    "deconv_upscale": "vxDeconvolutionLayer: can be implemented by upsampling the inputs "
                      "with zeros insertions between the inputs, and convolving the "
                      "Deconvolution kernels on the upsampled result ... before the "
                      "Deconvolution is done, upscaling the width and height dimensions "
                      "with zeros is performed. (the CTS bounds the upscaled position by "
                      "the input width, dropping the upscaled positions past it)",
    "arith": "vxConvolutionLayer / vxFullyConnectedLayer: outputs[j,k,i] = saturate(round("
             "sum_l (sum_{m,n} inputs[j+m,k+n,l] x weights[m,n,l,i]) + biasses[j,k,i])) -- one "
             "round and one saturate around the whole sum (the CTS rounds and wraps or "
             "saturates every product and the sum after every input map; its S8 WRAP "
             "truncates to 16 bits)",
    "maxpool_pad": "vxPoolingLayer: before the operation is done (average or maximum "
                   "value). the data is padded with zeros in width and height dimensions. "
                   "(the CTS clamps the window to the input, ignoring the padding)",
    "avgpool_pad": "vxPoolingLayer: the data is padded with zeros in width and height "
                   "dimensions.",
    "roi_negative": "vxROIPoolingLayer: The kernel crop the width and height dimensions of "
                    "the input tensor with the ROI rectangles (the CTS casts a negative "
                    "start through size_t, so the clamp makes it the input width: empty)",
    "roi_q78": "1.6: For 16bit extension, VX_TYPE_INT16 with fixed_point_position 8, must be "
               "supported for all functions; vxROIPoolingLayer: 4 coordinates of the top "
               "left and bottom right corners of the roi rectangles, based on the input "
               "tensor width and height (a Q7.8 ROI tensor holds raw / 256; the CTS reads "
               "the raw integers as coordinates)",
    "lrn_same_map": "vxNormalizationLayer: Each input value is divided by (1 + alpha / n "
                    "sum_i x_i^2)^beta where n is the number of elements to normalize "
                    "across ... normalization_size: Number of elements to normalize across. "
                    "(a Caffe-style port divides SAME_MAP's alpha by n * n)",
}

_TABLE = Path(__file__).parent / "data" / "vx_cts_table.txt"


def _load() -> dict[str, str]:
    text_vs = {}
    for line in _TABLE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        kind, case_id, *reason = line.split()
        if kind == "text-vs-cts":
            text_vs[case_id] = reason[0]
    return text_vs


#: case id -> reason code(s) of SPEC, "+"-joined
TEXT_VS_CTS = _load()
