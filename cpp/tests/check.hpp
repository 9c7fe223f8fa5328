// A minimal test harness (no framework to install): CHECK records a failure and carries on;
// each test binary returns 1 when anything failed, 77 when it had nothing to run (ctest: skipped).
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace check {

inline int& failures() {
    static int n = 0;
    return n;
}

inline void fail(const char* file, int line, const std::string& what) {
    ++failures();
    std::fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what.c_str());
}

struct Case {
    std::string name;
    std::function<void()> body;
};

inline std::vector<Case>& registry() {
    static std::vector<Case> cases;
    return cases;
}

struct Register {
    Register(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

inline int run_all() {
    int passed = 0, failed = 0;
    for (auto& c : registry()) {
        int before = failures();
        try {
            c.body();
        } catch (const std::exception& e) {
            fail(__FILE__, __LINE__, c.name + " threw: " + e.what());
        }
        if (failures() == before) {
            ++passed;
            std::printf("ok   %s\n", c.name.c_str());
        } else {
            ++failed;
            std::printf("FAIL %s\n", c.name.c_str());
        }
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

}  // namespace check

#define TEST_CASE(name)                                              \
    static void name();                                              \
    static check::Register register_##name(#name, name);             \
    static void name()

#define CHECK(cond)                                                  \
    do {                                                             \
        if (!(cond)) check::fail(__FILE__, __LINE__, #cond);         \
    } while (0)

#define CHECK_MSG(cond, msg)                                                             \
    do {                                                                                 \
        if (!(cond)) check::fail(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); \
    } while (0)

// Expect ``expr`` to throw ``Type`` whose message contains ``fragment``.
#define CHECK_THROWS(Type, expr, fragment)                                                          \
    do {                                                                                            \
        bool thrown_ = false;                                                                       \
        try {                                                                                       \
            (void)(expr);                                                                           \
        } catch (const Type& e_) {                                                                  \
            thrown_ = true;                                                                         \
            if (std::string(e_.what()).find(fragment) == std::string::npos)                         \
                check::fail(__FILE__, __LINE__, std::string("message '") + e_.what() +              \
                                                    "' lacks '" + (fragment) + "'");                \
        } catch (const std::exception& e_) {                                                        \
            thrown_ = true;                                                                         \
            check::fail(__FILE__, __LINE__, std::string(#expr " threw the wrong type: ") + e_.what()); \
        }                                                                                           \
        if (!thrown_) check::fail(__FILE__, __LINE__, #expr " did not throw");                      \
    } while (0)
