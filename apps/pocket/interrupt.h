// Ctrl-C for the interactive commands: SIGINT is blocked in every thread and taken by one
// watcher thread (sigwait), which calls the command's handler. So a handler may do anything a
// thread may (Session::Cancel, print, exit), not only what a signal handler may, and no thread
// of the thread pool is interrupted in the middle of a kernel.
#pragma once

#include <functional>
#include <thread>

namespace pocket::cli {

class InterruptWatcher {
 public:
  // Blocks SIGINT in the calling thread, so create it before any other thread (threads inherit
  // the mask), then starts the watcher. `on_interrupt` runs on the watcher thread, once per
  // Ctrl-C.
  explicit InterruptWatcher(std::function<void()> on_interrupt);
  ~InterruptWatcher();
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

 private:
  std::function<void()> on_interrupt_;
  std::thread thread_;
};

// Exit status of a command ended by Ctrl-C (128 + SIGINT, as shells report it).
inline constexpr int kInterruptedExitCode = 130;

}  // namespace pocket::cli
