// Loading a vendor library at run time (NCCL, the CUDA runtime, HCCL, ACL),
// so that fuseopt builds and runs without them and needs them only once a
// device tensor arrives.
//
// Every symbol a backend uses is resolved when the library is opened, so a
// library that is too old fails at once, naming the first missing symbol,
// rather than in the middle of a training step.
#pragma once

#include <string>
#include <vector>

namespace fuseopt {

// One function pointer to fill: its symbol name and where to store it.
struct SymbolSlot {
  const char* name;
  void** target;
};

class DynLib {
 public:
  // Opens the first of candidates that loads (RTLD_NOW | RTLD_LOCAL).
  // env_var, when set in the environment, replaces the candidates. Throws
  // Error(UNSUPPORTED) naming what was tried, the loader's message, and
  // install_hint.
  DynLib(const char* env_var, const std::vector<std::string>& candidates,
         const std::string& install_hint);
  ~DynLib();
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;

  // Resolves every slot; throws Error(UNSUPPORTED) naming the first missing one.
  void resolve(const std::vector<SymbolSlot>& slots) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::string path_;
};

// A slot for a function-pointer member: FUSEOPT_SYMBOL(api, ncclAllReduce)
// names the symbol and stores into api.ncclAllReduce.
#define FUSEOPT_SYMBOL(api, sym) \
  ::fuseopt::SymbolSlot { #sym, reinterpret_cast<void**>(&(api).sym) }

}  // namespace fuseopt
