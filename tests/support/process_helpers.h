// tests/support/process_helpers.h — running the real programs from a test, bounded
// in time: fork/exec with stdout and stderr captured into files, waiting with
// a deadline, and SIGKILL for whatever is still alive at scope exit.
//
// Each Process leads its own session (setsid), and killing it kills every
// process of that session: what it started too (--nproc workers; mpirun's
// ranks, which Open MPI puts in process groups of their own but not in
// sessions of their own). The leader is not reaped until the Process is
// destroyed (waitid WNOWAIT), so its pid, the session's id, cannot be reused
// by an unrelated process meanwhile. The child also gets
// PR_SET_PDEATHSIG(SIGKILL), so nothing outlives a test binary that is
// killed itself. Launcher variables (RANK, WORLD_SIZE, MASTER_*, OMPI_*,
// PMIX_*, SLURM_*, ...) are removed from the inherited environment before the
// test's own are added, so a test is not steered by the shell it runs in.
// Everything is in ember::testing::process (tests/support/comm_test_helpers.h has
// its own free_port in ember::testing).
#pragma once
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace ember::testing::process {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The directory of the running test binary (build/): the programs under test sit next to it.
inline std::string binary_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// `name` on the PATH ("" if absent); a name with a '/' is returned as it is when executable.
inline std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + name;
    struct stat st{};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The non-empty lines of `text`.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

// Environment variables a launcher sets: never inherited by a spawned program.
inline bool is_launcher_variable(const std::string& name) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "EMBER_RUN_ID", "EMBER_SOCKET_IFNAME", "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK"})
    if (name == v) return true;
  for (const char* p : {"OMPI_", "PMIX_", "SLURM_", "PMI_"})
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

using Env = std::vector<std::pair<std::string, std::string>>;

// A running program. Output goes to <dir>/<name>.out and <dir>/<name>.err.
class Process {
 public:
  Process(const std::string& name, const std::vector<std::string>& argv, const Env& env, const std::string& dir)
      : name_(name), out_path_(dir + "/" + name + ".out"), err_path_(dir + "/" + name + ".err") {
    REQUIRE_MESSAGE(!argv.empty(), "no program for " << name);
    const std::string program = find_program(argv[0]);
    REQUIRE_MESSAGE(!program.empty(), name << ": program '" << argv[0] << "' not found or not executable");
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; e && *e; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      bool overridden = is_launcher_variable(key);
      for (const auto& [k, v] : env) overridden = overridden || k == key;
      if (!overridden) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    const int out_fd = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err_fd = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE_MESSAGE((out_fd >= 0 && err_fd >= 0 && null_fd >= 0), "cannot create output files in " << dir);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setsid();
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the test died between fork and prctl
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      ::dup2(null_fd, 0);
      ::dup2(out_fd, 1);
      ::dup2(err_fd, 2);
      ::execve(program.c_str(), cargv.data(), cenv.data());
      static const char msg[] = "process_helpers: execve failed\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::close(out_fd);
    ::close(err_fd);
    ::close(null_fd);
    REQUIRE_MESSAGE(pid > 0, "fork failed for " << name << ": " << std::strerror(errno));
    pid_ = pid;
    started_ = Clock::now();
  }
  ~Process() { kill_all(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  std::string out() const { return read_text(out_path_); }
  std::string err() const { return read_text(err_path_); }

  // True once the process has exited (not reaped: see the top of the file).
  bool exited() {
    if (done_) return true;
    siginfo_t info{};
    if (::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
      done_ = true;
      code_ = info.si_code == CLD_EXITED ? info.si_status : -info.si_status;
      ended_ = Clock::now();
    }
    return done_;
  }
  // Waits until the process exits or `seconds` pass; true if it exited.
  bool wait_for(double seconds) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (!exited()) {
      if (Clock::now() >= until) return false;
      sleep_ms(10);
    }
    return true;
  }
  // Waits until `pattern` appears in stdout, the process exits, or `seconds` pass; true if it appeared.
  bool wait_for_output(const std::string& pattern, double seconds) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    for (;;) {
      if (out().find(pattern) != std::string::npos) return true;
      if (exited() || Clock::now() >= until) return out().find(pattern) != std::string::npos;
      sleep_ms(20);
    }
  }
  // One signal to the process itself (not its group).
  void signal(int sig) {
    if (!done_) ::kill(pid_, sig);
  }
  // SIGKILL to every process of the session, then reap the leader.
  void kill_all() {
    if (pid_ <= 0 || reaped_) return;
    if (!exited()) killed_by_test_ = true;
    kill_session(pid_);
    if (!done_) {
      siginfo_t info{};
      while (::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
      }
      done_ = true;
      code_ = info.si_code == CLD_EXITED ? info.si_status : -info.si_status;
      ended_ = Clock::now();
    }
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }

