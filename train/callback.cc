#include "train/callback.h"

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "core/error.h"
#include "train/multi_process_trainer.h"
#include "train/trainer.h"

namespace spire {

void Callback::setup_graph(Trainer& trainer) {
  trainer_ = &trainer;
  _setup_graph();
}

std::string Callback::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string n = (status == 0 && demangled) ? demangled : mangled;
  std::free(demangled);
  auto pos = n.rfind("::");
  return pos == std::string::npos ? n : n.substr(pos + 2);
}

Trainer& Callback::trainer() const {
  SPIRE_CHECK(trainer_, "callback ", name(), ": trainer() used before setup_graph");
  return *trainer_;
}

template <typename F>
void Callbacks::each(const char* hook, F&& f) {
  // On a process of several, a StopTraining lets the hook's other callbacks run first: they
  // may run collectives the other processes run too (the stop takes effect at the loop's next
  // boundary). A single process stops at once, as tensorpack.
  const bool finish_hook =
      trainer_or_null() && dynamic_cast<MultiProcessTrainer*>(trainer_or_null()) != nullptr;
  std::exception_ptr stop;
  for (auto& cb : cbs_) {
    try {
      f(*cb);
    } catch (const StopTraining&) {
      if (!finish_hook) throw;
      if (!stop) stop = std::current_exception();
    } catch (const std::exception& e) {
      throw_like(e, str_cat("callback ", cb->name(), " failed in ", hook, ": ", e.what()));
    }
  }
  if (stop) std::rethrow_exception(stop);
}

void Callbacks::_setup_graph() {
  each("setup_graph", [&](Callback& cb) { cb.setup_graph(trainer()); });
}
void Callbacks::_before_train() {
  each("before_train", [](Callback& cb) { cb.before_train(); });
}
void Callbacks::_before_epoch() {
  each("before_epoch", [](Callback& cb) { cb.before_epoch(); });
}
void Callbacks::_after_epoch() {
  each("after_epoch", [](Callback& cb) { cb.after_epoch(); });
}
void Callbacks::_trigger_step() {
  each("trigger_step", [](Callback& cb) { cb.trigger_step(); });
}
void Callbacks::_trigger_epoch() {
  each("trigger_epoch", [](Callback& cb) { cb.trigger_epoch(); });
}
void Callbacks::_after_train() {
  // Every callback gets after_train even when one fails; the first error is rethrown.
  std::string first_error;
  bool disagreement = false;  // the first error's kind (throw_like)
  for (auto& cb : cbs_) {
    try {
      cb->after_train();
    } catch (const std::exception& e) {
      if (first_error.empty()) {
        first_error = str_cat("callback ", cb->name(), " failed in after_train: ", e.what());
        disagreement = dynamic_cast<const DisagreementError*>(&e) != nullptr;
      }
    }
  }
  if (!first_error.empty()) {
    if (disagreement) throw DisagreementError(first_error);
    throw Error(first_error);
  }
}

SessionRunArgs Callbacks::_before_run(SessionRunContext& ctx) {
  SessionRunArgs merged;
  ranges_.clear();
  each("before_run", [&](Callback& cb) {
    SessionRunArgs a = cb.before_run(ctx);
    size_t begin = merged.fetches.size();
    merged.fetches.insert(merged.fetches.end(), a.fetches.begin(), a.fetches.end());
    ranges_.emplace_back(begin, merged.fetches.size());
    merged.targets.insert(merged.targets.end(), a.targets.begin(), a.targets.end());
    merged.feeds.insert(merged.feeds.end(), a.feeds.begin(), a.feeds.end());
    merged.trace = merged.trace || a.trace;
  });
  return merged;
}

void Callbacks::_after_run(SessionRunContext& ctx, const SessionRunValues& values) {
  size_t i = 0;
  each("after_run", [&](Callback& cb) {
    SessionRunValues v;
    v.step_stats = values.step_stats;
    const auto& r = ranges_.at(i++);
    v.results.assign(values.results.begin() + static_cast<long>(r.first),
                     values.results.begin() + static_cast<long>(r.second));
    cb.after_run(ctx, v);
  });
}

}  // namespace spire
