// VariableResource: the value of one Variable node in one Session, with its
// own lock (TensorFlow's resource-variable semantics). A read takes a
// consistent snapshot of the value under the lock; an update (Assign,
// AssignAdd, the fused optimizer ops) holds the lock exclusively while it
// decides copy-on-write and writes. Together with may_update_in_place this
// makes concurrent lanes, several threads calling Session::run, predictors
// on other threads and asynchronous trainers free of data races: a value a
// reader holds is never written in place, because holding it raises the
// buffer's use count, and no new holder can appear while an updater holds
// the lock and the count says it is alone.
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/tensor.h"

namespace spire {

class VariableResource {
 public:
  VariableResource() = default;
  VariableResource(const VariableResource&) = delete;
  VariableResource& operator=(const VariableResource&) = delete;

  /// A snapshot of the value (undefined while uninitialized). The buffer is
  /// shared: an update after this read writes a new buffer (copy-on-write),
  /// so the snapshot never changes.
  Tensor read() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }

  /// Exclusive access for an update while alive.
  class Update {
   public:
    explicit Update(VariableResource& v) : lock_(v.mu_), v_(&v) {}
    /// The value slot (assign to replace the value; write into its buffer
    /// only when may_update_in_place allows).
    Tensor& value() const { return v_->value_; }

   private:
    std::unique_lock<std::mutex> lock_;
    VariableResource* v_;
  };
  Update update() { return Update(*this); }

  /// Locks several variables at once for one update (the fused optimizer
  /// ops), in address order so that concurrent multi-variable updates never
  /// deadlock; duplicates are locked once. Access values with
  /// value_locked() while the returned locks are alive.
  static std::vector<std::unique_lock<std::mutex>> lock_all(std::vector<VariableResource*> vars) {
    std::sort(vars.begin(), vars.end());
    vars.erase(std::unique(vars.begin(), vars.end()), vars.end());
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(vars.size());
    for (VariableResource* v : vars) locks.emplace_back(v->mu_);
    return locks;
  }
  /// The value slot; only while this variable is locked (lock_all).
  Tensor& value_locked() { return value_; }

 private:
  mutable std::mutex mu_;
  Tensor value_;
};

}  // namespace spire
