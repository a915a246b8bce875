#include "transport/device/dynlib.h"

#include <dlfcn.h>

#include <cstdlib>

#include "base/error.h"

namespace fuseopt {

DynLib::DynLib(const char* env_var, const std::vector<std::string>& candidates,
               const std::string& install_hint) {
  std::vector<std::string> tried = candidates;
  const char* override_path = env_var ? std::getenv(env_var) : nullptr;
  if (override_path && *override_path) tried = {override_path};
  std::string errors;
  for (const std::string& name : tried) {
    // RTLD_LOCAL: the vendor's symbols stay out of the global namespace, so
    // they cannot capture another library's lookups (torch loads its own NCCL).
    handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_) {
      path_ = name;
      return;
    }
    const char* why = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (why ? why : name);
  }
  const bool overridden = override_path && *override_path;
  std::string what = tried[0];
  for (size_t i = 1; i < tried.size(); ++i) what += " or " + tried[i];
  std::string message = "cannot load " + what;
  if (overridden) message += std::string(" (named by ") + env_var + ")";
  message += ": " + errors + ". " + install_hint;
  if (!overridden && env_var)
    message += std::string(" If it is installed elsewhere, set ") + env_var + " to its path.";
  throw Error(FUSEOPT_UNSUPPORTED, message);
}

DynLib::~DynLib() {
  // Left loaded on purpose: vendor runtimes register exit handlers and
  // threads that must not outlive their code (CUDA, NCCL's proxy thread).
}

void DynLib::resolve(const std::vector<SymbolSlot>& slots) const {
  for (const SymbolSlot& s : slots) {
    dlerror();
    *s.target = dlsym(handle_, s.name);
    if (!*s.target)
      throw Error(FUSEOPT_UNSUPPORTED, path_ + " does not export " + s.name +
                                           " (too old a version, or not the library fuseopt "
                                           "expects)");
  }
}

}  // namespace fuseopt
