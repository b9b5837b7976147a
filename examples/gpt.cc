// nanoGPT on Spire: trains the GPT of examples/gpt/gpt_model.h on a byte-level text file
// (default: the whole of Shakespeare, ../shared/data/shakespeare/shakespeare.txt) with
// nanoGPT's recipe, or samples text from a trained checkpoint.
//
//   build/examples/gpt [--config baby|shakespeare_char] [--max-iters N] [--precision bf16]
//                      [--accum K] [--trainer simple|replicated|horovod ...]
//   build/examples/gpt --sample 500 [--temperature 0.8] [--top-k 200] [--start "ROMEO:"]
//
// Training: AdamW (betas 0.9/0.99, eps 1e-8, weight decay on the rank-2 variables only, as
// nanoGPT's parameter groups), the gradient clipped to global norm 1 (PyTorch's
// clip_grad_norm_), nanoGPT's cosine learning rate with linear warmup set before every
// optimizer step, gradient accumulation over --accum micro-steps (nanoGPT's mean, or
// tensorpack's sum with --accum-mode sum). An "epoch" is --eval-interval optimizer steps;
// after each, the loss of --eval-iters validation batches is "validation_loss" in
// stats.json and TensorBoard, and a checkpoint is written (the same command resumes).
// The vocabulary (the file's distinct bytes) is saved as vocab.txt in the log directory,
// so --sample decodes with the vocabulary the model was trained with.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <spire.h>

#include "examples/example_flags.h"
#include "examples/gpt/gpt_model.h"

using namespace spire;
using namespace spire_examples;

namespace {

struct Flags {
  GptConfig model;
  std::string data;
  std::string logdir;
  int64_t batch = 12;
  int64_t max_iters = 2000;
  int64_t lr_decay_iters = -1;  // -1: max_iters
  int64_t warmup_iters = 100;
  double lr = 1e-3, min_lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, grad_clip = 1.0;
  int64_t eval_interval = 250, eval_iters = 20;
  int64_t accum = 1;
  AccumMode accum_mode = AccumMode::kMean;
  PrecisionPolicy precision = PrecisionPolicy::kFloat32;
  uint64_t seed = 1337;
  // Sampling.
  int64_t sample = 0;
  double temperature = 0.8;
  int64_t top_k = 200;
  std::string start = "\n";
  int64_t num_samples = 1;
  TrainerFlags t;
};

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [flags]             train (the same command resumes from --logdir)\n"
      "       %s --sample N [flags]  print N tokens generated from --logdir's latest checkpoint\n"
      "Model (nanoGPT's names): --config baby (4 layers, 4 heads, width 128, context 64, batch 12;\n"
      "  the default) or shakespeare_char (6, 6, 384, 256, batch 64, dropout 0.2), then\n"
      "  --n-layer N --n-head N --n-embd N --block-size N --dropout P --bias[=true|false] --gelu none|tanh\n"
      "Data: --data FILE (default ../shared/data/shakespeare/shakespeare.txt), --batch B,\n"
      "  --seed S (batches are drawn from a SplitMix64 stream seeded per epoch)\n"
      "Schedule: --max-iters N (2000) --lr X (1e-3) --min-lr X (1e-4) --warmup-iters N (100)\n"
      "  --lr-decay-iters N (max-iters) --beta1 --beta2 (0.9, 0.99) --weight-decay (0.1)\n"
      "  --grad-clip (1.0; 0 = off) --accum K (1) --accum-mode mean|sum (mean: nanoGPT)\n"
      "  --eval-interval N (250) --eval-iters N (20)\n"
      "Precision: --precision f32|bf16|f16 (matmuls in 16 bits, f32 master weights; f16 with\n"
      "  dynamic loss scaling)\n"
      "Sampling: --sample N --temperature T (0.8) --top-k K (200; 0 = all) --start TEXT\n"
      "  --num-samples N (1)\n"
      "  --logdir DIR (default train_log/gpt-<config>)\n"
      "%s",
      argv0, argv0, trainer_flags_usage());
}

double parse_double(const std::string& key, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(d)) throw Error(key + " needs a number, got '" + v + "'");
  return d;
}

void apply_preset(const std::string& name, Flags* f) {
  if (name == "baby") {
    f->model.n_layer = 4, f->model.n_head = 4, f->model.n_embd = 128, f->model.block_size = 64;
    f->batch = 12, f->model.dropout = 0.0;
  } else if (name == "shakespeare_char") {
    f->model.n_layer = 6, f->model.n_head = 6, f->model.n_embd = 384, f->model.block_size = 256;
    f->batch = 64, f->model.dropout = 0.2, f->max_iters = 5000, f->eval_iters = 200;
  } else {
    throw Error("--config is baby or shakespeare_char, got '" + name + "'");
  }
}

