// FuseoptCheckStatus: forwards its values, or fails the step with the status
// code and message it was given.
//
// fuseopt's collectives run inside tf.numpy_function when traced, and
// TensorFlow maps a Python exception from there to a status code by its
// Python type only (mostly UNKNOWN). Horovod's scripts catch
// tf.errors.FailedPreconditionError when ranks disagree, so the collective
// returns its error as (code, message) outputs instead and this op, compiled
// against the installed TensorFlow, raises it with the code chosen.
#include <string>

#include "c_api_helpers.h"
#include "tensorflow/core/platform/ctstring.h"

namespace {

using fuseopt_tf::Status;
using fuseopt_tf::Tensor;

void shapes(TF_ShapeInferenceContext* c, TF_Status* status) {
  const int64_t inputs = TF_ShapeInferenceContextNumInputs(c);
  for (int i = 2; i < inputs && TF_GetCode(status) == TF_OK; ++i)
    fuseopt_tf::same_shape(c, i - 2, i, status);
}

void* create(TF_OpKernelConstruction*) { return nullptr; }  // stateless kernel
void destroy(void*) {}

void compute(void*, TF_OpKernelContext* context) {
  Tensor code, message;
  if (!fuseopt_tf::get_inputs(context, {&code, &message})) return;
  const int32_t value = *static_cast<const int32_t*>(code.data());
  if (value != 0) {
    const auto* text = static_cast<const TF_TString*>(message.data());
    const std::string what(TF_TString_GetDataPointer(text), TF_TString_GetSize(text));
    return fuseopt_tf::fail(context, static_cast<TF_Code>(value), what.c_str());
  }
  Status status;
  for (int i = 2; i < TF_NumInputs(context); ++i) {
    Tensor values;
    TF_GetInput(context, i, values.out(), status.get());
    if (status.ok()) TF_SetOutput(context, i - 2, values.get(), status.get());
    if (!status.ok()) return TF_OpKernelContext_Failure(context, status.get());
  }
}

struct Registration {
  Registration() {
    TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder("FuseoptCheckStatus");
    TF_OpDefinitionBuilderAddInput(op, "code: int32");
    TF_OpDefinitionBuilderAddInput(op, "message: string");
    TF_OpDefinitionBuilderAddInput(op, "values: T");
    TF_OpDefinitionBuilderAddOutput(op, "outputs: T");
    TF_OpDefinitionBuilderAddAttr(op, "T: list(type) >= 0");
    // Stateful so that a tf.function runs it even when nothing reads its
    // outputs, and never folds two of them into one.
    TF_OpDefinitionBuilderSetIsStateful(op, true);
    TF_OpDefinitionBuilderSetShapeInferenceFunction(op, shapes);
    Status status;
    TF_RegisterOpDefinition(op, status.get());
    TF_KernelBuilder* kernel = TF_NewKernelBuilder("FuseoptCheckStatus", "CPU", create,
                                                   compute, destroy);
    TF_RegisterKernelBuilder("FuseoptCheckStatus", kernel, status.get());
  }
} registration;

}  // namespace
