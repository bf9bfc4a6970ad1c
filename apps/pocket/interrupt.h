// Ctrl-C for the interactive commands: SIGINT is blocked in every thread and taken by one
// watcher thread (sigwait), which acts on the command's current state. So the action may do
// anything a thread may (Session::Cancel, print, exit), not only what a signal handler may, and
// no thread of the pool is interrupted in the middle of a kernel.
#pragma once

#include <mutex>
#include <thread>

namespace pocket {
class Session;
}

namespace pocket::cli {

// Exit status of a command ended by Ctrl-C (128 + SIGINT, as shells report it).
inline constexpr int kInterruptedExitCode = 130;

class InterruptWatcher {
 public:
  // Blocks SIGINT in the calling thread, so create it before any other thread (threads inherit
  // the mask), then starts the watcher. It starts in the Exit state.
  InterruptWatcher();
  ~InterruptWatcher();
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  // What a Ctrl-C does from now on. Each call takes the watcher's lock, so once it returns the
  // watcher no longer acts on the previous state (a session that is about to be destroyed, or
  // output being written, is safe).
  // Exit: flush stdout and end the process with kInterruptedExitCode (loading, at a prompt).
  void Exit() { Set(Mode::kExit, nullptr); }
  // Cancel: Session::Cancel() on `session` (a generation or scoring pass is running).
  void Cancel(Session* session) { Set(Mode::kCancel, session); }
  // Ignore: nothing (the results are being printed; they should come out whole).
  void Ignore() { Set(Mode::kIgnore, nullptr); }

 private:
  enum class Mode { kExit, kCancel, kIgnore };
  void Set(Mode mode, Session* session);
  void OnInterrupt();

  std::mutex mu_;
  Mode mode_ = Mode::kExit;
  Session* session_ = nullptr;
  std::thread thread_;
};

}  // namespace pocket::cli
