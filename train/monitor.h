// Training monitors (tensorpack's MonitorBase / Monitors): where training
// statistics go. trainer.monitors().put_scalar(name, value) hands a scalar
// to every monitor: JSONWriter (stats.json), ScalarPrinter (log lines) and
// TFEventWriter (TensorBoard event files). Monitors are callbacks too.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "train/callback.h"

namespace spire {

class TrainingMonitor : public Callback {
 public:
  /// A new scalar at the trainer's current global step.
  virtual void process_scalar(const std::string& name, double value) {
    (void)name;
    (void)value;
  }
};

using MonitorPtr = std::shared_ptr<TrainingMonitor>;

/// The dispatcher a trainer registers after its monitors (not chief-only).
class Monitors : public Callback {
 public:
  explicit Monitors(std::vector<MonitorPtr> monitors);
  /// Sends a scalar to every monitor and remembers it.
  void put_scalar(const std::string& name, double value);
  /// The last value put for `name`; throws spire::Error when there is none.
  double get_latest(const std::string& name) const;
  bool has(const std::string& name) const;
  /// (global_step, value) pairs put for `name`, oldest first.
  std::vector<std::pair<int64_t, double>> get_history(const std::string& name) const;
  const std::vector<MonitorPtr>& monitors() const { return monitors_; }
  std::string name() const override { return "Monitors"; }

 private:
  std::vector<MonitorPtr> monitors_;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> history_;
};

/// Writes stats.json in the log directory: a list of objects holding the
/// scalars of each epoch with "epoch_num" and "global_step"; rewritten
/// atomically after each epoch. At the start of training an existing file
/// is appended to when its last epoch precedes starting_epoch, otherwise
/// it is backed up to stats.json.<timestamp> and a new one is started.
class JSONWriter : public TrainingMonitor {
 public:
  static constexpr const char* kFilename = "stats.json";
  void process_scalar(const std::string& name, double value) override;
  /// The stats list read from `logdir`/stats.json (empty when absent);
  /// throws on a corrupt file.
  static std::vector<std::map<std::string, double>> load_existing_json(const std::string& logdir);
  /// The last epoch recorded in `logdir`/stats.json, or -1.
  static int load_existing_epoch_number(const std::string& logdir);
  std::string name() const override { return "JSONWriter"; }

 protected:
  void _before_train() override;
  void _trigger_step() override;
  void _trigger_epoch() override;
  void _trigger() override;

 private:
  void write();
  std::string path_;
  std::vector<std::map<std::string, double>> stats_;
  std::map<std::string, double> now_;
  bool enabled_ = false;
};

/// Prints the scalars put during each epoch (matching `whitelist` regexes
/// when given) at the end of the epoch.
class ScalarPrinter : public TrainingMonitor {
 public:
  explicit ScalarPrinter(bool enable_step = false, bool enable_epoch = true,
                         std::vector<std::string> whitelist = {},
                         std::vector<std::string> blacklist = {});
  void process_scalar(const std::string& name, double value) override;
  std::string name() const override { return "ScalarPrinter"; }

 protected:
  void _trigger_step() override;
  void _trigger_epoch() override;

 private:
  void print();
  bool enable_step_, enable_epoch_;
  std::vector<std::string> whitelist_, blacklist_;
  std::map<std::string, double> latest_;
};

class EventFileWriter;

/// Writes every scalar to a TensorBoard event file in the log directory.
class TFEventWriter : public TrainingMonitor {
 public:
  TFEventWriter();
  ~TFEventWriter() override;
  void process_scalar(const std::string& name, double value) override;
  std::string name() const override { return "TFEventWriter"; }

 protected:
  void _setup_graph() override;
  void _trigger_epoch() override;
  void _after_train() override;

 private:
  std::unique_ptr<EventFileWriter> writer_;
};

/// tensorpack's DEFAULT_MONITORS: TFEventWriter, JSONWriter, ScalarPrinter.
std::vector<MonitorPtr> default_monitors();

}  // namespace spire
