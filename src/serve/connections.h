// The HTTP server's connections (docs/architecture.md, "Hostile input"): which thread serves each,
// how many may be open, and how long a client may take to send a request.
//
// cpp-httplib 0.11 (Debian 12's) gives a connection to a task queue right after accepting it and
// bounds only each read (a client sending a byte every few seconds holds its thread forever). This
// queue, installed as cpp-httplib's, keeps every accepted connection in a table:
// - a whole-request deadline: from the connection's start (or the end of its previous response)
//   to the moment a handler runs, headers and body must have arrived, else the socket is shut
//   down;
// - a cap: up to `max_connections` are served in full; `reserve` more may only ask /health or
//   /metrics (ServingKind::kProbesOnly, a short deadline), so a load balancer's probe is answered
//   when slow clients hold every other connection; beyond those the listener answers 503 with
//   Retry-After itself;
// - a thread per open connection, started when needed, so a connection never waits behind
//   another one.
// cpp-httplib does not hand the accepted socket to the queue: it is found among the process's
// descriptors (a connected socket on the listening port that is not in the table yet; only the
// listening thread accepts, and it enqueues each connection before accepting the next), and
// duplicated, so that the descriptor the table shuts down is never a reused number.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace pocket::serve {

struct ConnectionLimits {
  int32_t max_connections = 64;  // served in full at once
  int32_t reserve = 8;           // more that may only ask /health and /metrics
  // Headers and body of each request, from the connection's start or its previous response.
  std::chrono::milliseconds request_timeout{10000};
  // Added to the deadline after a response: how long cpp-httplib waits for the next request on a
  // kept-alive connection.
  std::chrono::milliseconds keep_alive{5000};
  // The deadline of a connection beyond max_connections (a probe sends its request at once).
  std::chrono::milliseconds probe_timeout{2000};
};

enum class ServingKind { kFull, kProbesOnly };

struct ConnectionCounts {
  int64_t open = 0;       // connections open now
  int64_t accepted = 0;   // since start
  int64_t refused = 0;    // answered 503 by the listener (beyond max_connections + reserve)
  int64_t timed_out = 0;  // shut down at their request deadline
};

class Connections {
 public:
  Connections(ConnectionLimits limits, std::function<void(std::string_view)> log);
  ~Connections();
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  // The port the server listens on (before the first Enqueue): accepted sockets are found by it.
  // The listening socket's backlog is raised to `backlog` (cpp-httplib listens with 5: a burst of
  // connections overflowed it and some were reset).
  void SetListenPort(int port, int backlog = 1024);

  // cpp-httplib's TaskQueue, on the listening thread: `serve` serves the connection just accepted
  // and closes it.
  void Enqueue(std::function<void()> serve);
  // Stops: connections waiting for a request are shut down, the others finish; joins every
  // thread. Enqueue may be called again afterwards (a new listen).
  void Shutdown();

  // On the thread serving a connection (cpp-httplib's handlers and logger):
  ServingKind CurrentKind() const;
  // The connection's socket (a duplicate: shutting it down or peeking at it reaches the client);
  // -1 when unknown.
  int CurrentSocket() const;
  // The request has arrived (its handler runs): the deadline no longer applies.
  void RequestArrived();
  // A response was sent: the deadline starts again for the next request.
  void ResponseSent();

  ConnectionCounts Counts() const;

 private:
  struct Conn;
  void Worker();
  void Watchdog();
  std::shared_ptr<Conn> Current() const;  // under mu_

  const ConnectionLimits limits_;
  const std::function<void(std::string_view)> log_;
  int port_ = -1;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // a connection queued, or stopping
  std::condition_variable watch_cv_;  // stopping
  struct Queued {
    std::function<void()> serve;
    std::shared_ptr<Conn> conn;
  };
  std::deque<Queued> queue_;
  std::vector<std::shared_ptr<Conn>> open_;
  std::unordered_map<std::thread::id, std::shared_ptr<Conn>> serving_;
  std::vector<std::thread> workers_;
  int32_t idle_workers_ = 0;
  bool stopping_ = false;
  std::thread watchdog_;
  ConnectionCounts counts_;
};

}  // namespace pocket::serve
