// The process-set part of a request (process_set.h): which set it runs in,
// checked against the table every rank shares, and the requests that add or
// remove a set. These travel as global-set operations whose "shape" is the
// set's ranks (or its id), so that ranks asking for different sets get the
// coordinator's mismatch error, the same on all of them.
#include <algorithm>
#include <cstddef>
#include <string>

#include "api/context.h"
#include "base/error.h"

namespace fuseopt {
namespace {

constexpr size_t kProcessSetEnd = offsetof(fuseopt_request_t, process_set) + sizeof(int32_t);

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(FUSEOPT_INVALID_ARG, what);
}

}  // namespace

void Context::take_process_set(const fuseopt_request_t& q, Entry* e,
                               ProcessSetTable::Set* set) const {
  // Older, shorter structs mean the global set (request_at zeroes the rest).
  e->process_set = q.struct_size >= kProcessSetEnd ? q.process_set : 0;
  const int32_t id = e->process_set;
  if (!process_sets_.find(id, set))
    throw Error(FUSEOPT_INVALID_ARG,
                "process set " + std::to_string(id) +
                    " does not exist: add it with add_process_set on every rank first "
                    "(or it has been removed)");
  if (set->rank < 0)
    throw Error(FUSEOPT_INVALID_ARG, "rank " + std::to_string(info_.rank) +
                                         " is not a member of process set " + std::to_string(id) +
                                         " (ranks " + ranks_string(set->ranks) +
                                         "): only its members may submit to it");
}

Entry Context::validate_set_change(const fuseopt_request_t& q) {
  const bool add = q.collective == FUSEOPT_PROCESS_SET_ADD;
  const char* what = add ? "add_process_set" : "remove_process_set";
  require(q.struct_size < kProcessSetEnd || q.process_set == 0,
          std::string(what) + " is an operation of every rank (the global process set)");
  require(q.ndim == 1 && q.shape && q.input && q.shape[0] >= 1,
          std::string(what) + ": input must point at int32 values and shape be [count]");
  const int32_t* values = static_cast<const int32_t*>(q.input);
  const int64_t n = q.shape[0];
  Entry e;
  TensorSpec& s = e.spec;
  s.collective = q.collective;
  s.dtype = FUSEOPT_INT32;
  if (add) {
    require(n <= info_.size, "add_process_set: more ranks than the job has (" +
                                 std::to_string(info_.size) + ")");
    for (int64_t i = 0; i < n; ++i) {
      require(values[i] >= 0 && values[i] < info_.size,
              "add_process_set: " + std::to_string(values[i]) + " is not a rank (size " +
                  std::to_string(info_.size) + ")");
      require(i == 0 || values[i] > values[i - 1],
              "add_process_set: ranks must be ascending and distinct");
      s.shape.push_back(values[i]);
    }
    require(q.output != nullptr, "add_process_set: output must point at an int32 for the id");
    e.output = q.output;
  } else {
    require(n == 1, "remove_process_set: input must be one int32 set id");
    require(values[0] != 0, "remove_process_set: the global process set (id 0) stays");
    ProcessSetTable::Set known;
    require(process_sets_.find(values[0], &known),
            "remove_process_set: process set " + std::to_string(values[0]) +
                " does not exist (removed already?)");
    s.shape.push_back(values[0]);
  }
  s.name = q.name ? std::string(q.name) : auto_name(0, q.collective, true);
  return e;
}

}  // namespace fuseopt
