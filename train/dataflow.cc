// Implementation of the DataFlow pipeline stages declared in train/dataflow.h:
// the protocol checks of the DataFlow base, the list/batch/repeat/map
// stages, the deterministic shuffle, and the threaded prefetch engine.
#include "train/dataflow.h"

#include <cstring>
#include <numeric>
#include <system_error>
#include <utility>

namespace spire {

// ---- DataFlow -------------------------------------------------------------------

void DataFlow::reset_state() {
  SPIRE_CHECK(!reset_done_, "reset_state() was called twice on ", name(),
              "; a DataFlow must be reset exactly once");
  reset_state_impl();
  reset_done_ = true;
}

void DataFlow::set_next_epoch(int64_t e) {
  SPIRE_CHECK(e >= 0, name(), ": set_next_epoch(", e, "): the epoch must be >= 0");
  throw_error(name(), ": set_next_epoch(", e, "): this DataFlow cannot start a later pass without "
              "reading the earlier ones (can_set_next_epoch() is false)");
}

void DataFlow::begin_epoch() {
  SPIRE_CHECK(reset_done_, name(),
              ": reset_state() must be called once before iterating (begin_epoch())");
  begin_epoch_impl();
  epoch_started_ = true;
  epoch_exhausted_ = false;
}

bool DataFlow::next(Datapoint& dp) {
  SPIRE_CHECK(reset_done_, name(), ": reset_state() must be called once before iterating (next())");
  SPIRE_CHECK(epoch_started_, name(), ": next() called before begin_epoch()");
  if (epoch_exhausted_) return false;
  if (!next_impl(dp)) {
    epoch_exhausted_ = true;
    return false;
  }
  return true;
}

int64_t DataFlow::size() const { throw_error("size() is not available for ", name()); }

DataFlow::EpochRange DataFlow::epoch() { return EpochRange(this); }

// ---- ProxyDataFlow --------------------------------------------------------------

ProxyDataFlow::ProxyDataFlow(std::shared_ptr<DataFlow> ds) : ds_(std::move(ds)) {
  SPIRE_CHECK(ds_ != nullptr, "a DataFlow wrapper was given a null upstream DataFlow");
}

int64_t ProxyDataFlow::size() const {
  SPIRE_CHECK(has_size(), "size() is not available for ", name(), " (its upstream ",
              ds_->name(), " has no size)");
  return ds_->size();
}

void ProxyDataFlow::set_next_epoch(int64_t e) {
  SPIRE_CHECK(can_set_next_epoch(), name(), ": set_next_epoch(", e, "): ",
              passes_through_epochs() ? str_cat("its upstream ", ds_->name(), " cannot start a later pass")
                                      : std::string("its pass is not one pass of its upstream (or, for a "
                                                    "prefetching DataFlow, its workers already started)"));
  ds_->set_next_epoch(e);
}

// ---- shuffle ----------------------------------------------------------------------

namespace {

MapData::Func require_func(MapData::Func f, const char* what) {
  SPIRE_CHECK(f != nullptr, what, ": the map function is empty");
  return f;
}

}  // namespace

SplitMix64 SplitMix64::for_epoch(uint64_t seed, int64_t epoch) {
  SplitMix64 s(seed);
  SplitMix64 r(s.next() ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull));
  r.next();
  return r;
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch) {
  SPIRE_CHECK(n >= 0, "shuffled_indices: negative count ", n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  SplitMix64 rng = SplitMix64::for_epoch(seed, epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.uniform_below(static_cast<uint64_t>(i) + 1));
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
  }
  return idx;
}

// ---- EpochOrder / DataFromList -------------------------------------------------------

void EpochOrder::begin(int64_t n) {
  if (shuffle_) {
    order_ = shuffled_indices(n, seed_, next_epoch_);
  } else {
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), int64_t{0});
  }
  ++next_epoch_;
  pos_ = 0;
}

void EpochOrder::set_next_epoch(int64_t e, const std::string& who) {
  SPIRE_CHECK(e >= 0, who, ": set_next_epoch(", e, "): the epoch must be >= 0");
  next_epoch_ = e;
}

DataFromList::DataFromList(std::vector<Datapoint> list, bool shuffle, uint64_t seed)
    : list_(std::move(list)), order_(shuffle, seed) {}

bool DataFromList::next_impl(Datapoint& dp) {
  const int64_t i = order_.next();
  if (i < 0) return false;
  dp = list_[static_cast<size_t>(i)];
  return true;
}

// ---- BatchData ------------------------------------------------------------------------

