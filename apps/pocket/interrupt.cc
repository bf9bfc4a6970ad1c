#include "interrupt.h"

#include <pthread.h>
#include <signal.h>

namespace pocket::cli {
namespace {

// SIGINT from the terminal; SIGUSR2 only from the destructor, to end the watcher.
sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

InterruptWatcher::InterruptWatcher(std::function<void()> on_interrupt)
    : on_interrupt_(std::move(on_interrupt)) {
  const sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] {
    const sigset_t watched = WatchedSignals();
    while (true) {
      int sig = 0;
      if (sigwait(&watched, &sig) != 0) continue;
      if (sig != SIGINT) return;
      on_interrupt_();
    }
  });
}

InterruptWatcher::~InterruptWatcher() {
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

}  // namespace pocket::cli