// Returns false when --help was given.
bool parse_flags(int argc, char** argv, Flags* f) {
  std::string config = "baby";
  // The preset first, so that the other flags override it.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) config = argv[i + 1];
    else if (a.rfind("--config=", 0) == 0) config = a.substr(9);
  }
  apply_preset(config, f);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (a == "--bias" || a == "--bias=true" || a == "--bias=false") {
      f->model.bias = a != "--bias=false";
      continue;
    }
    std::string key, v;
    split_flag(argc, argv, &i, &key, &v);
    if (key == "--config") continue;
    else if (key == "--data") f->data = v;
    else if (key == "--logdir") f->logdir = v;
    else if (key == "--n-layer") f->model.n_layer = parse_int_flag(key, v, 1);
    else if (key == "--n-head") f->model.n_head = parse_int_flag(key, v, 1);
    else if (key == "--n-embd") f->model.n_embd = parse_int_flag(key, v, 1);
    else if (key == "--block-size") f->model.block_size = parse_int_flag(key, v, 1);
    else if (key == "--dropout") f->model.dropout = parse_double(key, v);
    else if (key == "--gelu") {
      if (v != "none" && v != "tanh") throw Error("--gelu is none or tanh, got '" + v + "'");
      f->model.gelu = v == "tanh" ? ops::GeluApproximate::kTanh : ops::GeluApproximate::kNone;
    } else if (key == "--batch") f->batch = parse_int_flag(key, v, 1);
    else if (key == "--max-iters") f->max_iters = parse_int_flag(key, v, 1);
    else if (key == "--lr-decay-iters") f->lr_decay_iters = parse_int_flag(key, v, 1);
    else if (key == "--warmup-iters") f->warmup_iters = parse_int_flag(key, v, 0);
    else if (key == "--lr") f->lr = parse_double(key, v);
    else if (key == "--min-lr") f->min_lr = parse_double(key, v);
    else if (key == "--beta1") f->beta1 = parse_double(key, v);
    else if (key == "--beta2") f->beta2 = parse_double(key, v);
    else if (key == "--weight-decay") f->weight_decay = parse_double(key, v);
    else if (key == "--grad-clip") f->grad_clip = parse_double(key, v);
    else if (key == "--eval-interval") f->eval_interval = parse_int_flag(key, v, 1);
    else if (key == "--eval-iters") f->eval_iters = parse_int_flag(key, v, 1);
    else if (key == "--accum") f->accum = parse_int_flag(key, v, 1);
    else if (key == "--accum-mode") {
      if (v != "mean" && v != "sum") throw Error("--accum-mode is mean or sum, got '" + v + "'");
      f->accum_mode = v == "sum" ? AccumMode::kSum : AccumMode::kMean;
    } else if (key == "--precision") f->precision = parse_precision_policy(v);
    else if (key == "--seed") f->seed = static_cast<uint64_t>(parse_int_flag(key, v, 0));
    else if (key == "--sample") f->sample = parse_int_flag(key, v, 1);
    else if (key == "--temperature") f->temperature = parse_double(key, v);
    else if (key == "--top-k") f->top_k = parse_int_flag(key, v, 0);
    else if (key == "--start") f->start = v;
    else if (key == "--num-samples") f->num_samples = parse_int_flag(key, v, 1);
    else if (!parse_trainer_flag(key, v, &f->t))
      throw Error("unknown argument '" + key + "' (see --help)");
  }
  if (f->lr_decay_iters < 0) f->lr_decay_iters = f->max_iters;
  if (f->lr_decay_iters <= f->warmup_iters)
    throw Error("--lr-decay-iters (default: --max-iters) must exceed --warmup-iters (" +
                std::to_string(f->warmup_iters) + ")");
  if (!(f->temperature > 0)) throw Error("--temperature must be > 0");
  if (f->grad_clip < 0) throw Error("--grad-clip must be >= 0 (0: no clipping)");
  if (f->max_iters % f->eval_interval != 0)
    throw Error("--max-iters " + std::to_string(f->max_iters) + " must be a multiple of --eval-interval " +
                std::to_string(f->eval_interval) + " (an epoch is one evaluation interval)");
  if (f->data.empty()) f->data = find_data_file("shakespeare/shakespeare.txt");
  if (f->logdir.empty()) f->logdir = "train_log/gpt-" + config;
  f->model.check();
  if (f->t.trainer == "async")
    throw Error("--trainer async: the GPT example counts an epoch in optimizer steps, which the "
                "asynchronous trainer makes one per tower; use simple, replicated, ps or horovod");
  finish_trainer_flags(&f->t);
  return true;
}