BatchData::BatchData(std::shared_ptr<DataFlow> ds, int64_t batch_size, bool remainder)
    : ProxyDataFlow(std::move(ds)), batch_size_(batch_size), remainder_(remainder) {
  SPIRE_CHECK(batch_size_ > 0, "BatchData: batch_size must be positive, got ", batch_size_);
  if (!remainder_ && ds_->has_size()) {
    SPIRE_CHECK(batch_size_ <= ds_->size(), "BatchData: batch_size ", batch_size_,
                " is larger than the size ", ds_->size(), " of its upstream ", ds_->name(),
                " (with remainder=false every batch would be dropped)");
  }
}

int64_t BatchData::size() const {
  int64_t n = ProxyDataFlow::size();
  return remainder_ ? (n + batch_size_ - 1) / batch_size_ : n / batch_size_;
}

Datapoint BatchData::aggregate_batch(const std::vector<Datapoint>& dps) {
  SPIRE_CHECK(!dps.empty(), "BatchData: cannot stack an empty batch");
  const size_t ncomp = dps[0].size();
  for (size_t i = 1; i < dps.size(); ++i) {
    SPIRE_CHECK(dps[i].size() == ncomp, "BatchData: datapoint ", i, " of the batch has ",
                dps[i].size(), " components but datapoint 0 has ", ncomp);
  }
  const auto bs = static_cast<int64_t>(dps.size());
  Datapoint out;
  out.reserve(ncomp);
  for (size_t k = 0; k < ncomp; ++k) {
    const Tensor& first = dps[0][k];
    SPIRE_CHECK(first.defined(), "BatchData: component ", k, " of datapoint 0 is undefined");
    std::vector<int64_t> dims;
    dims.reserve(static_cast<size_t>(first.rank()) + 1);
    dims.push_back(bs);
    for (int64_t d : first.shape().dims()) dims.push_back(d);
    Tensor stacked(first.dtype(), Shape(std::move(dims)));
    const size_t nb = first.nbytes();
    char* dst = static_cast<char*>(stacked.raw_data());
    for (size_t i = 0; i < dps.size(); ++i) {
      const Tensor& t = dps[i][k];
      SPIRE_CHECK(t.defined(), "BatchData: component ", k, " of datapoint ", i, " is undefined");
      SPIRE_CHECK(t.dtype() == first.dtype() && t.shape() == first.shape(), "BatchData: component ",
                  k, " differs within a batch: datapoint 0 has ", first.type_string(),
                  " but datapoint ", i, " has ", t.type_string(),
                  " (all datapoints of a batch must have the same dtype and shape per component)");
      Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
      if (nb > 0) std::memcpy(dst + i * nb, host.raw_data(), nb);
    }
    out.push_back(std::move(stacked));
  }
  return out;
}

bool BatchData::next_impl(Datapoint& dp) {
  buf_.clear();
  Datapoint x;
  while (static_cast<int64_t>(buf_.size()) < batch_size_ && ds_->next(x)) buf_.push_back(std::move(x));
  if (buf_.empty()) return false;
  if (static_cast<int64_t>(buf_.size()) < batch_size_ && !remainder_) {
    buf_.clear();
    return false;
  }
  dp = aggregate_batch(buf_);
  buf_.clear();
  return true;
}

// ---- RepeatedData ------------------------------------------------------------------------

RepeatedData::RepeatedData(std::shared_ptr<DataFlow> ds, int64_t num)
    : ProxyDataFlow(std::move(ds)), num_(num) {
  SPIRE_CHECK(num_ >= -1, "RepeatedData: num must be -1 (forever) or >= 0, got ", num_);
}

int64_t RepeatedData::size() const {
  SPIRE_CHECK(num_ >= 0, "size() is not available for RepeatedData (it repeats forever)");
  return ProxyDataFlow::size() * num_;
}

void RepeatedData::begin_epoch_impl() {
  rep_ = 0;
  got_any_ = false;
  if (num_ != 0) ds_->begin_epoch();
}

bool RepeatedData::next_impl(Datapoint& dp) {
  if (num_ == 0) return false;
  for (;;) {
    if (ds_->next(dp)) {
      got_any_ = true;
      return true;
    }
    ++rep_;
    if (num_ >= 0 && rep_ >= num_) return false;
    SPIRE_CHECK(num_ >= 0 || got_any_, "RepeatedData: upstream ", ds_->name(),
                " yielded an empty epoch; repeating it forever (num=-1) would never yield");
    got_any_ = false;
    ds_->begin_epoch();
  }
}

// ---- ShardData --------------------------------------------------------------------------------

