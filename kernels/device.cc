#include "kernels/device.h"

namespace troupe::kernels {

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
