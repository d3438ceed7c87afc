// A small parallel-for over index ranges, used by the references and the CPU backend. Each range is
// handled by one thread in increasing order, so results do not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace kf {

// The thread count, read once: glibc answers hardware_concurrency() by reading /sys/devices/system/cpu/online,
// about 3 us a time, which a small op on the CPU backend paid several times per call.
inline int64_t hardware_threads() {
  static const int64_t n = std::max(1u, std::thread::hardware_concurrency());
  return n;
}

template <class F>
void parallel_for(int64_t n, F&& fn, int64_t grain = 1 << 14) {
  const int64_t hw = hardware_threads();
  const int64_t chunks = std::min<int64_t>(hw, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(int64_t(0), n);
    return;
  }
  std::vector<std::thread> threads;
  const int64_t step = (n + chunks - 1) / chunks;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * step, e = std::min(n, b + step);
    if (b < e) threads.emplace_back([&fn, b, e] { fn(b, e); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace kf