  // SIGKILL to the processes whose session id is `sid` (read from /proc).
  static void kill_session(pid_t sid) {
    ::kill(-sid, SIGKILL);  // the leader's process group
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string stat = read_text("/proc/" + name + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream fields(stat.substr(close + 1));
      std::string state;
      long ppid = 0, pgrp = 0, session = 0;
      fields >> state >> ppid >> pgrp >> session;
      if (fields && session == long(sid)) ::kill(pid_t(std::stol(name)), SIGKILL);
    }
  }

  bool killed_by_test() const { return killed_by_test_; }
  // Exit code, or -signal when killed by one; only meaningful once exited().
  int exit_code() const { return code_; }
  Clock::time_point ended_at() const { return ended_; }
  double run_seconds() const { return std::chrono::duration<double>(ended_ - started_).count(); }
  // "rank0: exit 1, stderr: ..." for failure messages.
  std::string describe() const {
    std::string s = name_ + ": ";
    if (!done_) s += "still running";
    else if (killed_by_test_) s += "killed by the test";
    else if (exit_code() < 0) s += "killed by signal " + std::to_string(-exit_code());
    else s += "exit " + std::to_string(exit_code());
    std::string e = err();
    if (e.size() > 4000) e = "..." + e.substr(e.size() - 4000);
    return s + "; stderr: [" + e + "]";
  }

 private:
  std::string name_, out_path_, err_path_;
  pid_t pid_ = -1;
  bool done_ = false, reaped_ = false, killed_by_test_ = false;
  int code_ = -1000;
  Clock::time_point started_, ended_;
};

// Waits for all of `procs` to exit within `seconds` (one deadline for all); true if they did.
inline bool wait_all(const std::vector<Process*>& procs, double seconds) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (;;) {
    bool all = true;
    for (Process* p : procs) all = p->exited() && all;
    if (all) return true;
    if (Clock::now() >= until) return false;
    sleep_ms(10);
  }
}

// A TCP socket (close-on-exec), closed at scope exit.
struct Socket {
  int fd = -1;
  Socket() = default;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
  Socket(Socket&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      if (fd >= 0) ::close(fd);
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
};

// A listening IPv4 socket on 0.0.0.0:port (no SO_REUSEADDR); fd -1 if the port is taken.
inline Socket listen_on(int port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  if (s.fd < 0 || ::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s.fd, 16) != 0) return Socket();
  return s;
}

// A port for a rendezvous: random in [20000, 32000), below Linux's ephemeral
// range (32768-60999), so the ring's ephemeral ports and outgoing connections
// cannot take it between this check and the program's bind; free right now
// on every interface.
inline int pick_port() {
  static std::mt19937 rng(std::random_device{}() ^ uint32_t(::getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 20000 + int(rng() % 12000);
    if (listen_on(port).fd >= 0) return port;
  }
  FAIL("no free TCP port found in 20000-31999");
  return 0;
}

// Connects to 127.0.0.1:port (blocking, close-on-exec); fd -1 if refused.
inline Socket connect_local(int port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  if (s.fd < 0 || ::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Socket();
  return s;
}

// Runs a command to completion within `seconds` (killing it after); returns
// its exit code (-signal if killed) and its combined output in `output`.
inline int run_command(const std::vector<std::string>& argv, double seconds, const std::string& dir, const std::string& name,
                       std::string* output = nullptr, const Env& env = {}) {
  Process p(name, argv, env, dir);
  const bool done = p.wait_for(seconds);
  if (!done) p.kill_all();
  if (output) *output = p.out() + p.err() + (done ? "" : "\n(killed after " + std::to_string(seconds) + " s)");
  return done ? p.exit_code() : -SIGKILL;
}

// The last "Validation-accuracy=A" a training program printed (REQUIREs one).
inline double final_validation(const std::string& log) {
  static const std::regex re(R"(Validation-accuracy=([0-9.]+))");
  double last = -1;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) last = std::stod((*it)[1]);
  REQUIRE_MESSAGE(last >= 0, "no validation accuracy in:\n" << log);
  return last;
}

}  // namespace ember::testing::process
