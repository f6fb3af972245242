//! The softmax operation's attributes, the SDPA forward's softmax
//! sub-descriptor and the SDPA backward's sink / dSink (issue 24: separate
//! softmax statistics and attention sinks; cuDNN >= 9.21).
use super::super::kind::*;
use super::super::value::*;
use super::super::*;

macro_rules! attrs {
    ($($name:ident: $kind:ty, $val:ty = $c:ident;)*) => {$(
        pub const $name: Attr<$kind, $val> = Attr {
            name: AttrName::$c,
            label: stringify!($c),
            _p: PhantomData,
        };
    )*};
}

attrs! {
    OPERATION_SOFTMAX_XDESC: SoftmaxOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SOFTMAX_XDESC;
    OPERATION_SOFTMAX_YDESC: SoftmaxOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SOFTMAX_YDESC;
    OPERATION_SOFTMAX_STATS_DESC: SoftmaxOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SOFTMAX_STATS_DESC;
    OPERATION_SOFTMAX_MAX_DESC: SoftmaxOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SOFTMAX_MAX_DESC;
    OPERATION_SOFTMAX_SUM_EXP_DESC: SoftmaxOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SOFTMAX_SUM_EXP_DESC;
    OPERATION_SOFTMAX_SINK_DESC: SoftmaxOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SOFTMAX_SINK_DESC;
    OPERATION_SDPA_FWD_SOFTMAX_DESC: SdpaForwardOp, Desc<SoftmaxOp> = CUDNN_ATTR_OPERATION_SDPA_FWD_SOFTMAX_DESC;
    OPERATION_SDPA_BWD_SINK_DESC: SdpaBackwardOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SDPA_BWD_SINK_DESC;
    OPERATION_SDPA_BWD_DSINK_DESC: SdpaBackwardOp, Desc<Tensor> = CUDNN_ATTR_OPERATION_SDPA_BWD_DSINK_DESC;
}
