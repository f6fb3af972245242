//! The attributes this crate sets and reads, typed (`CUDNN_ATTR_<name>`).
use super::kind::*;
use super::value::*;
use super::*;

pub const TENSOR_DATA_TYPE: Attr<Tensor, DataType> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_DATA_TYPE,
    label: "CUDNN_ATTR_TENSOR_DATA_TYPE",
    _p: PhantomData,
};
pub const TENSOR_DIMENSIONS: Attr<Tensor, I64> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_DIMENSIONS,
    label: "CUDNN_ATTR_TENSOR_DIMENSIONS",
    _p: PhantomData,
};
pub const TENSOR_STRIDES: Attr<Tensor, I64> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_STRIDES,
    label: "CUDNN_ATTR_TENSOR_STRIDES",
    _p: PhantomData,
};
pub const TENSOR_UNIQUE_ID: Attr<Tensor, I64> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_UNIQUE_ID,
    label: "CUDNN_ATTR_TENSOR_UNIQUE_ID",
    _p: PhantomData,
};
pub const TENSOR_BYTE_ALIGNMENT: Attr<Tensor, I64> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
    label: "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT",
    _p: PhantomData,
};
pub const TENSOR_IS_VIRTUAL: Attr<Tensor, Bool> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_IS_VIRTUAL,
    label: "CUDNN_ATTR_TENSOR_IS_VIRTUAL",
    _p: PhantomData,
};
pub const TENSOR_RAGGED_OFFSET_DESC: Attr<Tensor, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC,
    label: "CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC",
    _p: PhantomData,
};
pub const TENSOR_IS_BY_VALUE: Attr<Tensor, Bool> = Attr {
    name: AttrName::CUDNN_ATTR_TENSOR_IS_BY_VALUE,
    label: "CUDNN_ATTR_TENSOR_IS_BY_VALUE",
    _p: PhantomData,
};
pub const CONVOLUTION_COMP_TYPE: Attr<Convolution, DataType> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
    label: "CUDNN_ATTR_CONVOLUTION_COMP_TYPE",
    _p: PhantomData,
};
pub const CONVOLUTION_CONV_MODE: Attr<Convolution, ConvMode> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
    label: "CUDNN_ATTR_CONVOLUTION_CONV_MODE",
    _p: PhantomData,
};
pub const CONVOLUTION_DILATIONS: Attr<Convolution, I64> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_DILATIONS,
    label: "CUDNN_ATTR_CONVOLUTION_DILATIONS",
    _p: PhantomData,
};
pub const CONVOLUTION_FILTER_STRIDES: Attr<Convolution, I64> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
    label: "CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES",
    _p: PhantomData,
};
pub const CONVOLUTION_POST_PADDINGS: Attr<Convolution, I64> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
    label: "CUDNN_ATTR_CONVOLUTION_POST_PADDINGS",
    _p: PhantomData,
};
pub const CONVOLUTION_PRE_PADDINGS: Attr<Convolution, I64> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
    label: "CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS",
    _p: PhantomData,
};
pub const CONVOLUTION_SPATIAL_DIMS: Attr<Convolution, I64> = Attr {
    name: AttrName::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
    label: "CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_FORWARD_ALPHA: Attr<ConvForwardOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_FORWARD_BETA: Attr<ConvForwardOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_FORWARD_CONV_DESC: Attr<ConvForwardOp, Desc<Convolution>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_FORWARD_W: Attr<ConvForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_FORWARD_X: Attr<ConvForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_FORWARD_Y: Attr<ConvForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_DATA_ALPHA: Attr<ConvDataOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_DATA_BETA: Attr<ConvDataOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC: Attr<ConvDataOp, Desc<Convolution>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_DATA_W: Attr<ConvDataOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_DATA_DX: Attr<ConvDataOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_DATA_DY: Attr<ConvDataOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_FILTER_ALPHA: Attr<ConvFilterOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_FILTER_BETA: Attr<ConvFilterOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC: Attr<ConvFilterOp, Desc<Convolution>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
        label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC",
        _p: PhantomData,
    };
