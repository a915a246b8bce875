// FuseoptCheckStatus: forwards its values, or fails the step with the status
// code and message it was given.
//
// fuseopt's collectives run inside tf.numpy_function when traced, and
// TensorFlow maps a Python exception from there to a status code by its
// Python type only (mostly UNKNOWN). Horovod's scripts catch
// tf.errors.FailedPreconditionError when ranks disagree, so the collective
// returns its error as (code, message) outputs instead and this op, compiled
// against the installed TensorFlow, raises it with the code chosen.
#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

REGISTER_OP("FuseoptCheckStatus")
    .Input("code: int32")
    .Input("message: string")
    .Input("values: T")
    .Output("outputs: T")
    .Attr("T: list(type) >= 0")
    // Stateful so that a tf.function runs it even when nothing reads its
    // outputs, and never folds two of them into one.
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 2; i < c->num_inputs(); ++i) c->set_output(i - 2, c->input(i));
      return absl::OkStatus();
    });

class CheckStatusOp : public OpKernel {
 public:
  explicit CheckStatusOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const int32_t code = context->input(0).scalar<int32_t>()();
    if (code != 0) {
      const auto& message = context->input(1).scalar<tensorflow::tstring>()();
      context->SetStatus(absl::Status(static_cast<absl::StatusCode>(code),
                                      std::string(message.data(), message.size())));
      return;
    }
    for (int i = 2; i < context->num_inputs(); ++i) context->set_output(i - 2, context->input(i));
  }
};

REGISTER_KERNEL_BUILDER(Name("FuseoptCheckStatus").Device(tensorflow::DEVICE_CPU), CheckStatusOp);

}  // namespace
