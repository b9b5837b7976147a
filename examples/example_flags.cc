// The examples' command-line flags (examples/example_flags.h).
#include "example_flags.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "device_flag.h"

namespace spire_examples {

using namespace spire;

void split_flag(int argc, char** argv, int* i, std::string* key, std::string* value) {
  const std::string a = argv[*i];
  const size_t eq = a.find('=');
  if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
    *key = a.substr(0, eq);
    *value = a.substr(eq + 1);
  } else if (a.rfind("--", 0) == 0 && *i + 1 < argc) {
    *key = a;
    *value = argv[++*i];
  } else {
    throw_error("unknown or incomplete argument '", a, "' (see --help)");
  }
}

namespace {

bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool has_mnist(const std::string& dir) {
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                        "t10k-labels-idx1-ubyte"})
    if (!is_file(dir + "/" + f + ".gz") && !is_file(dir + "/" + f)) return false;
  return true;
}

const char* kMnistFiles =
    "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, "
    "t10k-labels-idx1-ubyte.gz (or uncompressed)";

}  // namespace

std::string find_mnist_dir(const std::string& given) {
  if (!given.empty()) {
    if (!has_mnist(given)) throw_error("--data ", given, ": the MNIST files are not all there (", kMnistFiles, ")");
    return given;
  }
  const std::vector<std::string> tried = {
      "../shared/data/mnist", std::string(SPIRE_EXAMPLES_SOURCE_DIR) + "/../../shared/data/mnist"};
  for (const auto& d : tried) {
    if (!has_mnist(d)) continue;
    char resolved[PATH_MAX];
    return realpath(d.c_str(), resolved) ? std::string(resolved) : d;
  }
  throw_error("MNIST data not found in '", tried[0], "' (relative to the current directory) nor in '",
              tried[1], "'; pass --data DIR, a directory with ", kMnistFiles);
}

std::string find_data_file(const std::string& relative) {
  const std::vector<std::string> tried = {
      "../shared/data/" + relative, std::string(SPIRE_EXAMPLES_SOURCE_DIR) + "/../../shared/data/" + relative};
  for (const auto& p : tried) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (f == nullptr) continue;
    std::fclose(f);
    char resolved[PATH_MAX];
    return realpath(p.c_str(), resolved) ? std::string(resolved) : p;
  }
  throw_error("'", relative, "' not found in '", tried[0], "' (relative to the current directory) nor in '",
              tried[1], "'; pass --data FILE");
}

const char* trainer_flags_usage() {
  return "  --device D           cpu (default), gpu, gpu:N, cuda or cuda:N: where the graph runs\n"
         "                       (simple and horovod trainers)\n"
         "  --threads N          CPU threads of the session's kernels (default 2, under mpirun\n"
         "                       the cores / the ranks on this host; 0 = all cores)\n"
         "  --trainer T          simple (default), replicated, ps, async, or under mpirun horovod,\n"
         "                       dist-ps or dist-replicated\n"
         "  --ps K               dist-*: the first K ranks are parameter servers (default 1)\n"
         "  --devices LIST       the towers' devices, e.g. cpu:0,cpu:1 or gpu:0,gpu:1 (default\n"
         "                       cpu:0,cpu:1 for the multi-device trainers)\n"
         "  --gpus N             shorthand for --devices gpu:0,...,gpu:N-1\n"
         "  --mode M             replicated: ring (default; also collective), nccl, cpu, gpu or\n"
         "                       hierarchical\n"
         "  --ps-device D        ps: cpu, gpu (also devices) or auto (default: gpu up to 2 towers)\n"
         "  --compression C      horovod: none (default) or fp16\n"
         "  --backend B          horovod: default (SPIRE_MPI_ALGORITHM's), auto, ring,\n"
         "                       recursive-doubling, halving-doubling, mpi or nccl\n"
         "  --fusion-threshold B horovod: gradient buckets of at most B bytes (default 26214400,\n"
         "                       25 MiB; 0 = one allreduce per gradient)\n"
         "  --first-bucket B     horovod: the first bucket's cap in bytes (default 1048576)\n"
         "  --timeline S[:N]     trace N steps (default 1) from global step S into\n"
         "                       <logdir>/timeline-rank<r>.json (Chrome trace JSON, every rank)\n";
}

