#include "serve/connections.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <utility>

#include "base/str.h"

namespace pocket::serve {

struct Connections::Conn {
  int fd = -1;  // a duplicate of cpp-httplib's descriptor, or -1
  ino_t ino = 0;
  ServingKind kind = ServingKind::kFull;
  bool reading = true;  // waiting for a request's headers or body: the deadline applies
  bool cut = false;     // shut down at its deadline
  std::chrono::steady_clock::time_point deadline;
};

namespace {

int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// A connected TCP socket on `port` that is not in `known`: the connection just accepted.
int FindAcceptedSocket(int port, const std::unordered_set<ino_t>& known, ino_t& ino) {
  auto accepted = [&](int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || known.count(st.st_ino) != 0) return false;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || PortOf(a) != port) {
      return false;
    }
    len = sizeof(a);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;  // listening
    ino = st.st_ino;
    return true;
  };
  if (DIR* dir = opendir("/proc/self/fd")) {  // Linux and Android: only the open descriptors
    int found = -1;
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const int fd = std::atoi(e->d_name);
      if (fd != dirfd(dir) && accepted(fd)) {
        found = fd;
        break;
      }
    }
    closedir(dir);
    return found;
  }
  const long max_fd = std::min<long>(sysconf(_SC_OPEN_MAX), 65536);
  for (int fd = 0; fd < max_fd; ++fd) {
    if (accepted(fd)) return fd;
  }
  return -1;
}

// The listener's answer beyond every limit: a 503 the client can act on, then the connection's end
// (reads too, so that cpp-httplib, which serves it next on the listening thread, sees its end at
// once instead of waiting for a request).
void Refuse(int fd) {
  static constexpr std::string_view kBody =
      R"({"error":{"message":"too many connections; retry later","type":"server_error","param":null,"code":"too_many_connections"}})";
  const std::string response = StrCat(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
      "1\r\nConnection: close\r\nContent-Length: ",
      kBody.size(), "\r\n\r\n", kBody);
  (void)send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  shutdown(fd, SHUT_WR);
  // What the client sent so far is read, so that closing does not reset the answer away.
  char buf[4096];
  while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  shutdown(fd, SHUT_RD);
}

}  // namespace

Connections::Connections(ConnectionLimits limits, std::function<void(std::string_view)> log)
    : limits_(limits), log_(std::move(log)) {}

Connections::~Connections() {
  Shutdown();
}

void Connections::SetListenPort(int port, int backlog) {
  std::lock_guard<std::mutex> lock(mu_);
  port_ = port;
  // The listening socket: on the port, accepting. listen() again only changes its backlog.
  auto listening = [port](int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || PortOf(a) != port) {
      return false;
    }
    int accepting = 0;
    len = sizeof(accepting);
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting != 0;
  };
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const int fd = std::atoi(e->d_name);
      if (fd != dirfd(dir) && listening(fd)) (void)listen(fd, backlog);
    }
    closedir(dir);
  }
}

void Connections::Enqueue(std::function<void()> serve) {
  auto conn = std::make_shared<Conn>();
  std::unique_lock<std::mutex> lock(mu_);
  if (!watchdog_.joinable()) {
    stopping_ = false;
    watchdog_ = std::thread([this] { Watchdog(); });
  }
  std::unordered_set<ino_t> known;
  for (const auto& c : open_) known.insert(c->ino);
  const int fd = port_ >= 0 ? FindAcceptedSocket(port_, known, conn->ino) : -1;
  if (fd >= 0) conn->fd = dup(fd);
  const auto n_open = static_cast<int64_t>(open_.size());
  if (n_open >= int64_t{limits_.max_connections} + limits_.reserve) {
    ++counts_.refused;
    lock.unlock();
    if (conn->fd >= 0) Refuse(conn->fd);
    serve();
    if (conn->fd >= 0) close(conn->fd);
    return;
  }
  conn->kind = n_open >= limits_.max_connections ? ServingKind::kProbesOnly : ServingKind::kFull;
  conn->deadline =
      std::chrono::steady_clock::now() +
      (conn->kind == ServingKind::kFull ? limits_.request_timeout : limits_.probe_timeout);
  open_.push_back(conn);
  ++counts_.accepted;
  queue_.push_back({std::move(serve), std::move(conn)});
  // A thread for every connection: one never waits for another to finish.
  if (static_cast<int64_t>(queue_.size()) > idle_workers_) {
    workers_.emplace_back([this] { Worker(); });
  }
  work_cv_.notify_one();
}

void Connections::Worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_workers_;
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    --idle_workers_;
    if (queue_.empty()) return;  // stopping
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    const std::thread::id self = std::this_thread::get_id();
    serving_[self] = q.conn;
    lock.unlock();
    q.serve();  // cpp-httplib closes its descriptor before returning
    q.serve = nullptr;
    lock.lock();
    serving_.erase(self);
    open_.erase(std::find(open_.begin(), open_.end(), q.conn));
    if (q.conn->fd >= 0) close(q.conn->fd);
  }
}

void Connections::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    watch_cv_.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = std::chrono::steady_clock::now();
    for (const auto& c : open_) {
      if (!c->reading || c->cut || now < c->deadline || c->fd < 0) continue;
      // The descriptor is the table's own duplicate: it still names this connection's socket.
      shutdown(c->fd, SHUT_RDWR);
      c->cut = true;
      ++counts_.timed_out;
      if (log_) {
        log_(
            StrCat("closed a connection whose request did not arrive within ",
                   (c->kind == ServingKind::kFull ? limits_.request_timeout : limits_.probe_timeout)
                       .count(),
                   " ms"));
      }
    }
  }
}

void Connections::Shutdown() {
  std::vector<std::thread> workers;
  std::thread watchdog;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Connections waiting for a request (kept alive, or slow) end now; the others finish.
    for (const auto& c : open_) {
      if (c->reading && c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
    }
    workers.swap(workers_);
    watchdog.swap(watchdog_);
  }
  work_cv_.notify_all();
  watch_cv_.notify_all();
  for (std::thread& t : workers) t.join();
  if (watchdog.joinable()) watchdog.join();
}

std::shared_ptr<Connections::Conn> Connections::Current() const {
  auto it = serving_.find(std::this_thread::get_id());
  return it == serving_.end() ? nullptr : it->second;
}

ServingKind Connections::CurrentKind() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Conn> c = Current();
  return c ? c->kind : ServingKind::kFull;
}

int Connections::CurrentSocket() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Conn> c = Current();
  return c ? c->fd : -1;
}

void Connections::RequestArrived() {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::shared_ptr<Conn> c = Current()) c->reading = false;
}

void Connections::ResponseSent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::shared_ptr<Conn> c = Current()) {
    c->reading = true;
    c->deadline = std::chrono::steady_clock::now() + limits_.keep_alive +
                  (c->kind == ServingKind::kFull ? limits_.request_timeout : limits_.probe_timeout);
  }
}

ConnectionCounts Connections::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  ConnectionCounts counts = counts_;
  counts.open = static_cast<int64_t>(open_.size());
  return counts;
}

}  // namespace pocket::serve
