// FuseoptSyncBatchNorm and FuseoptSyncBatchNormGrad: the two passes of
// fuseopt.tensorflow's SyncBatchNormalization as TensorFlow ops that call
// fuseopt's core directly.
//
// Through tf.numpy_function each pass cost a Python round trip of about
// 50 us on top of the work (docs/benchmarks.md), most of a small layer's
// time. These ops hand TensorFlow's buffers to fuseopt_batch_norm_forward /
// _backward (fuseopt.h): the core computes the per-channel sums, reduces them
// through the layer's agreed reduction and normalizes. They know nothing of
// Python: the Python side passes, as attributes, the addresses of the core's
// functions and of the layer's agreed reductions (which it keeps alive for
// the life of the process), and how to report each fuseopt status (the
// TensorFlow code and class name tf_errors.graph_status gives it).
#include <cstdint>
#include <string>
#include <vector>

#include "fuseopt/fuseopt.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::shape_inference::InferenceContext;

typedef int (*ForwardFn)(fuseopt_agreed_t*, const fuseopt_batch_norm_forward_t*);
typedef int (*BackwardFn)(fuseopt_agreed_t*, const fuseopt_batch_norm_backward_t*);
typedef const char* (*LastErrorFn)(void);

// Attributes common to both ops: where the core is, and how to report it.
#define FUSEOPT_CORE_ATTRS                                                   \
  Attr("T: {float, double}")                                                 \
      .Attr("axis: int")                                                     \
      .Attr("function: int")                                                 \
      .Attr("last_error: int")                                               \
      .Attr("agreed: int")                                                   \
      .Attr("error_codes: list(int)")                                        \
      .Attr("error_names: list(string)")                                     \
      .SetIsStateful()

REGISTER_OP("FuseoptSyncBatchNorm")
    .Input("x: T")
    .Input("gamma: T")
    .Input("beta: T")
    .Output("y: T")
    .Output("saved: double")
    .Output("mean: T")
    .Output("variance: T")
    .Attr("epsilon: float")
    .FUSEOPT_CORE_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      // saved holds 2C + 1 values, mean and variance C, for C channels on axis.
      c->set_output(0, c->input(0));
      int64_t axis = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("axis", &axis));
      auto channels = c->UnknownDim();
      if (c->RankKnown(c->input(0)) && axis >= 0 && axis < c->Rank(c->input(0)))
        channels = c->Dim(c->input(0), axis);
      tensorflow::shape_inference::DimensionHandle saved;
      TF_RETURN_IF_ERROR(c->Multiply(channels, 2, &saved));
      TF_RETURN_IF_ERROR(c->Add(saved, 1, &saved));
      c->set_output(1, c->Vector(saved));
      c->set_output(2, c->Vector(channels));
      c->set_output(3, c->Vector(channels));
      return absl::OkStatus();
    });

REGISTER_OP("FuseoptSyncBatchNormGrad")
    .Input("x: T")
    .Input("dy: T")
    .Input("gamma: T")
    .Input("saved: double")
    .Output("dx: T")
    .Output("dgamma: T")
    .Output("dbeta: T")
    .FUSEOPT_CORE_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    });

// A dense row-major tensor with its channels on axis, as the core sees it.
fuseopt_channel_view_t view_of(const Tensor& t, int axis, int32_t dtype) {
  fuseopt_channel_view_t v{};
  v.data = const_cast<char*>(t.tensor_data().data());
  v.dtype = dtype;
  v.outer = v.inner = 1;
  for (int d = 0; d < t.dims(); ++d) {
    if (d < axis) v.outer *= t.dim_size(d);
    if (d > axis) v.inner *= t.dim_size(d);
  }
  v.channels = t.dim_size(axis);
  v.inner_stride = 1;
  v.channel_stride = v.inner;
  v.outer_stride = v.channels * v.inner;
  return v;
}

class CoreOp : public OpKernel {
 public:
  explicit CoreOp(OpKernelConstruction* c) : OpKernel(c) {
    tensorflow::int64 function, last_error, agreed;
    OP_REQUIRES_OK(c, c->GetAttr("axis", &axis_));
    OP_REQUIRES_OK(c, c->GetAttr("function", &function));
    OP_REQUIRES_OK(c, c->GetAttr("last_error", &last_error));
    OP_REQUIRES_OK(c, c->GetAttr("agreed", &agreed));
    OP_REQUIRES_OK(c, c->GetAttr("error_codes", &error_codes_));
    OP_REQUIRES_OK(c, c->GetAttr("error_names", &error_names_));
    function_ = reinterpret_cast<void*>(function);
    last_error_ = reinterpret_cast<LastErrorFn>(last_error);
    agreed_ = reinterpret_cast<fuseopt_agreed_t*>(agreed);
    tensorflow::DataType t;
    OP_REQUIRES_OK(c, c->GetAttr("T", &t));
    dtype_ = t == tensorflow::DT_DOUBLE ? FUSEOPT_FLOAT64 : FUSEOPT_FLOAT32;
  }

