// A host-side value cached once per CUDA device of the process: kernel attributes and occupancy belong to one
// device's context, and the devices of one process may differ. Used by the launchers (quantize/quantize_bf16.cu,
// gemm/tile_list.cuh) to set a kernel up on its first launch on each device.
#pragma once

#include <atomic>

namespace nvfp4 {

template <class T>
class PerDevice {
 public:
  static constexpr int kMaxDevices = 64;  // ordinals past this are never cached (set up at every launch)
  // The value stored for device `dev`, or T{} when none was (or dev is out of range).
  T get(int dev) const { return dev >= 0 && dev < kMaxDevices ? values_[dev].load(std::memory_order_relaxed) : T{}; }
  void set(int dev, T value) {
    if (dev >= 0 && dev < kMaxDevices) values_[dev].store(value, std::memory_order_relaxed);
  }

 private:
  std::atomic<T> values_[kMaxDevices]{};
};

}  // namespace nvfp4