// ---- training -------------------------------------------------------------------------------

class GptModel : public ModelDesc {
 public:
  explicit GptModel(const Flags& f) : f_(f) {}

  std::vector<InputDesc> inputs() const override {
    return {{"idx", DType::I64, {-1, f_.model.block_size}}, {"targets", DType::I64, {-1, f_.model.block_size}}};
  }

  Output build_graph(const std::vector<Output>& in) override {
    PrecisionPolicyScope precision(f_.precision);
    return gpt_loss(gpt_logits(in[0], f_.model), in[1], "loss");
  }

  std::shared_ptr<Optimizer> optimizer() override {
    auto adamw = std::make_shared<AdamWOptimizer>(f_.lr, f_.weight_decay, f_.beta1, f_.beta2, 1e-8);
    adamw->set_weight_decay_filter(decay_if_rank_at_least(2));
    std::shared_ptr<Optimizer> opt = adamw;
    // nanoGPT clips the accumulated gradient: the clip wraps the inner optimizer.
    if (f_.grad_clip > 0) opt = apply_grad_processors(opt, {GlobalNormClip(f_.grad_clip, ClipNormSemantics::kTorch)});
    if (f_.accum > 1) opt = std::make_shared<AccumGradOptimizer>(opt, static_cast<int>(f_.accum), f_.accum_mode);
    if (f_.precision == PrecisionPolicy::kMixedFloat16) opt = std::make_shared<LossScaleOptimizer>(opt);
    return opt;
  }

 private:
  Flags f_;
};

int train(const Flags& f) {
  auto data = std::make_shared<TextDataset>(f.data);
  make_dirs(f.logdir);
  data->vocab().save(f.logdir + "/vocab.txt");
  Flags flags = f;
  flags.model.vocab_size = data->vocab().size();

  std::unique_ptr<SingleCostTrainer> trainer = make_trainer(f.t);
  const int64_t towers = std::max<int64_t>(1, static_cast<int64_t>(tower_devices(f.t).size()));
  const int64_t shards = trainer->data_shard().second;
  // An epoch is eval_interval optimizer steps of accum micro-steps each, and every tower of
  // every rank takes its own batch per micro-step. One stream of batches, the same on every
  // rank: the trainer's launch shards it (ShardData: rank r keeps every N-th batch), so the
  // dataflow's epoch is the trainer's and a resume continues the stream.
  const int64_t micro_steps = f.eval_interval * f.accum;
  auto train_data = std::make_shared<TextWindowData>(data, TextSplit::kTrain, f.model.block_size, f.batch,
                                                     micro_steps * towers * shards, f.seed);
  auto val_data = std::make_shared<TextWindowData>(data, TextSplit::kVal, f.model.block_size, f.batch,
                                                   f.eval_iters, f.seed + 7);
  logger::info("GPT: ", flags.model.n_layer, " layers, ", flags.model.n_head, " heads, width ", flags.model.n_embd,
               ", context ", flags.model.block_size, ", vocabulary ", flags.model.vocab_size, " (",
               flags.model.num_parameters() / 1e6, "M parameters); ", f.batch * towers * shards * f.accum,
               " sequences per optimizer step (", f.batch, " x ", towers, " towers x ", shards, " ranks x ",
               f.accum, " accumulated); ", precision_policy_name(f.precision), "; trainer ", f.t.trainer,
               "; logs in ", f.logdir);

  const CosineWarmupSchedule schedule{f.lr, f.min_lr, f.warmup_iters, f.lr_decay_iters};
  schedule.check();
  TrainConfig config;
  config.model = std::make_shared<GptModel>(flags);
  config.dataflow = train_data;
  config.callbacks = {
      std::make_shared<ModelSaver>(),
      // Set before every micro-step from the optimizer step it belongs to.
      std::make_shared<HyperParamSetterWithStepFunc>(
          "learning_rate", [schedule](int64_t it) { return schedule(it); }, f.accum),
      make_validation(f.t, val_data, {std::make_shared<ScalarStats>(std::vector<std::string>{"loss"})}),
      std::make_shared<MinSaver>("validation_loss"),
      std::make_shared<EstimatedTimeLeft>(),
  };
  config.session_creator = new_session_creator(session_options(f.t));
  config.steps_per_epoch = micro_steps;
  config.max_epoch = static_cast<int>(f.max_iters / f.eval_interval);
  config.logdir = f.logdir;
  if (!launch_example_training(f.t, config, *trainer,
                               [&](int epoch) {
                                 // The validation stream continues where the interrupted run
                                 // left it (one pass per finished epoch); the training input
                                 // continues at the restored global_step by itself.
                                 val_data->set_next_epoch(epoch - 1);
                               }))
    return 0;
  double loss = 0;
  int epoch = 0;
  if (final_stat(*trainer, f.logdir, "validation_loss", &loss, &epoch) && epoch > 0)
    std::printf("final validation_loss (iteration %lld, %s/stats.json): %.4f\n",
                static_cast<long long>(epoch * f.eval_interval), f.logdir.c_str(), loss);
  else
    std::printf("no validation loss was recorded\n");
  return 0;
}

