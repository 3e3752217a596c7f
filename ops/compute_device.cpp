// ComputeDevice::open: the device choice turned into a backend. The CPU
// backend is linked in; the CUDA backend is a module loaded on first use
// (ops/cuda/cuda_module.hpp), found beside the executable, in ../lib, at the
// path TROUPE_CUDA_MODULE names, or where this build put it.
#include "ops/compute_device.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "ops/cpu/cpu_compute_device.hpp"
#include "ops/cuda/cuda_module.hpp"

namespace troupe {
namespace {

#ifdef TROUPE_HAVE_CUDA
std::vector<std::filesystem::path> module_candidates() {
  std::vector<std::filesystem::path> paths;
  if (const char* env = std::getenv("TROUPE_CUDA_MODULE"); env && *env) paths.emplace_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back(exe.parent_path() / kCudaModuleName);
    paths.push_back(exe.parent_path().parent_path() / "lib" / kCudaModuleName);
  }
#ifdef TROUPE_CUDA_MODULE_PATH
  paths.emplace_back(TROUPE_CUDA_MODULE_PATH);
#endif
  return paths;
}

// The module's open function, loaded once per process (never unloaded: the
// devices it makes run its code).
Expected<TroupeCudaModuleOpen> cuda_module() {
  static std::mutex mu;
  static TroupeCudaModuleOpen open = nullptr;
  std::lock_guard lock(mu);
  if (open) return open;
  std::string tried;
  for (const auto& path : module_candidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path.string();
      continue;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return make_error("train.device = \"cuda\": cannot load ", path.string(), ": ", ::dlerror());
    auto abi = reinterpret_cast<TroupeCudaModuleAbi>(::dlsym(handle, "troupe_cuda_module_abi"));
    auto fn = reinterpret_cast<TroupeCudaModuleOpen>(::dlsym(handle, "troupe_cuda_module_open"));
    if (!abi || !fn) return make_error("train.device = \"cuda\": ", path.string(), " is not a Troupe CUDA module");
    if (abi() != kCudaModuleAbi)
      return make_error("train.device = \"cuda\": ", path.string(), " was built against another Troupe (ABI ",
                        std::to_string(abi()), ", this troupe has ", std::to_string(kCudaModuleAbi), ")");
    open = fn;
    return open;
  }
  return make_error("train.device = \"cuda\": the CUDA module ", kCudaModuleName, " is not installed (looked at ",
                    tried, ")");
}
#endif

}  // namespace

Expected<std::unique_ptr<ComputeDevice>> ComputeDevice::open(const DeviceChoice& choice) {
  switch (choice.kind) {
    case DeviceKind::cpu:
      return open_cpu_compute_device(choice);
    case DeviceKind::cuda: {
#ifdef TROUPE_HAVE_CUDA
      auto module_open = cuda_module();
      if (!module_open) return module_open.error();
      char error[512] = {};
      ComputeDevice* device = (*module_open)(&choice, error, sizeof error);
      if (!device) return make_error(error);
      return std::unique_ptr<ComputeDevice>(device);
#else
      return make_error("train.device = \"cuda\": this troupe was built without the CUDA backend "
                        "(nvcc was not found when it was configured)");
#endif
    }
  }
  return make_error("train.device: unknown device kind");
}

}  // namespace troupe