int64_t parse_int_flag(const std::string& flag, const std::string& value, int64_t min) {
  char* end = nullptr;
  long long x = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || x < min)
    throw_error(flag, ": expected an integer >= ", min, ", got '", value, "'");
  return x;
}

bool parse_trainer_flag(const std::string& key, const std::string& val, TrainerFlags* f) {
  if (key == "--device") f->device = val;
  else if (key == "--threads") f->threads = static_cast<int>(parse_int_flag(key, val, 0));
  else if (key == "--trainer") f->trainer = val;
  else if (key == "--devices") f->devices = val;
  else if (key == "--ps") f->num_ps = static_cast<int>(parse_int_flag(key, val, 1));
  else if (key == "--mode") f->mode = parse_replicated_mode(val);
  else if (key == "--ps-device") f->ps_device = parse_ps_device(val);
  else if (key == "--compression") f->compression = parse_horovod_compression(val);
  else if (key == "--backend") f->backend = parse_horovod_backend(val);
  else if (key == "--fusion-threshold") f->fusion_threshold = parse_int_flag(key, val, 0);
  else if (key == "--first-bucket") f->first_bucket = parse_int_flag(key, val, 0);
  else if (key == "--timeline") {
    const size_t colon = val.find(':');
    TraceWindow w;
    w.first_step = parse_int_flag(key, val.substr(0, colon), 1);
    if (colon != std::string::npos) w.num_steps = parse_int_flag(key, val.substr(colon + 1), 1);
    f->timeline = w;
  }
  else if (key == "--gpus") {
    const int64_t n = parse_int_flag(key, val, 1);
    f->devices.clear();
    for (int64_t i = 0; i < n; ++i) f->devices += (i ? ",gpu:" : "gpu:") + std::to_string(i);
  } else {
    return false;
  }
  return true;
}

void finish_trainer_flags(TrainerFlags* f) {
  const std::string& t = f->trainer;
  if (t != "simple" && t != "replicated" && t != "ps" && t != "async" && !f->horovod() &&
      !f->distributed())
    throw_error("--trainer: expected simple, replicated, ps, async, horovod, dist-ps or "
                "dist-replicated, got '", t, "'");
  if ((t == "simple" || f->horovod()) && !f->devices.empty())
    throw_error("--devices/--gpus need a multi-device --trainer (replicated, ps or async); the ", t,
                " trainer runs on --device");
  auto only_for = [&](bool given, const char* flag, const char* trainer) {
    if (given && t != trainer) throw_error(flag, " is the ", trainer, " trainer's; --trainer is ", t);
  };
  only_for(f->mode.has_value(), "--mode", "replicated");
  only_for(f->ps_device.has_value(), "--ps-device", "ps");
  only_for(f->compression.has_value(), "--compression", "horovod");
  only_for(f->backend.has_value(), "--backend", "horovod");
  only_for(f->fusion_threshold.has_value(), "--fusion-threshold", "horovod");
  only_for(f->first_bucket.has_value(), "--first-bucket", "horovod");
  if (f->distributed() && f->devices.empty()) f->devices = "cpu:0";
  if (t != "simple" && !f->horovod() && f->devices.empty()) f->devices = "cpu:0,cpu:1";
  if (f->threads < 0)
    f->threads = f->horovod() || f->distributed()
                     ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / hvd::local_size())
                     : 2;
}

std::vector<Device> tower_devices(const TrainerFlags& f) {
  return f.devices.empty() ? std::vector<Device>{} : parse_device_list(f.devices);
}

Device main_device(const TrainerFlags& f) {
  Device device = parse_device_flag(f.device);
  if (f.horovod() && device.is_cuda()) device = Device::cuda(hvd::local_rank());  // one GPU per rank
  return device;
}

std::unique_ptr<SingleCostTrainer> make_trainer(const TrainerFlags& f) {
  const std::vector<Device> towers = tower_devices(f);
  if (f.trainer == "simple") return std::make_unique<SimpleTrainer>();
  if (f.trainer == "replicated")
    return std::make_unique<SyncMultiGPUTrainerReplicated>(towers, /*average=*/true,
                                                           f.mode.value_or(ReplicatedMode::kRing));
  if (f.trainer == "ps")
    return std::make_unique<SyncMultiGPUTrainerParameterServer>(towers,
                                                                f.ps_device.value_or(PsDevice::kAuto));
  if (f.trainer == "async") return std::make_unique<AsyncMultiGPUTrainer>(towers);
  if (f.distributed()) {
    DistributedOptions options;
    options.num_ps = f.num_ps;
    if (f.trainer == "dist-ps") return std::make_unique<DistributedTrainerParameterServer>(towers, options);
    return std::make_unique<DistributedTrainerReplicated>(towers, options);
  }
  HorovodOptions options;
  options.device = main_device(f);
  if (f.compression) options.compression = *f.compression;
  if (f.backend) options.backend = *f.backend;
  if (f.fusion_threshold) options.fusion_threshold_bytes = *f.fusion_threshold;
  if (f.first_bucket) options.first_bucket_bytes = *f.first_bucket;
  return std::make_unique<HorovodTrainer>(options);
}

