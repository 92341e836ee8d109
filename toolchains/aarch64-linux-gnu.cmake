# Cross build for 64-bit ARM Linux (Debian arm64), agent only:
#   tools/deps.sh test     # gcc-aarch64-linux-gnu, qemu-user, the sysroot /opt/rcs-sysroot/aarch64-linux-gnu
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=toolchains/aarch64-linux-gnu.cmake \
#     -DWITH_COORDINATOR=OFF -DWITH_TESTS=OFF
#   cmake --build build-aarch64
# Run the result with qemu-user, loader and libraries from the sysroot:
#   qemu-aarch64 -L /opt/rcs-sysroot/aarch64-linux-gnu build-aarch64/bin/rcs-agent --help
# The sysroot is made from the target's Debian packages (apt-get download + dpkg-deb -x);
# docs/agent.md, "Cross-compiling", says how to make one by hand for another Debian release or
# architecture, and cross-sysroot.cmake how to point the build at it.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(RCS_TRIPLET aarch64-linux-gnu)
set(RCS_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/cross-sysroot.cmake)
