#include "interrupt.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/session.h"

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

InterruptWatcher::InterruptWatcher() {
  const sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] {
    const sigset_t watched = WatchedSignals();
    while (true) {
      int sig = 0;
      if (sigwait(&watched, &sig) != 0) continue;
      if (sig != SIGINT) return;
      OnInterrupt();
    }
  });
}

InterruptWatcher::~InterruptWatcher() {
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

void InterruptWatcher::Set(Mode mode, Session* session) {
  const std::lock_guard<std::mutex> lock(mu_);
  mode_ = mode;
  session_ = session;
}

void InterruptWatcher::OnInterrupt() {
  const std::lock_guard<std::mutex> lock(mu_);
  switch (mode_) {
    case Mode::kCancel:
      session_->Cancel();
      return;
    case Mode::kIgnore:
      return;
    case Mode::kExit:
      std::fflush(stdout);
      std::fputc('\n', stderr);
      std::_Exit(kInterruptedExitCode);
  }
}

}  // namespace pocket::cli