pub const OPERATION_CONVOLUTION_BWD_FILTER_DW: Attr<ConvFilterOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_FILTER_X: Attr<ConvFilterOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X",
    _p: PhantomData,
};
pub const OPERATION_CONVOLUTION_BWD_FILTER_DY: Attr<ConvFilterOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
    label: "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY",
    _p: PhantomData,
};
pub const POINTWISE_MODE: Attr<Pointwise, PointwiseMode> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_MODE,
    label: "CUDNN_ATTR_POINTWISE_MODE",
    _p: PhantomData,
};
pub const POINTWISE_MATH_PREC: Attr<Pointwise, DataType> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_MATH_PREC,
    label: "CUDNN_ATTR_POINTWISE_MATH_PREC",
    _p: PhantomData,
};
pub const POINTWISE_NAN_PROPAGATION: Attr<Pointwise, NanPropagation> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_NAN_PROPAGATION,
    label: "CUDNN_ATTR_POINTWISE_NAN_PROPAGATION",
    _p: PhantomData,
};
pub const POINTWISE_RELU_LOWER_CLIP: Attr<Pointwise, F64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP,
    label: "CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP",
    _p: PhantomData,
};
pub const POINTWISE_RELU_UPPER_CLIP: Attr<Pointwise, F64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP,
    label: "CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP",
    _p: PhantomData,
};
pub const POINTWISE_RELU_LOWER_CLIP_SLOPE: Attr<Pointwise, F64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE,
    label: "CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE",
    _p: PhantomData,
};
pub const POINTWISE_ELU_ALPHA: Attr<Pointwise, F64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_ELU_ALPHA,
    label: "CUDNN_ATTR_POINTWISE_ELU_ALPHA",
    _p: PhantomData,
};
pub const POINTWISE_SOFTPLUS_BETA: Attr<Pointwise, F64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA,
    label: "CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA",
    _p: PhantomData,
};
pub const POINTWISE_SWISH_BETA: Attr<Pointwise, F64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_SWISH_BETA,
    label: "CUDNN_ATTR_POINTWISE_SWISH_BETA",
    _p: PhantomData,
};
pub const POINTWISE_AXIS: Attr<Pointwise, I64> = Attr {
    name: AttrName::CUDNN_ATTR_POINTWISE_AXIS,
    label: "CUDNN_ATTR_POINTWISE_AXIS",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_PW_DESCRIPTOR: Attr<PointwiseOp, Desc<Pointwise>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_XDESC: Attr<PointwiseOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_XDESC",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_BDESC: Attr<PointwiseOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_BDESC",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_TDESC: Attr<PointwiseOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_TDESC",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_YDESC: Attr<PointwiseOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_YDESC",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_DXDESC: Attr<PointwiseOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_DXDESC,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_DXDESC",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_DYDESC: Attr<PointwiseOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_DYDESC,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_DYDESC",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_ALPHA1: Attr<PointwiseOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1",
    _p: PhantomData,
};
pub const OPERATION_POINTWISE_ALPHA2: Attr<PointwiseOp, F64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
    label: "CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2",
    _p: PhantomData,
};
pub const MATMUL_COMP_TYPE: Attr<Matmul, DataType> = Attr {
    name: AttrName::CUDNN_ATTR_MATMUL_COMP_TYPE,
    label: "CUDNN_ATTR_MATMUL_COMP_TYPE",
    _p: PhantomData,
};
pub const OPERATION_MATMUL_ADESC: Attr<MatmulOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_ADESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_ADESC",
    _p: PhantomData,
};
pub const OPERATION_MATMUL_BDESC: Attr<MatmulOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_BDESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_BDESC",
    _p: PhantomData,
};
pub const OPERATION_MATMUL_CDESC: Attr<MatmulOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_CDESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_CDESC",
    _p: PhantomData,
};
pub const OPERATION_MATMUL_DESC: Attr<MatmulOp, Desc<Matmul>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_DESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_DESC",
    _p: PhantomData,
};
pub const REDUCTION_OPERATOR: Attr<Reduction, ReduceOp> = Attr {
    name: AttrName::CUDNN_ATTR_REDUCTION_OPERATOR,
    label: "CUDNN_ATTR_REDUCTION_OPERATOR",
    _p: PhantomData,
};
pub const REDUCTION_COMP_TYPE: Attr<Reduction, DataType> = Attr {
    name: AttrName::CUDNN_ATTR_REDUCTION_COMP_TYPE,
    label: "CUDNN_ATTR_REDUCTION_COMP_TYPE",
    _p: PhantomData,
};
pub const OPERATION_REDUCTION_XDESC: Attr<ReductionOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
    label: "CUDNN_ATTR_OPERATION_REDUCTION_XDESC",
    _p: PhantomData,
};
pub const OPERATION_REDUCTION_YDESC: Attr<ReductionOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
    label: "CUDNN_ATTR_OPERATION_REDUCTION_YDESC",
    _p: PhantomData,
};
pub const OPERATION_REDUCTION_DESC: Attr<ReductionOp, Desc<Reduction>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_REDUCTION_DESC,
    label: "CUDNN_ATTR_OPERATION_REDUCTION_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_MODE: Attr<NormForwardOp, NormMode> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_MODE,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_MODE",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_PHASE: Attr<NormForwardOp, NormPhase> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_PHASE,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_PHASE",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_XDESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_XDESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_XDESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_MEAN_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_INV_VARIANCE_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_SCALE_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_BIAS_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_EPSILON_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_FWD_YDESC: Attr<NormForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_FWD_YDESC,
    label: "CUDNN_ATTR_OPERATION_NORM_FWD_YDESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_MODE: Attr<NormBackwardOp, NormMode> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_MODE,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_MODE",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_XDESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_XDESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_XDESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_MEAN_DESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_INV_VARIANCE_DESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_DYDESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_SCALE_DESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_EPSILON_DESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_DSCALE_DESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_DBIAS_DESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC",
    _p: PhantomData,
};
pub const OPERATION_NORM_BWD_DXDESC: Attr<NormBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,
    label: "CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC",
    _p: PhantomData,
};
pub const OPERATIONGRAPH_OPS: Attr<OperationGraph, AnyOp> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATIONGRAPH_OPS,
    label: "CUDNN_ATTR_OPERATIONGRAPH_OPS",
    _p: PhantomData,
};
pub const OPERATIONGRAPH_HANDLE: Attr<OperationGraph, Handle> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
    label: "CUDNN_ATTR_OPERATIONGRAPH_HANDLE",
    _p: PhantomData,
};
pub const OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: Attr<OperationGraph, I64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
    label: "CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT",
    _p: PhantomData,
};
pub const ENGINEHEUR_MODE: Attr<EngineHeur, HeurMode> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINEHEUR_MODE,
    label: "CUDNN_ATTR_ENGINEHEUR_MODE",
    _p: PhantomData,
};
pub const ENGINEHEUR_OPERATION_GRAPH: Attr<EngineHeur, Desc<OperationGraph>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
    label: "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH",
    _p: PhantomData,
};
pub const ENGINEHEUR_RESULTS: Attr<EngineHeur, Desc<EngineConfig>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINEHEUR_RESULTS,
    label: "CUDNN_ATTR_ENGINEHEUR_RESULTS",
    _p: PhantomData,
};
pub const ENGINEHEUR_DEVICEPROP: Attr<EngineHeur, Desc<DeviceProp>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINEHEUR_DEVICEPROP,
    label: "CUDNN_ATTR_ENGINEHEUR_DEVICEPROP",
    _p: PhantomData,
};
pub const ENGINE_OPERATION_GRAPH: Attr<Engine, Desc<OperationGraph>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
    label: "CUDNN_ATTR_ENGINE_OPERATION_GRAPH",
    _p: PhantomData,
};
pub const ENGINE_GLOBAL_INDEX: Attr<Engine, I64> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
    label: "CUDNN_ATTR_ENGINE_GLOBAL_INDEX",
    _p: PhantomData,
};
pub const ENGINE_NUMERICAL_NOTE: Attr<Engine, NumericalNote> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
    label: "CUDNN_ATTR_ENGINE_NUMERICAL_NOTE",
    _p: PhantomData,
};
pub const ENGINE_BEHAVIOR_NOTE: Attr<Engine, BehaviorNote> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
    label: "CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE",
    _p: PhantomData,
};
pub const ENGINE_DEVICEPROP: Attr<Engine, Desc<DeviceProp>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINE_DEVICEPROP,
    label: "CUDNN_ATTR_ENGINE_DEVICEPROP",
    _p: PhantomData,
};
pub const ENGINECFG_ENGINE: Attr<EngineConfig, Desc<Engine>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINECFG_ENGINE,
    label: "CUDNN_ATTR_ENGINECFG_ENGINE",
    _p: PhantomData,
};
pub const ENGINECFG_KNOB_CHOICES: Attr<EngineConfig, Desc<KnobChoice>> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
    label: "CUDNN_ATTR_ENGINECFG_KNOB_CHOICES",
    _p: PhantomData,
};
pub const ENGINECFG_WORKSPACE_SIZE: Attr<EngineConfig, I64> = Attr {
    name: AttrName::CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE,
    label: "CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE",
    _p: PhantomData,
};
pub const KNOB_CHOICE_KNOB_TYPE: Attr<KnobChoice, KnobType> = Attr {
    name: AttrName::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
    label: "CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE",
    _p: PhantomData,
};
pub const KNOB_CHOICE_KNOB_VALUE: Attr<KnobChoice, I64> = Attr {
    name: AttrName::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
    label: "CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE",
    _p: PhantomData,
};
pub const EXECUTION_PLAN_HANDLE: Attr<ExecutionPlan, Handle> = Attr {
    name: AttrName::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
    label: "CUDNN_ATTR_EXECUTION_PLAN_HANDLE",
    _p: PhantomData,
};
pub const EXECUTION_PLAN_ENGINE_CONFIG: Attr<ExecutionPlan, Desc<EngineConfig>> = Attr {
    name: AttrName::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
    label: "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG",
    _p: PhantomData,
};
pub const EXECUTION_PLAN_WORKSPACE_SIZE: Attr<ExecutionPlan, I64> = Attr {
    name: AttrName::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
    label: "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE",
    _p: PhantomData,
};
pub const EXECUTION_PLAN_JSON_REPRESENTATION: Attr<ExecutionPlan, Char> = Attr {
    name: AttrName::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
    label: "CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION",
    _p: PhantomData,
};
pub const EXECUTION_PLAN_DEVICEPROP: Attr<ExecutionPlan, Desc<DeviceProp>> = Attr {
    name: AttrName::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
    label: "CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP",
    _p: PhantomData,
};
pub const VARIANT_PACK_UNIQUE_IDS: Attr<VariantPack, I64> = Attr {
    name: AttrName::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
    label: "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS",
    _p: PhantomData,
};
pub const VARIANT_PACK_DATA_POINTERS: Attr<VariantPack, DevicePtr> = Attr {
    name: AttrName::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
    label: "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS",
    _p: PhantomData,
};
pub const VARIANT_PACK_WORKSPACE: Attr<VariantPack, DevicePtr> = Attr {
    name: AttrName::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
    label: "CUDNN_ATTR_VARIANT_PACK_WORKSPACE",
    _p: PhantomData,
};
pub const DEVICEPROP_DEVICE_ID: Attr<DeviceProp, I32> = Attr {
    name: AttrName::CUDNN_ATTR_DEVICEPROP_DEVICE_ID,
    label: "CUDNN_ATTR_DEVICEPROP_DEVICE_ID",
    _p: PhantomData,
};
pub const DEVICEPROP_HANDLE: Attr<DeviceProp, Handle> = Attr {
    name: AttrName::CUDNN_ATTR_DEVICEPROP_HANDLE,
    label: "CUDNN_ATTR_DEVICEPROP_HANDLE",
    _p: PhantomData,
};
pub const DEVICEPROP_JSON_REPRESENTATION: Attr<DeviceProp, Char> = Attr {
    name: AttrName::CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
    label: "CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION",
    _p: PhantomData,
};
// ---- SDPA and its score-modifier masks (issue 11) ----
pub const OPERATION_SDPA_FWD_QDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_KDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_VDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_ODESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_STATSDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_SCALEDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_SEQ_LEN_QDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_SEQ_LEN_KVDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_PAGE_TABLE_KDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_PAGE_TABLE_VDESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC",
    _p: PhantomData,
};
pub const OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC: Attr<PagedCacheLoadOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC,
    label: "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC",
    _p: PhantomData,
};
pub const OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC: Attr<PagedCacheLoadOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC,
    label: "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC",
    _p: PhantomData,
};
pub const OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC: Attr<PagedCacheLoadOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC,
    label: "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC",
    _p: PhantomData,
};
pub const OPERATION_PAGED_CACHE_LOAD_YDESC: Attr<PagedCacheLoadOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC,
    label: "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_SUBGRAPH: Attr<SdpaForwardOp, Desc<OperationGraph>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID: Attr<SdpaForwardOp, I64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID: Attr<SdpaForwardOp, I64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_DROPOUT_SEED_DESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_SEED_DESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_SEED_DESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC: Attr<SdpaForwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_FWD_DROPOUT_PROBABILITY: Attr<SdpaForwardOp, F32> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_PROBABILITY,
    label: "CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_PROBABILITY",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_QDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_KDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_VDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_ODESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_STATSDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_SCALEDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_SEQ_LEN_QDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_SEQ_LEN_KVDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DQDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DKDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DVDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DODDESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_SUBGRAPH: Attr<SdpaBackwardOp, Desc<OperationGraph>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID: Attr<SdpaBackwardOp, I64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID: Attr<SdpaBackwardOp, I64> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DROPOUT_SEED_DESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DROPOUT_SEED_DESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DROPOUT_SEED_DESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DROPOUT_OFFSET_DESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DROPOUT_OFFSET_DESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DROPOUT_OFFSET_DESC",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DROPOUT_PROBABILITY: Attr<SdpaBackwardOp, F32> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DROPOUT_PROBABILITY,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DROPOUT_PROBABILITY",
    _p: PhantomData,
};
pub const OPERATION_SDPA_BWD_DBIAS_DESC: Attr<SdpaBackwardOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_SDPA_BWD_DBIAS_DESC,
    label: "CUDNN_ATTR_OPERATION_SDPA_BWD_DBIAS_DESC",
    _p: PhantomData,
};
pub const OPERATION_DIAGONAL_BAND_MASK_XDESC: Attr<DiagonalBandMaskOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_XDESC,
    label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_XDESC",
    _p: PhantomData,
};
pub const OPERATION_DIAGONAL_BAND_MASK_YDESC: Attr<DiagonalBandMaskOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_YDESC,
    label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_YDESC",
    _p: PhantomData,
};
pub const OPERATION_DIAGONAL_BAND_MASK_BDESC: Attr<DiagonalBandMaskOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_BDESC,
    label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_BDESC",
    _p: PhantomData,
};
pub const OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC: Attr<DiagonalBandMaskOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC,
        label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC",
        _p: PhantomData,
    };
