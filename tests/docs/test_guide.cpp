// tests/docs/test_guide.cpp — the docs' line links and quoted code still match the
// code (tests/docs/doc_links.h: the rules): the checker on small docs written
// next to a small source file, then README.md and every docs/*.md of the repo;
// and tests/docs/run_guide_commands.sh, which runs a doc's commands, on small docs.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/docs/doc_links.h"
#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"

namespace {

namespace fs = std::filesystem;
using ember::testing::check_doc;
using ember::testing::DocReport;
using ember::testing::TempDir;

// A temporary repository holding src/add.cpp, where docs are written and checked.
struct Repo {
  TempDir dir;
  Repo() {
    write("src/add.cpp",
          "// src/add.cpp\n"               // 1
          "int add(int a, int b) {\n"      // 2
          "  return a + b;\n"              // 3
          "}\n"                            // 4
          "\n"                             // 5
          "int twice(int x) {\n"           // 6
          "  return add(x, x);\n"          // 7
          "}\n");                          // 8
  }
  void write(const std::string& path, const std::string& text) const {
    fs::create_directories((dir.path / path).parent_path());
    std::ofstream(dir.path / path) << text;
  }
  DocReport check(const std::string& doc, const std::string& markdown) const {
    write(doc, markdown);
    return check_doc(dir.path.string(), doc);
  }
  // The errors, one per line.
  std::string errors(const std::string& doc, const std::string& markdown) const {
    std::string all;
    for (const auto& e : check(doc, markdown).errors) all += e + "\n";
    return all;
  }
};

}  // namespace

TEST_CASE("guide: line links and file links") {
  const Repo repo;
  const DocReport ok = repo.check("docs/x.md",
                                  "See [`add`](../src/add.cpp#L2) and [`twice`](../src/add.cpp#L6-L8 \"a title\"),\n"
                                  "the [folder](../src), [a page](https://example.com/a.cpp#L9), [a section](#tests),\n"
                                  "`[code](gone.md)` and a link split over\n"
                                  "two lines: [`return\n"
                                  "a + b`](../src/add.cpp#L3).\n"
                                  "```\n"
                                  "[`nope`](../src/add.cpp#L1)\n"
                                  "```\n");
  CHECK(ok.errors.empty());
  CHECK(ok.line_links == 3);
  CHECK(ok.file_links == 1);
  CHECK(repo.errors("README.md", "[`add`](src/add.cpp#L2), [`sub`](src/add.cpp#L6)") ==
        "README.md:1: src/add.cpp#L6: line 6 does not contain 'sub'\n");

  // One error line each, naming the doc's line (fenced lines counted).
  CHECK(repo.errors("docs/x.md",
                    "[`add`](../src/add.cpp#L3)\n"
                    "```\n\n```\n"
                    "[`add`](../src/add.cpp#L9) [`add`](../src/add.cpp#L2-L9)\n"
                    "[`add`](../src/gone.cpp#L2) [gone](../src/gone.cpp) [up](../../x.md)\n"
                    "[add](../src/add.cpp#L2) [`add` and `twice`](../src/add.cpp#L2)\n"
                    "[`add`](../src/add.cpp#L2-3)\n") ==
        "docs/x.md:1: ../src/add.cpp#L3: line 3 does not contain 'add' (the nearest line with it: 2)\n"
        "docs/x.md:5: ../src/add.cpp#L9: line 9 is past the end of the file (8 lines)\n"
        "docs/x.md:5: ../src/add.cpp#L2-L9: line 9 is past the end of the file (8 lines)\n"
        "docs/x.md:6: ../src/gone.cpp#L2: no such file\n"
        "docs/x.md:6: ../src/gone.cpp: no such file\n"
        "docs/x.md:6: ../../x.md: points outside the repository\n"
        "docs/x.md:7: ../src/add.cpp#L2: link text 'add' is not one code span: "
        "every line link must name the symbol it points at\n"
        "docs/x.md:7: ../src/add.cpp#L2: link text '`add` and `twice`' is not one code span: "
        "every line link must name the symbol it points at\n"
        "docs/x.md:8: ../src/add.cpp#L2-3: a line anchor is #L<n> or #L<n>-L<m>\n");
}

