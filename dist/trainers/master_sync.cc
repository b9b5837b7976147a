// Masters and their copies (see master_sync.h).
#include "dist/trainers/master_sync.h"

#include "core/op_registry.h"
#include "layers/tower.h"
#include "train/trainer.h"

namespace spire {

std::vector<Replica> replicas_of_masters(Graph& g) {
  std::vector<Replica> out;
  for (const Variable& v : all_variables(&g)) {
    if (!is_local_variable(v.value) || training_tower_index(v.name()) <= 0) continue;
    Node* master = g.find_node(strip_tower_prefix(v.name()));
    out.push_back({v, master && master->op_def().is_variable() ? master : nullptr});
  }
  return out;
}

namespace {

class MasterSync : public Callback {
 public:
  MasterSync(std::string name, std::function<Node*()> op, bool every_epoch)
      : name_(std::move(name)), op_(std::move(op)), every_epoch_(every_epoch) {
    chief_only_ = false;
  }
  std::string name() const override { return name_; }

 protected:
  void _before_train() override { run(); }
  void _trigger() override {
    if (every_epoch_) run();
  }

 private:
  void run() {
    if (Node* op = op_()) trainer().sess().run({}, {}, {op});
  }
  std::string name_;
  std::function<Node*()> op_;
  bool every_epoch_;
};

}  // namespace

CallbackPtr make_master_sync_callback(std::string name, std::function<Node*()> op, bool every_epoch) {
  return std::make_shared<MasterSync>(std::move(name), std::move(op), every_epoch);
}

}  // namespace spire
