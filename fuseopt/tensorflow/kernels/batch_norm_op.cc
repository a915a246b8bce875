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
// the life of the process), how many threads the pass may use, and how to
// report each fuseopt status (the TensorFlow code and class name
// tf_errors.graph_status gives it).
#include <cstdint>
#include <string>
#include <vector>

#include "c_api_helpers.h"
#include "fuseopt/fuseopt.h"

namespace {

using fuseopt_tf::Status;
using fuseopt_tf::Tensor;

typedef int (*ForwardFn)(fuseopt_agreed_t*, const fuseopt_batch_norm_forward_t*);
typedef int (*BackwardFn)(fuseopt_agreed_t*, const fuseopt_batch_norm_backward_t*);
typedef const char* (*LastErrorFn)(void);

// Attributes common to both ops: where the core is, and how to report it.
void add_core_attrs(TF_OpDefinitionBuilder* op) {
  for (const char* attr : {"T: {float, double}", "axis: int", "function: int", "last_error: int",
                           "agreed: int", "threads: int = 1", "error_codes: list(int)",
                           "error_names: list(string)"})
    TF_OpDefinitionBuilderAddAttr(op, attr);
  TF_OpDefinitionBuilderSetIsStateful(op, true);
}

// A dense row-major tensor with its channels on axis, as the core sees it.
fuseopt_channel_view_t view_of(const Tensor& t, int axis, int32_t dtype) {
  fuseopt_channel_view_t v{};
  v.data = t.data();
  v.dtype = dtype;
  v.outer = v.inner = 1;
  for (int d = 0; d < t.dims(); ++d) {
    if (d < axis) v.outer *= t.dim(d);
    if (d > axis) v.inner *= t.dim(d);
  }
  v.channels = t.dim(axis);
  v.inner_stride = 1;
  v.channel_stride = v.inner;
  v.outer_stride = v.channels * v.inner;
  return v;
}

// What both ops read from their attributes at construction.
struct CoreOp {
  int64_t axis = 0;
  int64_t threads = 1;
  float epsilon = 0;
  int32_t dtype = FUSEOPT_FLOAT32;
  TF_DataType tf_dtype = TF_FLOAT;
  void* function = nullptr;
  LastErrorFn last_error = nullptr;
  fuseopt_agreed_t* agreed = nullptr;
  std::vector<int64_t> error_codes;
  std::vector<std::string> error_names;

