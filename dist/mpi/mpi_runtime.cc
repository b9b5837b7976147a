// MpiRuntime's initialization and exit (see mpi_runtime.h); its failure
// announcements are in mpi_failures.cc.
#include "dist/mpi/mpi_runtime.h"

#if defined(SPIRE_WITH_MPI)

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "core/logger.h"
#include "dist/mpi/mpi_internal.h"

namespace spire::dist {

using mpi_detail::check_mpi;
using mpi_detail::use_errors_return;

namespace {

// The value of an MPI control variable (MPI_T), as text: nullopt when the
// MPI has none of that name (or MPI_T cannot read it). Integers and strings.
std::optional<std::string> mpi_control_variable(const char* name) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return std::nullopt;
  std::optional<std::string> value;
  int index = -1;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS) {
    char got[256];
    int got_len = sizeof(got), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(index, got, &got_len, &verbosity, &type, &enumtype, nullptr, nullptr, &bind,
                            &scope) == MPI_SUCCESS &&
        bind == MPI_T_BIND_NO_OBJECT) {
      MPI_T_cvar_handle handle;
      int count = 0;
      if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
        if (type == MPI_CHAR && count > 0) {
          std::vector<char> buf(static_cast<size_t>(count) + 1, '\0');
          if (MPI_T_cvar_read(handle, buf.data()) == MPI_SUCCESS) value = std::string(buf.data());
        } else if (count == 1) {
          // The integer types MPI_T may use.
          unsigned long long u = 0;
          long long v = 0;
          if (type == MPI_INT || type == MPI_UNSIGNED) {
            int x = 0;
            if (MPI_T_cvar_read(handle, &x) == MPI_SUCCESS)
              value = type == MPI_INT ? std::to_string(x) : std::to_string(static_cast<unsigned>(x));
          } else if (type == MPI_UNSIGNED_LONG || type == MPI_UNSIGNED_LONG_LONG || type == MPI_COUNT) {
            if (MPI_T_cvar_read(handle, &u) == MPI_SUCCESS) value = std::to_string(u);
          } else if (type == MPI_LONG || type == MPI_LONG_LONG) {
            if (MPI_T_cvar_read(handle, &v) == MPI_SUCCESS) value = std::to_string(v);
          }
        }
        MPI_T_cvar_handle_free(&handle);
      }
    }
  }
  MPI_T_finalize();
  return value;
}

// Logs through core/logger.h, as every layer does, from the exit path: the
// runtime's destructor runs at exit, so nothing may throw out of it, and
// the line is flushed at once (MPI_Abort may follow).
template <typename... Args>
void log_at_exit(logger::Level level, const Args&... args) noexcept {
  try {
    logger::write(level, str_cat(args...));
  } catch (...) {
  }
  std::fflush(stderr);
}

// "a,b,c" -> {"a", "b", "c"} (spaces dropped).
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out(1);
  for (char ch : text) {
    if (ch == ',') out.emplace_back();
    else if (ch != ' ') out.back() += ch;
  }
  return out;
}

}  // namespace

MpiRuntime& MpiRuntime::get() {
  static MpiRuntime runtime;
  return runtime;
}

MpiRuntime::MpiRuntime() : control_(std::make_unique<Control>()), liveness_(MpiLiveness::from_env()) {
  int inited = 0;
  check_mpi(MPI_Initialized(&inited), "MPI_Initialized");
  int provided = 0;
  if (!inited) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    initialized_here_ = true;
  } else {
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided < MPI_THREAD_MULTIPLE)
    throw_error("MPI: Spire's collectives run on the executor's threads and need "
                "MPI_THREAD_MULTIPLE; this MPI provides level ", provided,
                initialized_here_ ? "" : " (initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE))");
  // MPI_COMM_WORLD's calls below (and a program's, where Spire initialized MPI) return
  // errors rather than abort; a program that initialized MPI keeps its own handler there.
  if (initialized_here_) use_errors_return(MPI_COMM_WORLD);
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  MPI_Comm local;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN);  // (a failure here leaves MPI's default)
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  int host = rank_;
  check_mpi(MPI_Allreduce(&rank_, &host, 1, MPI_INT, MPI_MIN, local), "MPI_Allreduce");
  MPI_Comm_free(&local);
  host_of_.assign(static_cast<size_t>(size_), 0);
  check_mpi(MPI_Allgather(&host, 1, MPI_INT, host_of_.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  // The transports' settings, where the MPI tells them (OpenMPI's names).
  if (std::optional<std::string> btl = mpi_control_variable("btl"); btl && !btl->empty()) {
    // "a,b" selects components, "^a,b" leaves them out.
    const bool exclude = (*btl)[0] == '^';
    bool listed = false;
    for (const std::string& name : split_list(exclude ? btl->substr(1) : *btl))
      if (name == "vader" || name == "sm" || name == "smcuda") listed = true;
    shared_memory_transport_ = exclude ? !listed : listed;
  }
  if (std::optional<std::string> limit = mpi_control_variable("btl_tcp_eager_limit"))
    tcp_eager_limit_ = std::strtoll(limit->c_str(), nullptr, 10);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &control_->comm), "MPI_Comm_dup");
  use_errors_return(control_->comm);
  start_heartbeat();
}