pub const OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC: Attr<DiagonalBandMaskOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC,
        label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC",
        _p: PhantomData,
    };
pub const OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC: Attr<DiagonalBandMaskOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC,
        label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC",
        _p: PhantomData,
    };
pub const OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC: Attr<
    DiagonalBandMaskOp,
    Desc<Tensor>,
> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC,
    label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC",
    _p: PhantomData,
};
pub const OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE: Attr<DiagonalBandMaskOp, PointwiseMode> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE,
        label: "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE",
        _p: PhantomData,
    };
// ---- the composite attention (matmul overrides, dropout) ----
pub const OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC: Attr<MatmulOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC",
    _p: PhantomData,
};
pub const OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC: Attr<MatmulOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC",
    _p: PhantomData,
};
pub const OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC: Attr<MatmulOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
    label: "CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC",
    _p: PhantomData,
};
pub const MATMUL_PADDING_VALUE: Attr<Matmul, F64> = Attr {
    name: AttrName::CUDNN_ATTR_MATMUL_PADDING_VALUE,
    label: "CUDNN_ATTR_MATMUL_PADDING_VALUE",
    _p: PhantomData,
};
pub const RNG_DISTRIBUTION: Attr<Rng, RngDistribution> = Attr {
    name: AttrName::CUDNN_ATTR_RNG_DISTRIBUTION,
    label: "CUDNN_ATTR_RNG_DISTRIBUTION",
    _p: PhantomData,
};
pub const RNG_BERNOULLI_DIST_PROBABILITY: Attr<Rng, F64> = Attr {
    name: AttrName::CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY,
    label: "CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY",
    _p: PhantomData,
};
pub const OPERATION_RNG_YDESC: Attr<RngOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_RNG_YDESC,
    label: "CUDNN_ATTR_OPERATION_RNG_YDESC",
    _p: PhantomData,
};
pub const OPERATION_RNG_SEED: Attr<RngOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_RNG_SEED,
    label: "CUDNN_ATTR_OPERATION_RNG_SEED",
    _p: PhantomData,
};
pub const OPERATION_RNG_OFFSET_DESC: Attr<RngOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC,
    label: "CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC",
    _p: PhantomData,
};
pub const OPERATION_RESHAPE_XDESC: Attr<ReshapeOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
    label: "CUDNN_ATTR_OPERATION_RESHAPE_XDESC",
    _p: PhantomData,
};
pub const OPERATION_RESHAPE_YDESC: Attr<ReshapeOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_RESHAPE_YDESC,
    label: "CUDNN_ATTR_OPERATION_RESHAPE_YDESC",
    _p: PhantomData,
};
pub const OPERATION_RNG_DESC: Attr<RngOp, Desc<Rng>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_RNG_DESC,
    label: "CUDNN_ATTR_OPERATION_RNG_DESC",
    _p: PhantomData,
};
pub const OPERATION_BLOCK_SCALE_QUANTIZE_XDESC: Attr<BlockScaleQuantizeOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_XDESC,
    label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_XDESC",
    _p: PhantomData,
};
pub const OPERATION_BLOCK_SCALE_QUANTIZE_YDESC: Attr<BlockScaleQuantizeOp, Desc<Tensor>> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_YDESC,
    label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_YDESC",
    _p: PhantomData,
};
pub const OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC: Attr<BlockScaleQuantizeOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC,
        label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC",
        _p: PhantomData,
    };
pub const OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC: Attr<BlockScaleQuantizeOp, DataType> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC,
    label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC",
    _p: PhantomData,
};
pub const OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE: Attr<BlockScaleQuantizeOp, I32> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE,
    label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE",
    _p: PhantomData,
};
pub const OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC: Attr<BlockScaleDequantizeOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC,
        label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC",
        _p: PhantomData,
    };
pub const OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC: Attr<BlockScaleDequantizeOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC,
        label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC",
        _p: PhantomData,
    };
pub const OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC: Attr<BlockScaleDequantizeOp, Desc<Tensor>> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC,
        label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC",
        _p: PhantomData,
    };
pub const OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC: Attr<BlockScaleDequantizeOp, DataType> =
    Attr {
        name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC,
        label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC",
        _p: PhantomData,
    };
pub const OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE: Attr<BlockScaleDequantizeOp, I32> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE,
    label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE",
    _p: PhantomData,
};
pub const OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE: Attr<BlockScaleDequantizeOp, Bool> = Attr {
    name: AttrName::CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE,
    label: "CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE",
    _p: PhantomData,
};
// ---- the softmax operation, attention sinks and dSink (issue 24) ----
#[path = "attr_softmax.rs"]
mod softmax_attrs;
pub use softmax_attrs::*;