  // Fails the step with the core's status, as tf_errors.graph_status would.
  bool ok(TF_OpKernelContext* context, int status) const {
    if (status == FUSEOPT_OK) return true;
    const size_t i = static_cast<size_t>(status);
    const int64_t code = i < error_codes.size() ? error_codes[i] : int64_t{TF_UNKNOWN};
    const std::string name = i < error_names.size() ? error_names[i] : "FuseoptError";
    fuseopt_tf::fail(context, static_cast<TF_Code>(code), (name + ": " + last_error()).c_str());
    return false;
  }
  bool check_axis(TF_OpKernelContext* context, const Tensor& x) const {
    if (axis >= 0 && axis < x.dims()) return true;
    fuseopt_tf::fail(context, TF_INVALID_ARGUMENT, "SyncBatchNormalization: bad channel axis");
    return false;
  }
  // A vector output of `channels` values, or a failed step.
  bool allocate(TF_OpKernelContext* context, int index, TF_DataType type, int64_t size,
                Tensor* out) const {
    Status status;
    const size_t bytes = static_cast<size_t>(size) * (type == TF_DOUBLE ? 8 : 4);
    out->reset(TF_AllocateOutput(context, index, type, &size, 1, bytes, status.get()));
    if (status.ok()) return true;
    TF_OpKernelContext_Failure(context, status.get());
    return false;
  }
  // An output shaped as `like`.
  bool allocate_like(TF_OpKernelContext* context, int index, const Tensor& like,
                     Tensor* out) const {
    Status status;
    std::vector<int64_t> dims(like.dims());
    for (int d = 0; d < like.dims(); ++d) dims[d] = like.dim(d);
    out->reset(TF_AllocateOutput(context, index, tf_dtype, dims.data(), like.dims(),
                                 TF_TensorByteSize(like.get()), status.get()));
    if (status.ok()) return true;
    TF_OpKernelContext_Failure(context, status.get());
    return false;
  }
};

int64_t int_attr(TF_OpKernelConstruction* c, const char* name, TF_Status* status) {
  int64_t v = 0;
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrInt64(c, name, &v, status);
  return v;
}

void* create(TF_OpKernelConstruction* c) {
  auto* op = new CoreOp;
  Status status;
  TF_Status* s = status.get();
  op->axis = int_attr(c, "axis", s);
  op->threads = int_attr(c, "threads", s);
  op->function = reinterpret_cast<void*>(int_attr(c, "function", s));
  op->last_error = reinterpret_cast<LastErrorFn>(int_attr(c, "last_error", s));
  op->agreed = reinterpret_cast<fuseopt_agreed_t*>(int_attr(c, "agreed", s));
  if (status.ok()) TF_OpKernelConstruction_GetAttrType(c, "T", &op->tf_dtype, s);
  op->dtype = op->tf_dtype == TF_DOUBLE ? FUSEOPT_FLOAT64 : FUSEOPT_FLOAT32;
  int32_t count = 0, size = 0;
  if (status.ok()) TF_OpKernelConstruction_GetAttrSize(c, "error_codes", &count, &size, s);
  op->error_codes.resize(count);
  if (status.ok() && count > 0)
    TF_OpKernelConstruction_GetAttrInt64List(c, "error_codes", op->error_codes.data(), count, s);
  if (status.ok()) TF_OpKernelConstruction_GetAttrSize(c, "error_names", &count, &size, s);
  if (status.ok() && count > 0) {
    std::vector<char*> values(count);
    std::vector<size_t> lengths(count);
    std::vector<char> storage(size);
    TF_OpKernelConstruction_GetAttrStringList(c, "error_names", values.data(), lengths.data(),
                                             count, storage.data(), storage.size(), s);
    for (int i = 0; status.ok() && i < count; ++i)
      op->error_names.emplace_back(values[i], lengths[i]);
  }
  if (status.ok() && TF_OpKernelConstruction_HasAttr(c, "epsilon", s))
    TF_OpKernelConstruction_GetAttrFloat(c, "epsilon", &op->epsilon, s);
  if (!status.ok()) TF_OpKernelConstruction_Failure(c, s);
  return op;
}

void destroy(void* op) { delete static_cast<CoreOp*>(op); }

// The batch statistics, for Keras' moving averages (variance biased, as
// Keras' own layer uses it).
template <typename T>
void statistics(const double* saved, int64_t channels, float epsilon, void* mean,
                void* variance) {
  T* m = static_cast<T*>(mean);
  T* v = static_cast<T*>(variance);
  for (int64_t c = 0; c < channels; ++c) {
    const double invstd = saved[channels + c];
    m[c] = static_cast<T>(saved[c]);
    v[c] = static_cast<T>(1.0 / (invstd * invstd) - epsilon);
  }
}

void forward(void* kernel, TF_OpKernelContext* context) {
  const CoreOp& op = *static_cast<CoreOp*>(kernel);
  Tensor x, gamma, beta;
  if (!fuseopt_tf::get_inputs(context, {&x, &gamma, &beta}) || !op.check_axis(context, x)) return;
  const int64_t channels = x.dim(static_cast<int>(op.axis));
  Tensor y, saved, mean, variance;
  if (!op.allocate_like(context, 0, x, &y) ||
      !op.allocate(context, 1, TF_DOUBLE, 2 * channels + 1, &saved) ||
      !op.allocate(context, 2, op.tf_dtype, channels, &mean) ||
      !op.allocate(context, 3, op.tf_dtype, channels, &variance))
    return;
  fuseopt_batch_norm_forward_t args{};
  args.struct_size = sizeof(args);
  args.x = view_of(x, static_cast<int>(op.axis), op.dtype);
  args.y = view_of(y, static_cast<int>(op.axis), op.dtype);
  args.param_dtype = op.dtype;
  args.weight = gamma.data();
  args.bias = beta.data();
  args.eps = op.epsilon;
  args.threads = static_cast<int32_t>(op.threads);
  auto* out = static_cast<double*>(saved.data());
  args.saved_mean = out;
  args.saved_invstd = out + channels;
  args.saved_count = out + 2 * channels;
  if (!op.ok(context, reinterpret_cast<ForwardFn>(op.function)(op.agreed, &args))) return;
  if (op.dtype == FUSEOPT_FLOAT64)
    statistics<double>(out, channels, op.epsilon, mean.data(), variance.data());
  else
    statistics<float>(out, channels, op.epsilon, mean.data(), variance.data());
}

void backward(void* kernel, TF_OpKernelContext* context) {
  const CoreOp& op = *static_cast<CoreOp*>(kernel);
  Tensor x, dy, gamma, saved;
  if (!fuseopt_tf::get_inputs(context, {&x, &dy, &gamma, &saved}) || !op.check_axis(context, x))
    return;
  const int64_t channels = x.dim(static_cast<int>(op.axis));
  if (saved.elements() != 2 * channels + 1)
    return fuseopt_tf::fail(context, TF_INVALID_ARGUMENT,
                            "SyncBatchNormalization: saved statistics of another layer");
  Tensor dx, dgamma, dbeta;
  if (!op.allocate_like(context, 0, x, &dx) ||
      !op.allocate(context, 1, op.tf_dtype, channels, &dgamma) ||
      !op.allocate(context, 2, op.tf_dtype, channels, &dbeta))
    return;
  fuseopt_batch_norm_backward_t args{};
  args.struct_size = sizeof(args);
  args.x = view_of(x, static_cast<int>(op.axis), op.dtype);
  args.dy = view_of(dy, static_cast<int>(op.axis), op.dtype);
  args.dx = view_of(dx, static_cast<int>(op.axis), op.dtype);
  args.param_dtype = op.dtype;
  args.weight = gamma.data();
  const auto* values = static_cast<const double*>(saved.data());
  args.saved_mean = values;
  args.saved_invstd = values + channels;
  args.saved_count = values[2 * channels];
  args.grad_weight = dgamma.data();
  args.grad_bias = dbeta.data();
  args.threads = static_cast<int32_t>(op.threads);
  op.ok(context, reinterpret_cast<BackwardFn>(op.function)(op.agreed, &args));
}

// saved holds 2C + 1 values, mean and variance C, for gamma's C channels.
void forward_shapes(TF_ShapeInferenceContext* c, TF_Status* status) {
  fuseopt_tf::same_shape(c, 0, 0, status);
  fuseopt_tf::same_shape(c, 2, 1, status);
  fuseopt_tf::same_shape(c, 3, 1, status);
  TF_ShapeHandle* gamma = TF_NewShapeHandle();
  TF_DimensionHandle* channels = TF_NewDimensionHandle();
  int64_t saved = -1;  // unknown
  TF_ShapeInferenceContextGetInput(c, 1, gamma, status);
  if (TF_GetCode(status) == TF_OK && TF_ShapeInferenceContextRankKnown(c, gamma) &&
      TF_ShapeInferenceContextRank(c, gamma) == 1) {
    TF_ShapeInferenceContextDim(c, gamma, 0, channels);
    if (TF_DimensionHandleValueKnown(channels)) saved = 2 * TF_DimensionHandleValue(channels) + 1;
  }
  TF_ShapeHandle* vector = TF_ShapeInferenceContextVectorFromSize(c, static_cast<size_t>(saved));
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(c, 1, vector, status);
  TF_DeleteShapeHandle(vector);
  TF_DeleteDimensionHandle(channels);
  TF_DeleteShapeHandle(gamma);
}

void backward_shapes(TF_ShapeInferenceContext* c, TF_Status* status) {
  fuseopt_tf::same_shape(c, 0, 0, status);
  fuseopt_tf::same_shape(c, 1, 2, status);
  fuseopt_tf::same_shape(c, 2, 2, status);
}

void register_op(const char* name, std::initializer_list<const char*> inputs,
                 std::initializer_list<const char*> outputs, bool with_epsilon,
                 void (*shapes)(TF_ShapeInferenceContext*, TF_Status*),
                 void (*compute)(void*, TF_OpKernelContext*)) {
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder(name);
  for (const char* input : inputs) TF_OpDefinitionBuilderAddInput(op, input);
  for (const char* output : outputs) TF_OpDefinitionBuilderAddOutput(op, output);
  if (with_epsilon) TF_OpDefinitionBuilderAddAttr(op, "epsilon: float");
  add_core_attrs(op);
  TF_OpDefinitionBuilderSetShapeInferenceFunction(op, shapes);
  Status status;
  TF_RegisterOpDefinition(op, status.get());
  TF_RegisterKernelBuilder(name, TF_NewKernelBuilder(name, "CPU", create, compute, destroy),
                           status.get());
}

struct Registration {
  Registration() {
    register_op("FuseoptSyncBatchNorm", {"x: T", "gamma: T", "beta: T"},
                {"y: T", "saved: double", "mean: T", "variance: T"}, true, forward_shapes,
                forward);
    register_op("FuseoptSyncBatchNormGrad", {"x: T", "dy: T", "gamma: T", "saved: double"},
                {"dx: T", "dgamma: T", "dbeta: T"}, false, backward_shapes, backward);
  }
} registration;

}  // namespace
