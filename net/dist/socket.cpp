// net/dist/socket.cpp — TCP sockets with deadlines (net/dist/socket.h).
#include "net/dist/socket.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "engine/error.h"

namespace ember::net::dist {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Resolves host (a name or a numeric address) to IPv4/IPv6 socket addresses.
struct Resolved {
  addrinfo* list = nullptr;
  ~Resolved() {
    if (list) freeaddrinfo(list);
  }
};
void resolve(const std::string& host, int port, bool passive, Resolved& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.list);
  EMBER_CHECK(rc == 0, "cannot resolve host '", host, "': ", gai_strerror(rc));
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_until(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) fail(cat("poll: ", errno_text(errno)));
  }
}

}  // namespace

int ms_until(Deadline d) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 3'600'000 ? 3'600'000 : int(left);
}

std::string HostPort::str() const {
  return host.find(':') != std::string::npos ? cat("[", host, "]:", port) : cat(host, ":", port);
}

HostPort parse_host_port(const std::string& text, const char* what) {
  HostPort hp;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    EMBER_CHECK(close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':', what, ": '", text,
                "' is not [address]:port");
    hp.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    EMBER_CHECK(colon != std::string::npos && colon > 0, what, ": '", text, "' is not host:port");
    hp.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  EMBER_CHECK(!port_text.empty() && *end == '\0' && port > 0 && port < 65536, what, ": '", text,
              "' has no valid port (1-65535)");
  hp.port = int(port);
  return hp;
}

UniqueFd listen_tcp(const std::string& host, int port, int backlog) {
  Resolved r;
  resolve(host, port, true, r);
  int last_err = 0;
  for (addrinfo* a = r.list; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // no TIME_WAIT wait between runs
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    return fd;
  }
  if (last_err == EADDRINUSE) fail(cat("address already in use: port ", port, " on ", host.empty() ? "*" : host));
  fail(cat("cannot listen on ", host.empty() ? "*" : host, ":", port, ": ", errno_text(last_err)));
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  EMBER_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0, "getsockname: ", errno_text(errno));
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

UniqueFd connect_tcp(const std::string& host, int port, Deadline deadline) {
  int last_err = ETIMEDOUT;
  int pause_ms = 50;
  for (;;) {
    Resolved r;
    resolve(host, port, false, r);
    for (addrinfo* a = r.list; a; a = a->ai_next) {
      UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (!fd.valid()) {
        last_err = errno;
        continue;
      }
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last_err = errno;
          continue;
        }
        if (!wait_for(fd.get(), POLLOUT, deadline)) {
          last_err = ETIMEDOUT;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_err = err;
          continue;
        }
      }
      set_nonblocking(fd.get(), false);
      return fd;
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(pause_ms, std::max(1, ms_until(deadline)))));
    pause_ms = std::min(500, pause_ms * 2);
  }
  fail(cat("cannot connect to ", HostPort{host, port}.str(), ": ", errno_text(last_err)));
}

UniqueFd accept_tcp(int listen_fd, Deadline deadline, std::string* peer) {
  for (;;) {
    if (!wait_for(listen_fd, POLLIN, deadline)) fail("timed out waiting for a connection");
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      fail(cat("accept: ", errno_text(errno)));
    }
    if (peer) {
      char host[INET6_ADDRSTRLEN] = "?";
      if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
      else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
      *peer = host;
    }
    UniqueFd out(fd);
    set_nonblocking(fd, false);
    return out;
  }
}

void send_exact(int fd, const void* data, size_t n, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, deadline)) fail("timed out sending");
      continue;
    }
    fail(cat("send: ", errno_text(errno)));
  }
}

void recv_exact(int fd, void* data, size_t n, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k == 0) fail("connection closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) fail("timed out receiving");
      continue;
    }
    fail(cat("recv: ", errno_text(errno)));
  }
}

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  EMBER_CHECK(flags >= 0, "fcntl: ", errno_text(errno));
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

namespace {
long read_sysctl(const char* path) {
  std::ifstream f(path);
  long v = -1;
  f >> v;
  return v;
}
}  // namespace

void tune_stream_socket(int fd, int buffer_bytes) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  // Setting a buffer turns Linux's autotuning off for it and is clamped to
  // net.core.{w,r}mem_max: only set it when the system grants the full size.
  if (buffer_bytes > 0) {
    if (read_sysctl("/proc/sys/net/core/wmem_max") >= buffer_bytes)
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    if (read_sysctl("/proc/sys/net/core/rmem_max") >= buffer_bytes)
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
}

namespace {

// One comma-separated NCCL_SOCKET_IFNAME-style spec.
struct InterfaceSpec {
  bool exclude = false, exact = false;
  std::vector<std::string> names;
  bool matches(const std::string& name) const {
    bool hit = false;
    for (const auto& n : names) hit = hit || (exact ? name == n : name.rfind(n, 0) == 0);
    return exclude ? !hit : hit;
  }
};
InterfaceSpec parse_interface_spec(std::string spec) {
  InterfaceSpec s;
  if (!spec.empty() && spec[0] == '^') s.exclude = true, spec.erase(0, 1);
  if (!spec.empty() && spec[0] == '=') s.exact = true, spec.erase(0, 1);
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) s.names.push_back(item);
  return s;
}

}  // namespace

std::string choose_local_address(const std::string& spec, const std::string& master_host) {
  if (!spec.empty()) {
    const InterfaceSpec s = parse_interface_spec(spec);
    ifaddrs* list = nullptr;
    EMBER_CHECK(::getifaddrs(&list) == 0, "getifaddrs: ", errno_text(errno));
    std::string found, seen;
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
      char host[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, host, sizeof host);
      seen += cat(seen.empty() ? "" : ", ", a->ifa_name, " ", host);
      if (found.empty() && s.matches(a->ifa_name)) found = host;
    }
    freeifaddrs(list);
    EMBER_CHECK(!found.empty(), "no network interface matches '", spec,
                "' (--comm-interface / EMBER_SOCKET_IFNAME); this host has: ", seen.empty() ? "none" : seen);
    return found;
  }
  // The kernel's route toward the master: a UDP "connect" sends nothing.
  Resolved r;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  const int rc = getaddrinfo(master_host.c_str(), "9", &hints, &r.list);
  EMBER_CHECK(rc == 0, "cannot resolve MASTER_ADDR '", master_host, "': ", gai_strerror(rc));
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  EMBER_CHECK(fd.valid(), "socket: ", errno_text(errno));
  EMBER_CHECK(::connect(fd.get(), r.list->ai_addr, r.list->ai_addrlen) == 0, "no route to MASTER_ADDR '",
              master_host, "': ", errno_text(errno));
  sockaddr_in local{};
  socklen_t len = sizeof local;
  EMBER_CHECK(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0, "getsockname: ",
              errno_text(errno));
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, host, sizeof host);
  // A host name that resolves to loopback on its own host (Debian maps the
  // host's name to 127.0.1.1) would make rank 0 publish 127.0.0.1 to ranks on
  // other hosts: unless the master was named as loopback itself, publish the
  // first non-loopback address instead (reachable from this host too).
  const bool named_loopback = master_host == "localhost" || master_host.rfind("127.", 0) == 0;
  if ((ntohl(local.sin_addr.s_addr) >> 24) == 127 && !named_loopback) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
      std::string found;
      for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP) ||
            (a->ifa_flags & IFF_LOOPBACK))
          continue;
        char other[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, other, sizeof other);
        found = other;
      }
      freeifaddrs(list);
      if (!found.empty()) return found;
    }
  }
  return host;
}

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace ember::net::dist
