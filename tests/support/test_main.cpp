// tests/support/test_main.cpp — main of the doctest binaries (build/test_ember, build/test_sim, build/test_data).
//
// Before running doctest (see `--help` for filters such as -tc=), marks the
// selected test cases whose tests/support/skip.h requirement this machine or build
// does not meet as skipped, and prints each reason with its count. With
// EMBER_TEST_RESULTS=path set, a listener appends to that file one line per
// test case: `running<TAB>name` when it starts, then `passed<TAB>name` or
// `failed<TAB>name` when it ends, or `skipped<TAB>name<TAB>reason` for a test
// case that a skip decorator (tests/support/skip.h or doctest::skip) kept from
// running; a test case that crashes the binary is left at `running`.
// tests/run_tests.sh counts from these lines. Then, when the tests ran
// kernels through the counting table (tests/support/kernel_coverage.h) — the CUDA
// backend on a GPU or on the emulator — prints how many of ops/kernels.h's
// kernels they covered. A whole-suite run that missed one fails. With
// EMBER_TEST_SHARD=k/n it runs one shard of the selected test cases (see
// keep_shard()). A command line whose filters select no test case fails
// (exit 1): it would pass having checked nothing; so does an exclusion
// (-tce=) that matches no test case. One test
// case lives here, in every binary: char pointers print as text
// (tests/support/doctest_config.h).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/support/kernel_coverage.h"
#include "tests/support/skip.h"

namespace {

// True when the command line selects a subset of the tests.
bool filtered(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    for (const char* f : {"-tc", "-tce", "-ts", "-tse", "-sf", "-sfe", "--test-case", "--test-suite", "--source-file",
                          "-sc", "--subcase", "--first", "--last", "-f=", "-l="})
      if (std::strncmp(a, f, std::strlen(f)) == 0) return true;
  }
  return false;
}

// The reason each test case skipped by a tests/support/skip.h requirement is skipped.
std::map<const doctest::TestCaseData*, std::string>& skip_reasons() {
  static std::map<const doctest::TestCaseData*, std::string> reasons;
  return reasons;
}

// True when the command line's filters (-sf, -sfe, -ts, -tse, -tc, -tce)
// select this test case: doctest's own test, through its internals (this is
// the file that holds doctest's implementation).
bool selected(const doctest::detail::TestCase& tc) {
  const doctest::detail::ContextState* cs = doctest::detail::g_cs;
  if (!cs) return true;
  const auto& f = cs->filters;
  auto in = [cs](const char* s, const std::vector<doctest::String>& filters, bool match_empty) {
    return doctest::matchesAny(s, filters, match_empty, cs->case_sensitive);
  };
  const char* file = tc.m_file.c_str();
  return in(file, f[0], true) && !in(file, f[1], false) && in(tc.m_test_suite, f[2], true) &&
         !in(tc.m_test_suite, f[3], false) && in(tc.m_name, f[4], true) && !in(tc.m_name, f[5], false);
}

// EMBER_TEST_SHARD=k/n (tests/run_tests.sh's "shards=N" suites run N
// processes of one binary side by side): this process runs every n-th of the
// selected test cases, in (file, line) order, starting at the k-th (k from
// 0). The others are moved to a test suite of their own that a
// --test-suite-exclude filter leaves out, so doctest neither runs them nor
// counts them as skipped tests. Returns n (1 when the variable is unset).
int keep_shard() {
  const char* env = std::getenv("EMBER_TEST_SHARD");
  if (!env || !*env) return 1;
  int k = -1, n = 0;
  char tail = 0;
  if (std::sscanf(env, "%d/%d%c", &k, &n, &tail) != 2 || n < 1 || k < 0 || k >= n) {
    std::fprintf(stderr, "EMBER_TEST_SHARD='%s': expected k/n with 0 <= k < n, e.g. 0/2\n", env);
    std::exit(2);
  }
  std::vector<doctest::detail::TestCase*> cases;
  for (const auto& tc : doctest::detail::getRegisteredTests())
    if (selected(tc)) cases.push_back(const_cast<doctest::detail::TestCase*>(&tc));
  std::sort(cases.begin(), cases.end(), [](const doctest::detail::TestCase* a, const doctest::detail::TestCase* b) {
    const int f = a->m_file.compare(b->m_file);
    return f != 0 ? f < 0 : a->m_line < b->m_line;
  });
  static const char kOtherShard[] = "ember: another shard";
  // The set orders test cases by line, name and file, never by suite.
  for (size_t i = 0; i < cases.size(); ++i)
    if (int(i % size_t(n)) != k) cases[i]->m_test_suite = kOtherShard;
  doctest::detail::g_cs->filters[3].push_back(kOtherShard);
  std::printf("[shard] %d of %d: %zu of the %zu selected test cases\n", k + 1, n,
              (cases.size() + size_t(n - 1 - k)) / size_t(n), cases.size());
  return n;
}

// Evaluates the tests/support/skip.h requirements of the selected test cases (each
// predicate once, only if a selected test case has it: some probe for
// programs) and sets doctest's skip flag on the test cases that miss one;
// prints the reasons.
void apply_requirements() {
  std::map<bool (*)(), bool> met;
  std::map<std::string, int> count;
  for (const auto& tc : doctest::detail::getRegisteredTests()) {
    if (!selected(tc)) continue;
    for (const auto& need : ember::testing::registered_needs()) {
      if (need.line != tc.m_line || need.file != tc.m_file.c_str()) continue;
      auto it = met.find(need.what.met);
      if (it == met.end()) it = met.emplace(need.what.met, need.what.met()).first;
      if (it->second) continue;
      // The set orders test cases by file, line and name, never by m_skip.
      const_cast<doctest::detail::TestCase&>(tc).m_skip = true;
      skip_reasons()[&tc] = need.what.missing;
      ++count[need.what.missing];
      break;
    }
  }
  for (const auto& [reason, n] : count)
    std::printf("[skip] %d test case%s: %s\n", n, n == 1 ? "" : "s", reason.c_str());
}

