// Owners for what TensorFlow's C kernel API hands out, shared by the ops.
//
// The ops are written against TensorFlow's C API (tensorflow/c/kernels.h,
// ops.h) rather than its C++ framework headers: those pull in Eigen, absl
// and protobuf and took 6 s per file to compile, 20 s on a loaded machine,
// at a collective's first trace; these compile in well under a second and
// keep their ABI from one TensorFlow release to the next.
#ifndef FUSEOPT_TF_KERNELS_C_API_HELPERS_H_
#define FUSEOPT_TF_KERNELS_C_API_HELPERS_H_

#include <cstdint>
#include <initializer_list>

#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

namespace fuseopt_tf {

class Status {
 public:
  Status() : s_(TF_NewStatus()) {}
  ~Status() { TF_DeleteStatus(s_); }
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;
  TF_Status* get() const { return s_; }
  bool ok() const { return TF_GetCode(s_) == TF_OK; }

 private:
  TF_Status* s_;
};

// A tensor reference from TF_GetInput or TF_AllocateOutput.
class Tensor {
 public:
  Tensor() = default;
  ~Tensor() {
    if (t_) TF_DeleteTensor(t_);
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  TF_Tensor** out() { return &t_; }
  void reset(TF_Tensor* t) {
    if (t_) TF_DeleteTensor(t_);
    t_ = t;
  }
  TF_Tensor* get() const { return t_; }
  void* data() const { return TF_TensorData(t_); }
  int dims() const { return TF_NumDims(t_); }
  int64_t dim(int d) const { return TF_Dim(t_, d); }
  int64_t elements() const { return TF_TensorElementCount(t_); }

 private:
  TF_Tensor* t_ = nullptr;
};

// Fails the running step with `code` and `message`.
inline void fail(TF_OpKernelContext* context, TF_Code code, const char* message) {
  Status status;
  TF_SetStatus(status.get(), code, message);
  TF_OpKernelContext_Failure(context, status.get());
}

// Inputs 0, 1, ... into `tensors`; false after failing the step.
inline bool get_inputs(TF_OpKernelContext* context, std::initializer_list<Tensor*> tensors) {
  Status status;
  int i = 0;
  for (Tensor* t : tensors) {
    TF_GetInput(context, i++, t->out(), status.get());
    if (!status.ok()) {
      TF_OpKernelContext_Failure(context, status.get());
      return false;
    }
  }
  return true;
}

// Output `i` takes the shape of input `j` in shape inference.
inline void same_shape(TF_ShapeInferenceContext* c, int i, int j, TF_Status* status) {
  if (TF_GetCode(status) != TF_OK) return;
  TF_ShapeHandle* shape = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(c, j, shape, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(c, i, shape, status);
  TF_DeleteShapeHandle(shape);
}

}  // namespace fuseopt_tf

#endif  // FUSEOPT_TF_KERNELS_C_API_HELPERS_H_
