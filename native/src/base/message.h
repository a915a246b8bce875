// Requests and responses: the vocabulary of negotiation.
//
// A *request* is one rank saying "tensor NAME is ready here, with this dtype,
// shape and operation". A *response* is the coordinator's answer, identical on
// every rank: "every rank has NAME ready; run this collective" (or "NAME is
// inconsistent across ranks; fail it everywhere with this message"). Requests
// and responses travel between ranks in the compact byte form of policy/message_codec.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuseopt/fuseopt.h"

namespace fuseopt {

// What every rank must agree on about one named tensor.
struct TensorSpec {
  fuseopt_collective_t collective = FUSEOPT_ALLREDUCE;
  std::string name;
  fuseopt_dtype_t dtype = FUSEOPT_FLOAT32;
  fuseopt_reduce_op_t reduce_op = FUSEOPT_SUM;
  std::vector<int64_t> shape;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  fuseopt_device_t device = FUSEOPT_DEVICE_HOST;  // kind of memory (not the index)
  int32_t phase = 0;  // fuseopt_request_t::phase: must match across ranks

  int64_t num_elements() const;
  int64_t row_elements() const;  // elements per first-dimension row
  // Whether two ranks' specs may be served by one collective. Allgather and
  // alltoall allow the first dimension to differ.
  bool compatible_with(const TensorSpec& other) const;
  bool first_dim_may_differ() const;
  std::string describe() const;  // "float32[3,4] allreduce(sum)" for messages
};

struct Request {
  int32_t rank = 0;
  TensorSpec spec;
  // How long the tensor had waited on its rank when this request was sent: a
  // tensor announced through the response cache first and renegotiated in
  // full later (a stall check) keeps its age, so stalls are timed from the
  // enqueue, not from the renegotiation.
  double waited_s = 0;
};

struct Response {
  TensorSpec spec;                 // as agreed (rank-0-independent fields)
  std::vector<int64_t> first_dims; // allgather/alltoall: each rank's first dim
  std::vector<int32_t> joined;     // ranks that took part as joined (no tensor)
  fuseopt_status_t error = FUSEOPT_OK;
  std::string error_message;

  bool is_error() const { return error != FUSEOPT_OK; }
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace fuseopt
