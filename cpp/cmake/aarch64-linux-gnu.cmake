# Cross-compiling the C++ library and sam_cli for 64-bit Arm Linux on x86-64 (Debian's g++-aarch64-linux-gnu), against
# an arm64 root as the sysroot (scripts/arm-check.sh makes one: Debian 12, with libssl-dev and the runtime's wheels):
#
#   cmake -S cpp -B build/cpp-aarch64 -DCMAKE_TOOLCHAIN_FILE=cpp/cmake/aarch64-linux-gnu.cmake \
#         -DVITDEPLOY_ARM_ROOT=/var/cache/vitdeploy/arm64-root -DONNXRUNTIME_LIBRARY=.../libonnxruntime.so
#
# The programs run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR: ctest runs the tests through it).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(VITDEPLOY_ARM_ROOT "/var/cache/vitdeploy/arm64-root" CACHE PATH "The arm64 root used as the sysroot")
set(CMAKE_SYSROOT "${VITDEPLOY_ARM_ROOT}")
set(CMAKE_FIND_ROOT_PATH "${VITDEPLOY_ARM_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)  # the fetched ONNX Runtime and JSON headers live in the build folder
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR "/usr/bin/qemu-aarch64-static;-L;${VITDEPLOY_ARM_ROOT}")
