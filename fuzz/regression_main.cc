// The regression driver: runs a fuzz target's LLVMFuzzerTestOneInput on every file of the
// folders (or files) named on the command line, so that the normal build (g++, no
// libFuzzer) replays the corpus and every crash the fuzzers ever found (fuzz/CMakeLists.txt
// registers one ctest entry per target). A target signals a failed invariant by aborting,
// which fails the test; an input that runs longer than libFuzzer's -timeout as
// tools/fuzz.sh sets it (10 s) is killed by SIGALRM, which fails it too.
//
//   fuzz_npy_regression fuzz/corpus/npy fuzz/regressions/npy
//
// Files whose names start with '.' (.gitkeep) are skipped. A folder that is missing, or a
// run that finds no input at all, is an error: the test must not pass by finding nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
// Optional, as in libFuzzer: called once before the first input.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

constexpr unsigned k_timeout_seconds = 10;

bool read_whole(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " DIR_OR_FILE...\n";
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    fs::path arg = argv[i];
    std::error_code ec;
    if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else if (fs::is_directory(arg, ec)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file() && entry.path().filename().string().rfind('.', 0) != 0) {
          inputs.push_back(entry.path());
        }
      }
    } else {
      std::cerr << argv[0] << ": no file or folder '" << arg.string() << "'\n";
      return 1;
    }
  }
  if (inputs.empty()) {
    std::cerr << argv[0] << ": no inputs in the folders given\n";
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  for (const auto& path : inputs) {
    std::string bytes;
    if (!read_whole(path, &bytes)) {
      std::cerr << argv[0] << ": cannot read '" << path.string() << "'\n";
      return 1;
    }
    // Named before the run, so that a crash's output says which input it was.
    std::cout << path.string() << " (" << bytes.size() << " bytes)" << std::endl;
    // A copy of exactly the input's size, as libFuzzer passes it, so that a sanitizer build
    // (tools/test.sh --sanitize) sees a read past the end.
    auto exact = std::make_unique<std::uint8_t[]>(bytes.size());
    std::copy(bytes.begin(), bytes.end(), exact.get());
    alarm(k_timeout_seconds);
    LLVMFuzzerTestOneInput(exact.get(), bytes.size());
    alarm(0);
  }
  std::cout << inputs.size() << " inputs ran without a failure\n";
  return 0;
}