ShardData::ShardData(std::shared_ptr<DataFlow> ds, int index, int count, bool drop_remainder)
    : ProxyDataFlow(std::move(ds)), index_(index), count_(count), drop_remainder_(drop_remainder) {
  SPIRE_CHECK(count >= 1 && index >= 0 && index < count, "ShardData: shard ", index, " of ", count,
              " does not exist (need 0 <= index < count)");
  SPIRE_CHECK(!drop_remainder || ds_->has_size(), "ShardData: drop_remainder needs the size of ", ds_->name(),
              ", which is unknown");
}

int64_t ShardData::size() const {
  const int64_t n = ProxyDataFlow::size();
  if (drop_remainder_) return n / count_;
  return n / count_ + (index_ < n % count_ ? 1 : 0);
}

void ShardData::begin_epoch_impl() {
  ds_->begin_epoch();
  pos_ = 0;
  limit_ = drop_remainder_ ? (ds_->size() / count_) * count_ : -1;
}

bool ShardData::next_impl(Datapoint& dp) {
  for (;;) {
    if (limit_ >= 0 && pos_ >= limit_) return false;
    if (!ds_->next(dp)) return false;
    if (pos_++ % count_ == index_) return true;
  }
}

// ---- FixedSizeData ----------------------------------------------------------------------------

FixedSizeData::FixedSizeData(std::shared_ptr<DataFlow> ds, int64_t size, bool keep_state)
    : ProxyDataFlow(std::move(ds)), size_(size), keep_state_(keep_state) {
  SPIRE_CHECK(size_ >= 0, "FixedSizeData: size must be >= 0, got ", size_);
}

void FixedSizeData::begin_epoch_impl() {
  pos_ = 0;
  if (!keep_state_ || !upstream_started_) {
    ds_->begin_epoch();
    upstream_started_ = true;
  }
}

bool FixedSizeData::next_impl(Datapoint& dp) {
  if (pos_ >= size_) return false;
  if (!ds_->next(dp)) {
    ds_->begin_epoch();
    SPIRE_CHECK(ds_->next(dp), "FixedSizeData: upstream ", ds_->name(),
                " yielded an empty epoch; it cannot fill ", size_, " datapoints");
  }
  ++pos_;
  return true;
}

// ---- MapData / MapDataComponent --------------------------------------------------------------

MapData::MapData(std::shared_ptr<DataFlow> ds, Func func)
    : ProxyDataFlow(std::move(ds)), func_(require_func(std::move(func), "MapData")) {}

bool MapData::next_impl(Datapoint& dp) {
  Datapoint x;
  while (ds_->next(x)) {
    std::optional<Datapoint> r = func_(std::move(x));
    if (r) {
      dp = std::move(*r);
      return true;
    }
  }
  return false;
}

MapDataComponent::MapDataComponent(std::shared_ptr<DataFlow> ds, Func func, int index)
    : ProxyDataFlow(std::move(ds)), func_(std::move(func)), index_(index) {
  SPIRE_CHECK(func_ != nullptr, "MapDataComponent: the map function is empty");
}

bool MapDataComponent::next_impl(Datapoint& dp) {
  Datapoint x;
  while (ds_->next(x)) {
    const auto n = static_cast<int64_t>(x.size());
    const int64_t idx = index_ < 0 ? index_ + n : index_;
    SPIRE_CHECK(idx >= 0 && idx < n, "MapDataComponent: index ", index_,
                " is out of range for a datapoint with ", n, " components");
    std::optional<Tensor> r = func_(std::move(x[static_cast<size_t>(idx)]));
    if (r) {
      x[static_cast<size_t>(idx)] = std::move(*r);
      dp = std::move(x);
      return true;
    }
  }
  return false;
}

// ---- ParallelDataFlowBase -----------------------------------------------------------------------

ParallelDataFlowBase::ParallelDataFlowBase(std::shared_ptr<DataFlow> ds, int num_threads,
                                           int64_t buffer_size, MapData::Func func,
                                           const char* what)
    : ProxyDataFlow(std::move(ds)),
      func_(std::move(func)),
      num_threads_(num_threads),
      capacity_(buffer_size),
      what_(what) {
  SPIRE_CHECK(num_threads_ >= 1, what_, ": num_threads must be >= 1, got ", num_threads_);
  SPIRE_CHECK(capacity_ >= 1, what_, ": the buffer size must be >= 1, got ", capacity_);
}

ParallelDataFlowBase::~ParallelDataFlowBase() {
  try {
    stop();
  } catch (...) {
    // stop() only throws when called from a worker thread; never from here.
  }
}

