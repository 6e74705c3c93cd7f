#include "kernels/device.h"

#ifdef TROUPE_HAS_CUDA
#include "kernels/cuda/gpu_device.h"
#endif

namespace troupe::kernels {

int visible_gpus() {
#ifdef TROUPE_HAS_CUDA
  return gpu::device_count();
#else
  return 0;
#endif
}

result<tensor> accelerator::copy(const tensor&) {
  return unimplemented_error("this device cannot copy a tensor within its memory");
}

result<tensor> accelerator::gather(const tensor&, const tensor&) {
  return unimplemented_error("this device has no gather of its own");
}

status accelerator::apply_update(const training_update& update, std::vector<tensor>&, std::span<const tensor>) {
  return unimplemented_error("this device has no ", update.op, " update of its own");
}

result<std::unique_ptr<device>> make_accelerator(const std::string& name, const std::string& type, int index) {
  if (type != "GPU") return unimplemented_error("cannot make ", name, ": troupe has no devices of type ", type);
#ifdef TROUPE_HAS_CUDA
  auto gpu = gpu::gpu_device::create(name, index);
  if (!gpu.ok()) return gpu.error();
  return std::unique_ptr<device>(std::move(*gpu));
#else
  return unimplemented_error("cannot make ", name, ": this troupe was built without CUDA (TROUPE_CUDA=OFF, or no nvcc ",
                             "was found when it was configured; doc/gpu.md)");
#endif
}

result<std::shared_ptr<resource>> resource_manager::lookup_or_create(const std::string& container,
                                                                     const std::string& name,
                                                                     const factory& make) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(container, name);
  if (auto it = resources_.find(key); it != resources_.end()) return it->second;
  auto made = make();
  if (!made.ok()) return made.error();
  resources_.emplace(std::move(key), *made);
  return std::move(*made);
}

std::shared_ptr<resource> resource_manager::lookup(const std::string& container,
                                                   const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = resources_.find(std::make_pair(container, name));
  return it == resources_.end() ? nullptr : it->second;
}

bool resource_manager::erase(const std::string& container, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  return resources_.erase(std::make_pair(container, name)) > 0;
}

std::vector<std::pair<std::pair<std::string, std::string>, std::shared_ptr<resource>>>
resource_manager::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {resources_.begin(), resources_.end()};
}

void resource_manager::clear() {
  decltype(resources_) dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped.swap(resources_);
  }
}

}  // namespace troupe::kernels
