# Cross build for 32-bit ARM Linux, hard float (Debian armhf), agent only:
#   tools/deps.sh test     # gcc-arm-linux-gnueabihf, qemu-user, the sysroot /opt/rcs-sysroot/arm-linux-gnueabihf
#   cmake -S . -B build-armhf -DCMAKE_TOOLCHAIN_FILE=toolchains/arm-linux-gnueabihf.cmake \
#     -DWITH_COORDINATOR=OFF -DWITH_TESTS=OFF
#   cmake --build build-armhf
# Run the result with qemu-user, loader and libraries from the sysroot:
#   qemu-arm -L /opt/rcs-sysroot/arm-linux-gnueabihf build-armhf/bin/rcs-agent --help
# The sysroot is made from the target's Debian packages (apt-get download + dpkg-deb -x);
# docs/agent.md, "Cross-compiling", says how to make one by hand for another Debian release or
# architecture, and cross-sysroot.cmake how to point the build at it.
set(CMAKE_SYSTEM_PROCESSOR arm)
set(RCS_TRIPLET arm-linux-gnueabihf)
set(RCS_QEMU qemu-arm)
include(${CMAKE_CURRENT_LIST_DIR}/cross-sysroot.cmake)
