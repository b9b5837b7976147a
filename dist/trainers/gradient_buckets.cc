// Gradient bucketing (see gradient_buckets.h).
#include "dist/trainers/gradient_buckets.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops.h"

namespace spire {

Buckets fusion_buckets(const std::vector<Output>& xs, const std::vector<size_t>& order, int64_t threshold_bytes,
                       int64_t first_bucket_bytes) {
  SPIRE_CHECK(threshold_bytes >= 0 && first_bucket_bytes >= -1, "fusion_buckets: the threshold must be >= 0 ",
              "and the first bucket's >= 0 (or -1: the threshold), got ", threshold_bytes, " and ", first_bucket_bytes);
  const int64_t first_cap = first_bucket_bytes >= 0 ? std::min(first_bucket_bytes, threshold_bytes) : threshold_bytes;
  Buckets buckets;
  int64_t bytes = 0;
  bool open = false;
  // The open bucket's cap (the last one made).
  auto cap = [&] { return buckets.size() == 1 ? first_cap : threshold_bytes; };
  for (size_t i : order) {
    const Output& x = xs.at(i);
    const bool known = x.shape().is_fully_defined();
    const int64_t b = known ? static_cast<int64_t>(x.shape().num_bytes(dtype_size(x.dtype()))) : 0;
    if (open && known && x.dtype() == xs[buckets.back().front()].dtype() && bytes + b <= cap()) {
      buckets.back().push_back(i);
      bytes += b;
      continue;
    }
    buckets.push_back({i});
    bytes = b;
    open = known && cap() > 0;
  }
  return buckets;
}

LeastLoadedBins::LeastLoadedBins(size_t num_bins) : loads_(num_bins, 0) {
  SPIRE_CHECK(num_bins > 0, "LeastLoadedBins: no bins");
}

size_t LeastLoadedBins::add(int64_t load) {
  const size_t best = static_cast<size_t>(std::min_element(loads_.begin(), loads_.end()) - loads_.begin());
  loads_[best] += load;
  return best;
}

Output pack_flat(const std::vector<Output>& xs, const std::string& name) {
  std::vector<Output> flat;
  for (const Output& x : xs) flat.push_back(ops::reshape(x, Shape{x.shape().num_elements()}));
  return ops::concat(flat, 0, name);
}

std::vector<Output> unpack_flat(const Output& flat, const std::vector<Shape>& shapes, const std::string& name) {
  std::vector<int64_t> sizes;
  for (const Shape& s : shapes) sizes.push_back(s.num_elements());
  std::vector<Output> parts = ops::split(flat, sizes, 0, name);
  std::vector<Output> out;
  for (size_t i = 0; i < shapes.size(); ++i) out.push_back(ops::reshape(parts[i], shapes[i]));
  return out;
}

std::vector<Output> apply_packed(const std::vector<Output>& xs, const std::function<Output(const Output&)>& fn) {
  if (xs.size() == 1) return {fn(xs[0])};
  std::vector<Shape> shapes;
  for (const Output& x : xs) shapes.push_back(x.shape());
  return unpack_flat(fn(pack_flat(xs)), shapes);
}

}  // namespace spire