void ParallelDataFlowBase::reset_state_impl() {
  ds_->reset_state();
  std::lock_guard<std::mutex> jl(join_mu_);
  threads_.reserve(static_cast<size_t>(num_threads_));
  for (int i = 0; i < num_threads_; ++i) {
    ++running_;
    try {
      threads_.emplace_back(&ParallelDataFlowBase::worker_main, this);
    } catch (const std::system_error& e) {
      --running_;
      {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
      }
      cv_producer_.notify_all();
      for (std::thread& t : threads_) t.join();
      threads_.clear();
      throw_error(what_, ": could not start worker thread ", i, ": ", e.what());
    }
  }
}

void ParallelDataFlowBase::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_producer_.notify_all();
  cv_consumer_.notify_all();
  std::lock_guard<std::mutex> jl(join_mu_);
  for (std::thread& t : threads_) {
    SPIRE_CHECK(t.get_id() != std::this_thread::get_id(), what_,
                ": stop() called from one of its own worker threads");
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void ParallelDataFlowBase::worker_main() {
  struct Exit {
    std::atomic<int64_t>& running;
    ~Exit() { --running; }
  } exit_guard{running_};
  try {
    for (;;) {
      std::unique_lock<std::mutex> pull_lock(pull_mu_);
      int64_t epoch = 0;
      bool open_now = false;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_producer_.wait(lk, [&] {
          return stop_ || error_ ||
                 (pending_ < capacity_ &&
                  (prod_open_ || prod_epoch_ <= cons_epoch_ + (cons_finished_ ? 2 : 1)));
        });
        if (stop_ || error_) return;
        epoch = prod_epoch_;
        if (!prod_open_) {
          prod_open_ = true;
          open_now = true;
        }
        ++epochs_[epoch].in_flight;
        ++pending_;
      }
      Datapoint dp;
      if (open_now) ds_->begin_epoch();
      if (!ds_->next(dp)) {
        {
          std::lock_guard<std::mutex> lk(mu_);
          EpochState& es = epochs_[epoch];
          --es.in_flight;
          --pending_;
          es.pull_done = true;
          ++prod_epoch_;
          prod_open_ = false;
        }
        cv_consumer_.notify_all();
        cv_producer_.notify_all();
        continue;
      }
      pull_lock.unlock();
      std::optional<Datapoint> out;
      if (func_) {
        out = func_(std::move(dp));
      } else {
        out = std::move(dp);
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        EpochState& es = epochs_[epoch];
        --es.in_flight;
        if (out) {
          es.ready.push_back(std::move(*out));
        } else {
          --pending_;
        }
      }
      cv_consumer_.notify_all();
      if (!out) cv_producer_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    cv_consumer_.notify_all();
    cv_producer_.notify_all();
  }
}

void ParallelDataFlowBase::begin_epoch_impl() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    SPIRE_CHECK(!stop_, name(), ": begin_epoch() after stop()");
    if (!cons_finished_) return;  // continue the unfinished upstream epoch
    ++cons_epoch_;
    cons_finished_ = false;
  }
  cv_producer_.notify_all();
}

bool ParallelDataFlowBase::next_impl(Datapoint& dp) {
  std::unique_lock<std::mutex> lk(mu_);
  SPIRE_CHECK(!stop_, name(), ": next() after stop()");
  for (;;) {
    SPIRE_CHECK(!stop_, name(), " was stopped while next() was waiting for data");
    auto it = epochs_.find(cons_epoch_);
    if (it != epochs_.end()) {
      EpochState& es = it->second;
      if (!es.ready.empty()) {
        dp = std::move(es.ready.front());
        es.ready.pop_front();
        --pending_;
        lk.unlock();
        cv_producer_.notify_all();
        return true;
      }
      if (es.pull_done && es.in_flight == 0) {
        epochs_.erase(it);
        cons_finished_ = true;  // the next epoch is cons_epoch_ + 1: workers may start + 2
        lk.unlock();
        cv_producer_.notify_all();
        return false;
      }
    }
    if (error_) std::rethrow_exception(error_);
    cv_consumer_.wait(lk);
  }
}

// ---- PrefetchData / MultiThreadMapData -------------------------------------------------------------

PrefetchData::PrefetchData(std::shared_ptr<DataFlow> ds, int64_t num_prefetch, int num_threads)
    : ParallelDataFlowBase(std::move(ds), num_threads, num_prefetch, nullptr, "PrefetchData") {}

MultiThreadMapData::MultiThreadMapData(std::shared_ptr<DataFlow> ds, int num_threads,
                                       MapData::Func func, int64_t buffer_size)
    : ParallelDataFlowBase(std::move(ds), num_threads, buffer_size,
                           require_func(std::move(func), "MultiThreadMapData"),
                           "MultiThreadMapData") {}

}  // namespace spire