bool MpiRuntime::wait_for_peers_at_exit() {
  // MPI_Finalize waits inside OpenMPI's runtime for every rank, deaf to
  // Spire's announcements, and a job whose other ranks then fail and call
  // MPI_Abort has been seen to hang there (mpirun never returning). So a rank
  // that ends well first meets the others in a barrier it polls, listening
  // for failures; like MPI_Finalize it waits as long as the others run
  // (its heartbeats go on meanwhile). It first tells the others it
  // finished: a wait of theirs for this rank then ends with an error.
  tell_finished();
  MPI_Request req;
  if (MPI_Ibarrier(control_->comm, &req) != MPI_SUCCESS) return false;
  const auto start = std::chrono::steady_clock::now();
  bool said = false;
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      // (MPI returns errors on the control communicator: a barrier that failed is no
      // meeting, and MPI_Finalize would wait for ranks that may be gone.)
      log_at_exit(logger::Level::kError, "rank ", rank_, " finished, but the barrier at exit failed");
      std::lock_guard<std::mutex> lk(control_->mu);
      control_->failed = true;
      return false;
    }
    if (done) return true;
    std::string failure;
    {
      std::lock_guard<std::mutex> lk(control_->mu);
      failure = receive_failure();
    }
    if (!failure.empty()) {
      log_at_exit(logger::Level::kError, "rank ", rank_, " finished, but ", failure);
      return false;  // (the barrier request is left: the job is ending)
    }
    if (!said && std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
      log_at_exit(logger::Level::kInfo, "rank ", rank_, " finished; waiting for the other ranks to finish");
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    stop_heartbeat();  // (MPI_Finalize's hook has stopped it)
    return;
  }
  if (!failed() && initialized_here_ && size_ > 1) wait_for_peers_at_exit();
  // The heartbeats stop once the job ended well; a rank the thread found
  // dead while it stopped makes the job a failed one all the same.
  if (!failed()) stop_heartbeat();
  if (failed()) {
    // MPI_Finalize would wait for every rank, and a failed job may have a
    // dead or stalled one: end the job (mpirun stops every rank, exit != 0).
    // One rank ends it: OpenMPI's mpirun has been seen to garble (and may
    // hang on) aborts from several ranks at once. A rank that only heard of
    // another's failure, or that announced its own but also heard one from
    // a lower rank (both saw the same missing rank), leaves the ending to
    // the lowest announcer: it tells that rank it reached its exit (its
    // error is reported by now) and waits to be ended. The ending rank
    // first waits, bounded, until every rank it knows to be alive said so.
    bool defer;
    int ender;
    {
      std::lock_guard<std::mutex> lk(control_->mu);
      receive_failure();
      defer = !control_->announced || control_->lowest_announcer < rank_;
      ender = control_->lowest_announcer;
    }
    // The ender announced at most kAckTimeoutSeconds before it waits here
    // for at most kExitWait: a deferring rank outwaits both before it ends
    // the job itself (the ender died meanwhile).
    constexpr double kExitWait = 5;
    if (!defer && !wait_for_responsive_ranks_to_exit(kExitWait)) {
      std::lock_guard<std::mutex> lk(control_->mu);
      defer = true;
      ender = control_->lowest_announcer;
    }
    if (defer) {
      if (ender >= 0 && ender < size_) tell_exiting(ender);
      std::this_thread::sleep_for(
          std::chrono::duration<double>(kAckTimeoutSeconds + kExitWait + 5));
    }
    log_at_exit(logger::Level::kError, "rank ", rank_, ": the MPI job failed; ending every rank with MPI_Abort");
    // Should MPI_Abort not end this process (a peer stuck in MPI_Finalize
    // has been seen to hold the job up), dying by a signal makes mpirun end
    // the job all the same.
    const int rank = rank_;
    std::thread([rank] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      log_at_exit(logger::Level::kError, "rank ", rank,
                  ": MPI_Abort did not end this process in 10 s; killing it");
      std::raise(SIGKILL);
    }).detach();
    stop_heartbeat();
    MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  if (initialized_here_) {
    MPI_Comm_free(&control_->comm);
    MPI_Finalize();
  } else {
    forget_finalize_hook();  // (the program's MPI_Finalize comes later, without this runtime)
  }
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