TEST_CASE("guide: quoted code") {
  const Repo repo;
  const DocReport ok = repo.check("docs/x.md",
                                  "```cpp\n"
                                  "// src/add.cpp:2\n"
                                  "int add(int a, int b) {\n"
                                  "    return a + b;\n"  // other indentation
                                  "}\n"
                                  "```\n"
                                  "```cpp\n"
                                  "// src/add.cpp:2\n"
                                  "int add(int a, int b) {\n"
                                  "...\n"
                                  "int twice(int x) {\n"
                                  "  // ...\n"
                                  "}\n"
                                  "```\n"
                                  "```sh\n"
                                  "# src/add.cpp:7\n"
                                  "return add(x, x);\n"
                                  "...\n"
                                  "```\n"
                                  "```cpp\n"
                                  "int not_checked();\n"
                                  "```\n"
                                  "```console\n"
                                  "// src/add.cpp:1\n"
                                  "```\n");
  CHECK(ok.errors.empty());
  CHECK(ok.quotes == 3);

  const auto quote = [&](const std::string& lines) { return repo.errors("docs/x.md", "```cpp\n" + lines + "```\n"); };
  CHECK(quote("// src/add.cpp:2\nint add(int a, int b) {\n  return a - b;\n") ==
        "docs/x.md:4: src/add.cpp:2: the doc has 'return a - b;', line 3 is 'return a + b;'\n");
  CHECK(quote("// src/add.cpp:3\nint add(int a, int b) {\n") ==
        "docs/x.md:3: src/add.cpp:3: the doc has 'int add(int a, int b) {', line 3 is 'return a + b;' (the nearest line with it: 2)\n");
  CHECK(quote("// src/add.cpp:2\nint add(int a, int b) {\n...\nint thrice(int x) {\n") ==
        "docs/x.md:5: src/add.cpp:2: 'int thrice(int x) {' is not in the 60 lines after line 2\n");
  CHECK(quote("// src/add.cpp:8\n}\n}\n") == "docs/x.md:4: src/add.cpp:8: the doc has '}', the file ends at line 8\n");
  CHECK(quote("// src/add.cpp:2\n...\n}\n") == "docs/x.md:3: src/add.cpp:2: a quote starts at its line, not with '...'\n");
  CHECK(quote("# src/gone.cpp:1\nint add(int a, int b) {\n") == "docs/x.md:2: src/gone.cpp:1: no such file\n");
  CHECK(repo.errors("docs/x.md", "\n```cpp\n// src/add.cpp:2\n") == "docs/x.md:2: code fence ``` is never closed\n");
}

// Tests run from the repo root. docs/guide.md is checked once it exists.
TEST_CASE("guide: README.md and docs/*.md point at the code they describe") {
  REQUIRE_MESSAGE(fs::exists("README.md"), "run the tests from the repository's root");
  std::vector<std::string> docs;
  for (const auto& e : fs::directory_iterator("docs"))
    if (e.path().extension() == ".md") docs.push_back("docs/" + e.path().filename().string());
  std::sort(docs.begin(), docs.end());
  docs.insert(docs.begin(), "README.md");
  std::ostringstream checked;
  for (const auto& doc : docs) {
    const DocReport r = check_doc(".", doc);
    checked << "\n  " << doc << ": " << r.line_links << " line links, " << r.file_links << " file links, "
            << r.quotes << " quotes";
    for (const auto& e : r.errors) FAIL_CHECK(e);
    if (doc == "docs/guide.md")
      CHECK_MESSAGE(r.line_links + r.file_links > 0, "docs/guide.md: no links found in it: is the parser broken?");
  }
  MESSAGE("checked" << checked.str());
}

TEST_CASE("guide: run_guide_commands.sh runs, skips and counts a doc's commands") {
  const Repo repo;
  const auto run = [&](const std::string& markdown, const std::string& name) {
    repo.write(name + ".md", markdown);
    const std::string results = repo.dir.file(name + ".results");
    ember::testing::process::Process p(name, {"bash", "tests/docs/run_guide_commands.sh", repo.dir.file(name + ".md")},
                                       {{"EMBER_TEST_RESULTS", results}}, repo.dir.path.string());
    REQUIRE_MESSAGE(p.wait_for(60), p.describe());
    return std::tuple{p.exit_code(), p.out(), ember::testing::process::read_text(results)};
  };
  const auto [code, out, results] = run(
      "```console\n$ true\n$ false\n$ build/train_resnet --gpus 0\n$ true --all-day\n```\n"
      "<!-- ci: true -->\n<!-- ci: false -->\n\n<!-- ci-skip: needs a GPU -->\n<!-- ci: true -->\n",
      "doc");
  const std::string doc = repo.dir.file("doc.md");
  CHECK(code == 1);
  CHECK(ember::testing::contains(out, "[guide] test cases: 4 | 2 passed | 1 failed | 1 skipped\n"));
  CHECK(results == "running\tguide: " + doc + ":2 true\npassed\tguide: " + doc + ":2 true\n" +
                       "running\tguide: " + doc + ":3 false\nfailed\tguide: " + doc + ":3 false\n" +
                       "skipped\tguide: " + doc + ":4 build/train_resnet --gpus 0\tneeds a GPU\n" +
                       "running\tguide: " + doc + ":5 true\npassed\tguide: " + doc + ":5 true\n");

  // Format errors: nothing runs.
  const std::string touch = "touch " + repo.dir.file("ran");
  const auto [bad_code, bad_out, bad_results] =
      run("```console\n$ " + touch + "\n$ make\n```\n<!-- ci: " + touch + " -->\n\n" +
              "```console\n$ build/train_resnet\n```\n<!-- ci: " + touch + " -->\n",
          "bad");
  const std::string bad = repo.dir.file("bad.md");
  const std::string count = bad + ":5: 1 ci comments for the 2 commands of the block at line 1";
  const std::string program = bad + ":10: the ci form runs 'touch', the command at line 8 runs 'build/train_resnet'";
  CHECK(bad_code == 1);
  CHECK(bad_out == count + "\n" + program + "\n[guide] test cases: 2 | 0 passed | 2 failed | 0 skipped\n");
  CHECK(bad_results == "failed\tguide: " + count + "\nfailed\tguide: " + program + "\n");
  CHECK(!fs::exists(repo.dir.path / "ran"));
}