CallbackPtr make_validation(const TrainerFlags& f, std::shared_ptr<DataFlow> data,
                            std::vector<InferencerPtr> inferencers) {
  const std::vector<Device> towers = tower_devices(f);
  if (f.horovod())
    return std::make_shared<DistributedInferenceRunner>(data, inferencers, hvd::rank(), hvd::size());
  if (towers.size() > 1) return std::make_shared<DataParallelInferenceRunner>(data, inferencers, towers);
  return std::make_shared<InferenceRunner>(data, inferencers);
}

SessionOptions session_options(const TrainerFlags& f) {
  SessionOptions options;
  options.num_threads = f.threads;
  for (const Device& d : tower_devices(f))  // the CPU devices the towers use share --threads
    if (d.is_cpu()) options.num_cpu_devices = std::max(options.num_cpu_devices, d.index + 1);
  return options;
}

bool launch_example_training(const TrainerFlags& f, TrainConfig config, SingleCostTrainer& trainer,
                             const std::function<void(int)>& on_resume) {
  const std::string logdir = config.logdir;
  if (f.timeline) config.callbacks.push_back(std::make_shared<Timeline>(*f.timeline));
  config = AutoResumeTrainConfig(config);
  if (auto* h = dynamic_cast<HorovodTrainer*>(&trainer)) {
    // Rank 0 decides where to resume (the trainer makes every rank run its
    // loop); the data order follows its starting epoch on every rank.
    config.starting_epoch = h->broadcast_from_chief(config.starting_epoch, "starting_epoch");
  }
  if (config.starting_epoch > 1) {
    logger::info("Resuming from epoch ", config.starting_epoch, " of ", logdir);
    if (on_resume) on_resume(config.starting_epoch);
  }
  {
    DeviceScope on_device(trainer.graph(),
                          f.trainer == "simple" || f.horovod() ? main_device(f) : Device::cpu(0));
    launch_train_with_config(config, trainer);
  }
  const auto* dt = dynamic_cast<const DistributedTrainerBase*>(&trainer);
  if (dt && dt->is_ps()) {
    std::printf("parameter server rank %d: served %d worker(s) until they finished\n", dt->rank(),
                dt->num_workers());
    return false;
  }
  if (dt && !dt->is_chief()) {
    std::printf("worker %d (rank %d): trained; the chief validates and saves\n", dt->worker_index(),
                dt->rank());
    return false;
  }
  return true;
}

uint64_t variables_checksum(Trainer& trainer) {
  std::vector<Output> vars = global_variables("", &trainer.graph());
  std::sort(vars.begin(), vars.end(), [](const Output& a, const Output& b) { return a.name() < b.name(); });
  std::vector<Tensor> values = trainer.sess().run(vars);
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : values) {
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

bool final_stat(const Trainer& trainer, const std::string& logdir, const std::string& name,
                double* value, int* epoch) {
  // A horovod rank other than 0 writes no stats.json: its own monitors hold
  // the (distributed) validation of this run.
  if (trainer.logdir().empty() && trainer.monitors().has(name)) {
    *value = trainer.monitors().get_latest(name);
    *epoch = trainer.epoch_num();
    return true;
  }
  auto stats = JSONWriter::load_existing_json(logdir);
  for (auto it = stats.rbegin(); it != stats.rend(); ++it) {
    auto v = it->find(name);
    if (v == it->end()) continue;
    *value = v->second;
    auto e = it->find("epoch_num");
    *epoch = e == it->end() ? -1 : static_cast<int>(e->second);
    return true;
  }
  if (trainer.monitors().has(name)) {
    *value = trainer.monitors().get_latest(name);
    *epoch = trainer.epoch_num();
    return true;
  }
  return false;
}

}  // namespace spire_examples