// ---- sampling -------------------------------------------------------------------------------

// nanoGPT's generate(): crop the context to the last block_size tokens, take the logits of
// the last position, divide by the temperature, keep the top k, sample from the softmax.
// The graph has one input shape, [1, block_size]: a shorter context is padded at the end,
// and causal attention keeps the padding out of the logits read (position len - 1).
int sample(const Flags& f) {
  const ByteVocab vocab = ByteVocab::load(f.logdir + "/vocab.txt");
  const std::string ckpt = latest_checkpoint(f.logdir);
  if (ckpt.empty()) throw Error("--sample: no checkpoint in " + f.logdir + " (train first)");
  GptConfig model = f.model;
  model.vocab_size = vocab.size();
  model.dropout = 0;
  const int64_t T = model.block_size;
  Graph g;
  DefaultGraphGuard guard(g);
  Output idx = ops::placeholder(DType::I64, {1, T}, "idx");
  // No tower: the variables are made fresh (then set from the checkpoint); dropout is 0.
  const Output probs =
      ops::softmax(ops::div(ops::reshape(gpt_logits(idx, model), Shape{T, model.vocab_size}),
                            ops::constant(Tensor::scalar<float>(static_cast<float>(f.temperature)))));
  Session s(g);
  const std::map<std::string, Tensor> saved = load_checkpoint(ckpt);
  for (const Output& v : global_variables()) {
    auto it = saved.find(v.node->name());
    if (it == saved.end())
      throw Error("--sample: " + ckpt + " has no variable " + v.node->name() +
                  " (was it trained with other --n-layer/--n-embd/--bias flags?)");
    s.set_variable_value(v.node, it->second);
  }
  std::mt19937_64 rng(f.seed);
  for (int64_t n = 0; n < f.num_samples; ++n) {
    for (unsigned char ch : f.start)
      if (!vocab.contains(ch))
        throw Error("--start: byte " + std::to_string(ch) + " is not in the vocabulary of " + f.logdir +
                    "/vocab.txt (the training text's bytes)");
    std::vector<int64_t> tokens = vocab.encode(f.start);
    if (tokens.empty()) throw Error("--start must not be empty");
    for (int64_t step = 0; step < f.sample; ++step) {
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(tokens.size()), T);
      Tensor in(DType::I64, Shape{1, T});
      std::fill(in.data<int64_t>(), in.data<int64_t>() + T, 0);
      std::copy(tokens.end() - len, tokens.end(), in.data<int64_t>());
      const Tensor p = s.run({probs}, {{idx, in}})[0];
      const float* row = p.data<float>() + (len - 1) * model.vocab_size;
      std::vector<double> w(row, row + model.vocab_size);
      if (f.top_k > 0 && f.top_k < model.vocab_size) {
        std::vector<double> sorted = w;
        std::nth_element(sorted.begin(), sorted.begin() + (f.top_k - 1), sorted.end(), std::greater<double>());
        const double kth = sorted[static_cast<size_t>(f.top_k - 1)];
        for (double& x : w)
          if (x < kth) x = 0;
      }
      std::discrete_distribution<int64_t> pick(w.begin(), w.end());
      tokens.push_back(pick(rng));
    }
    const std::string text = vocab.decode(tokens);  // may hold NUL bytes
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    if (n + 1 < f.num_samples) std::printf("---------------\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags flags;
    if (!parse_flags(argc, argv, &flags)) {
      usage(argv[0]);
      return 0;
    }
    return flags.sample > 0 ? sample(flags) : train(flags);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