 protected:
  // Fails the step with the core's status, as tf_errors.graph_status would.
  bool ok(OpKernelContext* context, int status) {
    if (status == FUSEOPT_OK) return true;
    const size_t i = static_cast<size_t>(status);
    const int code = i < error_codes_.size() ? error_codes_[i] : 2;  // UNKNOWN
    const std::string name = i < error_names_.size() ? error_names_[i] : "FuseoptError";
    context->SetStatus(absl::Status(static_cast<absl::StatusCode>(code),
                                    name + ": " + last_error_()));
    return false;
  }
  // The intra-op threads TensorFlow gives this process's CPU kernels.
  static int32_t threads(OpKernelContext* context) {
    const auto* workers = context->device()->tensorflow_cpu_worker_threads();
    return workers ? workers->num_threads : 1;
  }
  bool check_axis(OpKernelContext* context, const Tensor& x) {
    if (axis_ >= 0 && axis_ < x.dims()) return true;
    context->SetStatus(absl::InvalidArgumentError("SyncBatchNormalization: bad channel axis"));
    return false;
  }

  int axis_ = 0;
  int32_t dtype_ = FUSEOPT_FLOAT32;
  void* function_ = nullptr;
  LastErrorFn last_error_ = nullptr;
  fuseopt_agreed_t* agreed_ = nullptr;
  std::vector<int32_t> error_codes_;
  std::vector<std::string> error_names_;
};

class SyncBatchNormOp : public CoreOp {
 public:
  explicit SyncBatchNormOp(OpKernelConstruction* c) : CoreOp(c) {
    OP_REQUIRES_OK(c, c->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    if (!check_axis(context, x)) return;
    const int64_t channels = x.dim_size(axis_);
    Tensor *y = nullptr, *saved = nullptr, *mean = nullptr, *variance = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, {2 * channels + 1}, &saved));
    OP_REQUIRES_OK(context, context->allocate_output(2, {channels}, &mean));
    OP_REQUIRES_OK(context, context->allocate_output(3, {channels}, &variance));
    fuseopt_batch_norm_forward_t args{};
    args.struct_size = sizeof(args);
    args.x = view_of(x, axis_, dtype_);
    args.y = view_of(*y, axis_, dtype_);
    args.param_dtype = dtype_;
    args.weight = context->input(1).tensor_data().data();
    args.bias = context->input(2).tensor_data().data();
    args.eps = epsilon_;
    args.threads = threads(context);
    double* out = saved->flat<double>().data();
    args.saved_mean = out;
    args.saved_invstd = out + channels;
    args.saved_count = out + 2 * channels;
    if (!ok(context, reinterpret_cast<ForwardFn>(function_)(agreed_, &args))) return;
    // The batch statistics, for Keras' moving averages (variance biased, as
    // Keras' own layer uses it).
    if (dtype_ == FUSEOPT_FLOAT64)
      statistics<double>(out, channels, mean, variance);
    else
      statistics<float>(out, channels, mean, variance);
  }

 private:
  template <typename T>
  void statistics(const double* saved, int64_t channels, Tensor* mean, Tensor* variance) const {
    T* m = mean->flat<T>().data();
    T* v = variance->flat<T>().data();
    for (int64_t c = 0; c < channels; ++c) {
      const double invstd = saved[channels + c];
      m[c] = static_cast<T>(saved[c]);
      v[c] = static_cast<T>(1.0 / (invstd * invstd) - epsilon_);
    }
  }

  float epsilon_ = 0;
};

class SyncBatchNormGradOp : public CoreOp {
 public:
  explicit SyncBatchNormGradOp(OpKernelConstruction* c) : CoreOp(c) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    if (!check_axis(context, x)) return;
    const int64_t channels = x.dim_size(axis_);
    const Tensor& saved = context->input(3);
    OP_REQUIRES(context, saved.NumElements() == 2 * channels + 1,
                absl::InvalidArgumentError("SyncBatchNormalization: saved statistics of "
                                           "another layer"));
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, {channels}, &dgamma));
    OP_REQUIRES_OK(context, context->allocate_output(2, {channels}, &dbeta));
    fuseopt_batch_norm_backward_t args{};
    args.struct_size = sizeof(args);
    args.x = view_of(x, axis_, dtype_);
    args.dy = view_of(context->input(1), axis_, dtype_);
    args.dx = view_of(*dx, axis_, dtype_);
    args.param_dtype = dtype_;
    args.weight = context->input(2).tensor_data().data();
    const double* values = saved.flat<double>().data();
    args.saved_mean = values;
    args.saved_invstd = values + channels;
    args.saved_count = values[2 * channels];
    args.grad_weight = const_cast<char*>(dgamma->tensor_data().data());
    args.grad_bias = const_cast<char*>(dbeta->tensor_data().data());
    args.threads = threads(context);
    ok(context, reinterpret_cast<BackwardFn>(function_)(agreed_, &args));
  }
};

REGISTER_KERNEL_BUILDER(Name("FuseoptSyncBatchNorm").Device(tensorflow::DEVICE_CPU),
                        SyncBatchNormOp);
REGISTER_KERNEL_BUILDER(Name("FuseoptSyncBatchNormGrad").Device(tensorflow::DEVICE_CPU),
                        SyncBatchNormGradOp);

}  // namespace
