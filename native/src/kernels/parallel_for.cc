#include "kernels/parallel_for.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

namespace fuseopt {
namespace kernels {
namespace {

constexpr std::chrono::microseconds kHelperSpin(200);

// One call's tasks: whoever is free takes the next index.
struct Batch {
  const std::function<void(int64_t)>* task = nullptr;
  int64_t tasks = 0, next = 0, done = 0;
  int helpers_wanted = 0;
  std::exception_ptr error;
};

class Pool {
 public:
  void run(int64_t tasks, int threads, const std::function<void(int64_t)>& task) {
    std::unique_lock<std::mutex> lock(mu_);
    // One batch at a time: a second framework thread waits for the first.
    idle_.wait(lock, [&] { return batch_ == nullptr; });
    Batch batch;
    batch.task = &task;
    batch.tasks = tasks;
    batch.helpers_wanted = static_cast<int>(std::min<int64_t>(threads - 1, tasks - 1));
    while (static_cast<int>(threads_.size()) < batch.helpers_wanted)
      threads_.emplace_back([this] { serve(); });
    batch_ = &batch;
    lock.unlock();
    wake_.notify_all();
    lock.lock();
    work(&batch, lock);
    finished_.wait(lock, [&] { return batch.done == batch.tasks; });
    batch_ = nullptr;
    lock.unlock();
    idle_.notify_all();
    if (batch.error) std::rethrow_exception(batch.error);
  }

 private:
  // Takes tasks of batch until none is left; called with lock held.
  void work(Batch* batch, std::unique_lock<std::mutex>& lock) {
    while (batch->next < batch->tasks) {
      const int64_t i = batch->next++;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*batch->task)(i);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !batch->error) batch->error = error;
      if (++batch->done == batch->tasks) finished_.notify_all();
    }
  }

  bool has_work() const {
    return batch_ && batch_->helpers_wanted > 0 && batch_->next < batch_->tasks;
  }

  // A helper that just worked polls for the next batch for kHelperSpin
  // before it sleeps: a batch-norm pass makes its kernel calls a few
  // microseconds apart (before and after its reduction), and a sleeping
  // helper wakes about 50 us late here, after small tasks are done. So does
  // OpenMP, whose threads torch's own kernels use.
  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (!has_work()) {
        const auto until = std::chrono::steady_clock::now() + kHelperSpin;
        while (!has_work() && std::chrono::steady_clock::now() < until) {
          lock.unlock();
          std::this_thread::yield();
          lock.lock();
        }
      }
      wake_.wait(lock, [&] { return has_work(); });
      Batch* batch = batch_;
      --batch->helpers_wanted;
      work(batch, lock);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, finished_, idle_;
  std::vector<std::thread> threads_;
  Batch* batch_ = nullptr;
};

}  // namespace

void parallel_for(int64_t tasks, int threads, const std::function<void(int64_t)>& task) {
  if (tasks <= 0) return;
  if (threads <= 1 || tasks == 1) {
    for (int64_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  // Never destroyed: helper threads must not be joined during static
  // destruction, when a framework may still be tearing down. A forked child
  // (a data-loader worker) has none of its parent's threads: it makes its own.
  static std::mutex made_mu;
  static Pool* pool = nullptr;
  static pid_t owner = 0;
  Pool* mine;
  {
    std::lock_guard<std::mutex> lock(made_mu);
    if (!pool || owner != getpid()) {
      pool = new Pool;
      owner = getpid();
    }
    mine = pool;
  }
  mine->run(tasks, threads, task);
}

}  // namespace kernels
}  // namespace fuseopt
