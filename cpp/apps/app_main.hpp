// What the example apps (sam_cli, model_bench) share: usage errors and the exit-code contract of the
// vitdeploy CLI: 0 success, 1 bad input or a failed model (one-line "error: ..."), 2 a bad command line.
#pragma once

#include <cstdlib>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>

#include "vitdeploy/error.hpp"

namespace app {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The integer value of ``flag`` (``minimum`` to 65536), or UsageError naming the flag.
inline int parse_int(const std::string& flag, const std::string& text, int minimum = 0) {
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < minimum || v > 1 << 16)
        throw UsageError(flag + " takes an integer of at least " + std::to_string(minimum) + ", got '" + text + "'");
    return static_cast<int>(v);
}

/// The command line, option by option: ``next()`` moves to the next argument (false at the end), ``flag()`` is it,
/// ``value()`` takes the argument after it (UsageError naming the flag when there is none).
class Args {
public:
    Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
    bool next() {
        if (++i_ >= argc_) return false;
        flag_ = argv_[i_];
        return true;
    }
    const std::string& flag() const { return flag_; }
    std::string value() {
        if (i_ + 1 >= argc_) throw UsageError(flag_ + " needs a value");
        return argv_[++i_];
    }

private:
    int argc_;
    char** argv_;
    int i_ = 0;
    std::string flag_;
};

/// ``given`` (--ort-ops), else $VITDEPLOY_ORT_OPS, else empty: the custom-op library the apps register.
inline std::string ort_ops_library(const std::string& given) {
    if (!given.empty()) return given;
    const char* env = std::getenv("VITDEPLOY_ORT_OPS");
    return env ? env : "";
}

/// parse(argc, argv) -> options (throws UsageError), then run(options) -> exit code, with errors mapped to exit codes.
template <class Parse, class Run>
int main_with_exit_codes(const char* name, int argc, char** argv, Parse parse, Run run) {
    decltype(parse(argc, argv)) options;
    try {
        options = parse(argc, argv);
    } catch (const UsageError& e) {
        std::cerr << "usage error: " << e.what() << "\nTry '" << name << " --help'.\n";
        return 2;
    }
    try {
        return run(options);
    } catch (const vitdeploy::Error& e) {
        std::cerr << "error: " << e.what() << '\n';
        return 1;
    } catch (const std::bad_alloc&) {
        std::cerr << "error: out of memory: use a smaller image or a smaller model\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "error: unexpected failure (" << e.what() << "): please report it with the command line\n";
        return 1;
    }
}

}  // namespace app