// Appends each test case's outcome to $EMBER_TEST_RESULTS (one write per
// line, O_APPEND: nothing is lost when the binary crashes later, and forked
// children that exit never repeat buffered text).
class ResultsListener final : public doctest::IReporter {
 public:
  explicit ResultsListener(const doctest::ContextOptions& opt) : opt_(opt) {
    const char* p = std::getenv("EMBER_TEST_RESULTS");
    if (p && *p) path_ = p;
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override { write("running", tc, nullptr); }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    if (opt_.currentTest) write(st.testCaseSuccess ? "passed" : "failed", *opt_.currentTest, nullptr);
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData& tc) override {
    // doctest also calls this for the test cases a filter (-tc=...) leaves
    // out; only selected ones that a skip decorator holds back are skipped tests.
    const auto& t = static_cast<const doctest::detail::TestCase&>(tc);
    if (!t.m_skip || opt_.no_skip || !selected(t)) return;
    const auto it = skip_reasons().find(&tc);
    write("skipped", tc, it != skip_reasons().end() ? it->second.c_str() : "doctest::skip");
  }

 private:
  void write(const char* outcome, const doctest::TestCaseData& tc, const char* reason) const {
    if (path_.empty()) return;
    std::string line = std::string(outcome) + "\t" + clean(tc.m_name);
    if (reason) line += "\t" + clean(reason);
    line += "\n";
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ::write(fd, line.data(), line.size()) != ssize_t(line.size())) {
      std::fprintf(stderr, "EMBER_TEST_RESULTS: cannot append to %s: %s\n", path_.c_str(), std::strerror(errno));
      std::exit(2);
    }
    ::close(fd);
  }
  static std::string clean(const char* s) {  // one line, tab-separated fields
    std::string r = s ? s : "";
    for (char& ch : r)
      if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
    return r;
  }
  const doctest::ContextOptions& opt_;
  std::string path_;
};
REGISTER_LISTENER("ember-results", 1, ResultsListener);

}  // namespace

// tests/support/doctest_config.h reached this binary: CAPTURE, MESSAGE and failed
// checks print a char pointer's text (they printed its address).
TEST_CASE("doctest prints a char pointer as its text, in quotes") {
  std::string text = "f16";
  const char* c = text.c_str();
  char* m = text.data();
  const char* none = nullptr;
  CHECK(doctest::toString(c) == doctest::String("\"f16\""));
  CHECK(doctest::toString(m) == doctest::String("\"f16\""));
  CHECK(doctest::toString(none) == doctest::String("nullptr"));
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  context.setAsDefaultForAssertsOutOfTestCases();  // makes the parsed filters visible to selected()
  const int shards = keep_shard();
  apply_requirements();
  size_t selected_cases = 0;
  for (const auto& tc : doctest::detail::getRegisteredTests()) selected_cases += selected(tc);
  // An exclusion (-tce=) that matches no test case is stale (a renamed test
  // case would run where it was meant to be left out): it fails too.
  const doctest::detail::ContextState* cs = doctest::detail::g_cs;
  std::vector<std::string> stale;
  for (const doctest::String& pattern : cs->filters[5]) {
    bool matches = false;
    for (const auto& tc : doctest::detail::getRegisteredTests())
      matches = matches || doctest::matchesAny(tc.m_name, {pattern}, false, cs->case_sensitive);
    if (!matches) stale.push_back(pattern.c_str());
  }
  int rc = context.run();
  if (context.shouldExit()) return rc;
  // A filter that selects nothing (a renamed test case, a typo) would pass
  // having run nothing: it fails instead. (A shard may be empty; the runner
  // checks that the shards together ran something.)
  if (selected_cases == 0 && shards == 1) {
    std::printf("no test case matches this command line's filters: nothing was checked\n");
    return rc == 0 ? 1 : rc;
  }
  for (const std::string& p : stale) std::printf("-tce='%s' excludes no test case (renamed?)\n", p.c_str());
  if (!stale.empty() && rc == 0) rc = 1;
  const auto cov = ember::testing::kernel_coverage();
  if (!cov.used) return rc;
  const bool whole_suite = !filtered(argc, argv) && shards == 1;
  std::printf("kernel coverage of %s: %zu of %d kernels of ops/kernels.h called%s\n", cov.backends.c_str(),
              cov.called.size(), ember::kNumKernels,
              whole_suite           ? ""
              : filtered(argc, argv) ? " (a filtered run: only a run of the whole suite must call every kernel)"
                                     : " (one shard: tests/run_tests.sh checks that the shards together call every kernel)");
  if (!cov.missing.empty()) {
    std::printf("never called:");
    for (const auto& m : cov.missing) std::printf(" %s", m.c_str());
    std::printf("\n");
    if (whole_suite && rc == 0) {
      std::printf("kernel coverage FAILED: the suite must call every kernel of the CUDA backend\n");
      rc = 1;
    }
  }
  return rc;
}
